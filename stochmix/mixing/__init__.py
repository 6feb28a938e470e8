"""Mixing matrices: graphs (networkx) -> sparse stochastic matrices, their checks and
spectral tools.

Conventions (see the README): the state ``Z`` has one row per node and mixing acts from
the left, ``Z <- W @ Z``; an edge ``j -> i`` with ``weight=w`` means ``W[i, j] = w``.
Federated rounds number the server 0 and client i as node ``i + 1``.
"""

from .checks import (
    check_column_stochastic,
    check_columns_sum_to_one,
    check_doubly_stochastic,
    check_row_stochastic,
    check_rows_sum_to_one,
    columns_sum_to_one,
    is_column_stochastic,
    is_doubly_stochastic,
    is_row_stochastic,
    rows_sum_to_one,
)
from .design import fastest_mixing_weights, fdla_weights
from .drops import MessageDrops
from .federated import (
    assign,
    assign_rows,
    average,
    average_rows,
    collect,
    collect_rows,
    local_diagonal,
    local_diagonal_rows,
)
from .graphs import graph_to_matrix, matrix_to_graph
from .rowsparse import RowSparse
from .sequences import (
    RULES,
    DirectedRingSequence,
    GraphSequence,
    OnePeerExponential,
    PeriodicSequence,
    RandomSequence,
    StaticSequence,
    is_strongly_connected_union,
)
from .spectral import (
    consensus_contraction,
    eigenvalues,
    ergodicity_coefficient,
    expected_assign,
    expected_average,
    expected_collect,
    expected_local_diagonal,
    expected_matrix,
    mixing_summary,
    perron_vector,
    product,
    second_largest_modulus,
    sequence_product,
    spectral_gap,
    spectral_radius,
    stationary_distributions,
    summary_table,
)
from .spectral_sequences import SequenceSpectrum, sequence_spectrum
from .star import BLOCKS, star_graph
from .weights import metropolis_hastings, uniform_in_neighbors, uniform_out_neighbors

__all__ = [
    "BLOCKS",
    "RULES",
    "SequenceSpectrum",
    "sequence_spectrum",
    "DirectedRingSequence",
    "GraphSequence",
    "MessageDrops",
    "OnePeerExponential",
    "PeriodicSequence",
    "RandomSequence",
    "RowSparse",
    "StaticSequence",
    "assign",
    "assign_rows",
    "average",
    "average_rows",
    "check_column_stochastic",
    "check_columns_sum_to_one",
    "check_doubly_stochastic",
    "check_row_stochastic",
    "check_rows_sum_to_one",
    "collect",
    "collect_rows",
    "columns_sum_to_one",
    "graph_to_matrix",
    "is_column_stochastic",
    "is_doubly_stochastic",
    "is_row_stochastic",
    "is_strongly_connected_union",
    "local_diagonal",
    "local_diagonal_rows",
    "matrix_to_graph",
    "metropolis_hastings",
    "rows_sum_to_one",
    "star_graph",
    "uniform_in_neighbors",
    "uniform_out_neighbors",
    "consensus_contraction",
    "eigenvalues",
    "ergodicity_coefficient",
    "expected_assign",
    "expected_average",
    "expected_collect",
    "expected_local_diagonal",
    "expected_matrix",
    "fastest_mixing_weights",
    "fdla_weights",
    "mixing_summary",
    "perron_vector",
    "product",
    "second_largest_modulus",
    "sequence_product",
    "spectral_gap",
    "spectral_radius",
    "stationary_distributions",
    "summary_table",
]

"""Mixing matrices: graphs (networkx) -> sparse stochastic matrices, their checks and
spectral tools.

Conventions (see the README): the state ``Z`` has one row per node and mixing acts from
the left, ``Z <- W @ Z``; an edge ``j -> i`` with ``weight=w`` means ``W[i, j] = w``.
Federated rounds number the server 0 and client i as node ``i + 1``.

Each name's module is imported when the name is first used (``stochmix.mixing.RowSparse``
or ``from stochmix.mixing import RowSparse`` imports :mod:`~stochmix.mixing.rowsparse` and
what it needs only), so that the engine, which needs the row-sparse matrices, does not pay
for the spectral tools, the sequences, the SDP weight design and the message drops.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._lazy import LazyExports

if TYPE_CHECKING:  # what the names below resolve to, for type checkers and IDEs
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
    from .polynomial import PolynomialMixing, chebyshev, fastmix, power
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
        polynomial_summary,
        polynomial_table,
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

#: each public name -> the module that defines it, imported on first use
_EXPORTS = LazyExports(
    __name__,
    {
        "check_column_stochastic": ".checks",
        "check_columns_sum_to_one": ".checks",
        "check_doubly_stochastic": ".checks",
        "check_row_stochastic": ".checks",
        "check_rows_sum_to_one": ".checks",
        "columns_sum_to_one": ".checks",
        "is_column_stochastic": ".checks",
        "is_doubly_stochastic": ".checks",
        "is_row_stochastic": ".checks",
        "rows_sum_to_one": ".checks",
        "fastest_mixing_weights": ".design",
        "fdla_weights": ".design",
        "MessageDrops": ".drops",
        "assign": ".federated",
        "assign_rows": ".federated",
        "average": ".federated",
        "average_rows": ".federated",
        "collect": ".federated",
        "collect_rows": ".federated",
        "local_diagonal": ".federated",
        "local_diagonal_rows": ".federated",
        "graph_to_matrix": ".graphs",
        "matrix_to_graph": ".graphs",
        "PolynomialMixing": ".polynomial",
        "chebyshev": ".polynomial",
        "fastmix": ".polynomial",
        "power": ".polynomial",
        "RowSparse": ".rowsparse",
        "RULES": ".sequences",
        "DirectedRingSequence": ".sequences",
        "GraphSequence": ".sequences",
        "OnePeerExponential": ".sequences",
        "PeriodicSequence": ".sequences",
        "RandomSequence": ".sequences",
        "StaticSequence": ".sequences",
        "is_strongly_connected_union": ".sequences",
        "consensus_contraction": ".spectral",
        "eigenvalues": ".spectral",
        "ergodicity_coefficient": ".spectral",
        "expected_assign": ".spectral",
        "expected_average": ".spectral",
        "expected_collect": ".spectral",
        "expected_local_diagonal": ".spectral",
        "expected_matrix": ".spectral",
        "mixing_summary": ".spectral",
        "perron_vector": ".spectral",
        "polynomial_summary": ".spectral",
        "polynomial_table": ".spectral",
        "product": ".spectral",
        "second_largest_modulus": ".spectral",
        "sequence_product": ".spectral",
        "spectral_gap": ".spectral",
        "spectral_radius": ".spectral",
        "stationary_distributions": ".spectral",
        "summary_table": ".spectral",
        "SequenceSpectrum": ".spectral_sequences",
        "sequence_spectrum": ".spectral_sequences",
        "BLOCKS": ".star",
        "star_graph": ".star",
        "metropolis_hastings": ".weights",
        "uniform_in_neighbors": ".weights",
        "uniform_out_neighbors": ".weights",
    },
)

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
    "PolynomialMixing",
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
    "chebyshev",
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
    "fastmix",
    "fdla_weights",
    "mixing_summary",
    "perron_vector",
    "polynomial_summary",
    "polynomial_table",
    "power",
    "product",
    "second_largest_modulus",
    "sequence_product",
    "spectral_gap",
    "spectral_radius",
    "stationary_distributions",
    "summary_table",
]


if not TYPE_CHECKING:  # hidden from type checkers, so that they flag a misspelt name

    def __getattr__(name: str) -> Any:
        return _EXPORTS.load(name)

    def __dir__() -> list[str]:
        return _EXPORTS.dir()

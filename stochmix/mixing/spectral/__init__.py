"""Spectral tools for mixing matrices: eigenvalues, Perron vectors, contraction factors.

Conventions as in the rest of :mod:`stochmix.mixing`: the state has one row per node and
mixing acts from the left, ``Z <- W @ Z``. A row-stochastic ``W`` (``W 1 = 1``, ``W >= 0``)
averages; its left Perron vector ``pi`` (``pi^T W = pi^T``, ``pi >= 0``, ``1^T pi = 1``)
gives the weight of each node in the consensus value, since ``W^k -> 1 pi^T`` when the
chain is ergodic. A column-stochastic ``C`` (``1^T C = 1^T``) pushes; its right Perron
vector ``v`` (``C v = v``) is where the mass ends up, ``C^k -> v 1^T``.

=============================  ========================================================
function                       quantity (``W`` an ``(n, n)`` matrix)
=============================  ========================================================
``eigenvalues(W, k)``          the ``k`` eigenvalues of largest modulus, by modulus
``spectral_radius(W)``         ``rho(W) = max |lambda_i|``
``second_largest_modulus(W)``  SLEM: largest ``|lambda|`` once the Perron eigenvalue
                               is removed (one copy of it)
``spectral_gap(W)``            ``1 - SLEM``
``perron_vector(W, side)``     ``pi`` with ``pi^T W = pi^T`` (left) or ``W v = v``
                               (right), normalized to sum one
``stationary_distributions``   one stationary distribution per closed class
``consensus_contraction``      ``||W - 1 pi^T||_2``
``ergodicity_coefficient``     Dobrushin's ``delta(W) = max_{i,j} 1/2 ||W_i - W_j||_1``
``product(matrices)``          ``W_{k} ... W_1 W_0`` (``W_0`` applied first)
``expected_matrix``            Monte Carlo ``E[builder(mask)]``
``expected_assign`` etc.       closed forms of ``E[A_S]``, ``E[C_S]``, ``E[D_S]``, ...
``mixing_summary(W)``          all of the above in one dict; ``summary_table`` prints them
``polynomial_summary(p)``      lambda_2, SLEM, gap of a polynomial ``p(W)``
                               (:mod:`stochmix.mixing.polynomial`) from W's eigenvalues;
                               ``polynomial_table`` prints several
=============================  ========================================================

Time-varying sequences (every step of a period, samples of a random sequence, products over
windows, each step checked against its weight rule) are summarized by
:func:`stochmix.mixing.spectral_sequences.sequence_spectrum`.

**Dense or sparse.** Every function takes a dense NumPy array or any SciPy sparse matrix
(and :class:`~stochmix.mixing.rowsparse.RowSparse`). ``method="auto"`` (the default) uses
LAPACK on a dense copy for ``n <= DENSE_LIMIT`` (500) and ARPACK (``eigs``/``eigsh``/
``svds`` on the matrix, or on a rank-one deflated operator, never densified) above it;
``method="dense"`` or ``"sparse"`` forces a branch. When ARPACK does not converge (spectra
clustered near the unit circle, e.g. a lazy directed ring of 1000 nodes, whose SLEM is
``cos(pi / n)``) the functions fall back to the dense computation for
``n <= DENSE_FALLBACK`` (4000) and raise ``RuntimeError`` above it.

**Stochasticity tests** use :mod:`stochmix.mixing.checks` with ``atol=1e-10`` by default
(products of many matrices drift from exact sums by rounding).

**Modules.** :mod:`._matrices` (the matrix argument, the dense/sparse branch),
:mod:`.eigen` (eigenvalues, spectral radius, SLEM, gap), :mod:`.perron` (Perron vectors,
stationary distributions), :mod:`.ergodicity` (consensus contraction, Dobrushin's
coefficient, products), :mod:`.expectations` (expected matrices under participation),
:mod:`.summaries` (``mixing_summary``, ``summary_table``), :mod:`.polynomials`
(``polynomial_summary``, ``polynomial_table``). Every name is imported from
here; the settings ``DENSE_LIMIT``, ``DENSE_FALLBACK`` (and the ARPACK ones) set here
are set where they are read (:mod:`stochmix.mixing._facade`).
"""

from __future__ import annotations

from .. import _facade
from . import _matrices, eigen, ergodicity
from ._matrices import ATOL, DENSE_LIMIT, METHODS
from .eigen import (
    DENSE_FALLBACK,
    eigenvalues,
    second_largest_modulus,
    spectral_gap,
    spectral_radius,
)
from .ergodicity import consensus_contraction, ergodicity_coefficient, product, sequence_product
from .expectations import (
    expected_assign,
    expected_average,
    expected_collect,
    expected_local_diagonal,
    expected_matrix,
)
from .perron import perron_vector, stationary_distributions
from .polynomials import POLYNOMIAL_KEYS, polynomial_summary, polynomial_table
from .summaries import SUMMARY_KEYS, mixing_summary, summary_table

_facade.forward_settings(
    __name__,
    {
        "DENSE_LIMIT": _matrices,
        "DENSE_FALLBACK": eigen,
        "_ARPACK_NCV": eigen,
        "_ARPACK_MAXITER": eigen,
        "_SEED": eigen,
        "_BLOCK": ergodicity,
    },
)

__all__ = [
    "ATOL",
    "DENSE_FALLBACK",
    "DENSE_LIMIT",
    "METHODS",
    "POLYNOMIAL_KEYS",
    "SUMMARY_KEYS",
    "consensus_contraction",
    "eigenvalues",
    "ergodicity_coefficient",
    "expected_assign",
    "expected_average",
    "expected_collect",
    "expected_local_diagonal",
    "expected_matrix",
    "mixing_summary",
    "perron_vector",
    "polynomial_summary",
    "polynomial_table",
    "product",
    "second_largest_modulus",
    "sequence_product",
    "spectral_gap",
    "spectral_radius",
    "stationary_distributions",
    "summary_table",
]

"""Eigen-solvers for mixing matrices: the eigenvalues of largest modulus, the spectral
radius, the second-largest eigenvalue modulus (SLEM) and the spectral gap.

LAPACK on a dense copy for ``n <= DENSE_LIMIT``, ARPACK above it (on the matrix, or on a
rank-one deflated operator that is never formed), with the fallback to LAPACK for
``n <= DENSE_FALLBACK`` when ARPACK does not converge. The ARPACK settings (``_ARPACK_NCV``,
``_ARPACK_MAXITER``, the fixed start vectors from ``_SEED``) live here, and so does the
one singular-value solve of the spectral tools (``||W - 1 pi^T||_2``, for
:func:`~stochmix.mixing.spectral.ergodicity.consensus_contraction`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp
from jaxtyping import Complex

from ..._lazy import lazy_module
from ..._validate import as_float, as_int
from ..checks import columns_sum_to_one, is_column_stochastic, is_row_stochastic, rows_sum_to_one
from ._matrices import ATOL, Matrix, _dense, _matrix, _nonnegative, _transpose, _use_sparse

__all__ = [
    "DENSE_FALLBACK",
    "eigenvalues",
    "second_largest_modulus",
    "spectral_gap",
    "spectral_radius",
]

la = lazy_module("scipy.linalg")
if TYPE_CHECKING:  # the module itself for the checker (spla.LinearOperator annotates)
    import scipy.sparse.linalg as spla
else:
    spla = lazy_module("scipy.sparse.linalg")
csgraph = lazy_module("scipy.sparse.csgraph")

#: Largest n for which a non-converging ARPACK run falls back to LAPACK.
DENSE_FALLBACK = 4000

_ARPACK_NCV = 40
_ARPACK_MAXITER = 300
_SEED = 20240917  # fixed ARPACK start vectors: the same matrix gives the same numbers


# ------------------------------------------------------------------------------- helpers


def _is_symmetric(A) -> bool:
    if sp.issparse(A):
        diff = abs(A - A.T)
        worst = float(diff.max()) if diff.nnz else 0.0
        scale = float(abs(A).max()) if A.nnz else 0.0
    else:
        worst = float(np.abs(A - A.T).max())
        scale = float(np.abs(A).max())
    return worst <= 1e-13 * max(scale, 1.0)


def _sort(values) -> np.ndarray:
    """Complex eigenvalues by modulus, descending; near-ties by real, then imaginary part
    descending (so the Perron eigenvalue comes before ``-rho`` and conjugate pairs stay
    together)."""
    values = np.asarray(values, dtype=complex)
    modulus = np.round(np.abs(values), 12)
    return values[np.lexsort((-values.imag, -values.real, -modulus))]


def _dense_eigvals(A) -> np.ndarray:
    dense = _dense(A)
    if _is_symmetric(dense):
        return _sort(la.eigvalsh(dense))
    return _sort(la.eigvals(dense))


def _fixed_normals(n: int, count: int = 1) -> np.ndarray:
    """``count`` standard normal vectors of length ``n`` (rows), the same on every call:
    ARPACK's start vectors and the bordering vectors of the sparse Perron solve."""
    return np.random.default_rng(_SEED).standard_normal((count, n))


def _v0(n: int) -> np.ndarray:
    return _fixed_normals(n)[0]


def _deflated(A, u: np.ndarray, w: np.ndarray) -> spla.LinearOperator:
    """The operator ``A - u w^T`` (and its transpose), never formed."""
    n = A.shape[0]
    AT = _transpose(A)
    return spla.LinearOperator(
        (n, n),
        matvec=lambda x: A @ np.ravel(x) - u * (w @ np.ravel(x)),
        rmatvec=lambda y: AT @ np.ravel(y) - w * (u @ np.ravel(y)),
        dtype=float,
    )


def _top_eigenvalues(A, k: int, deflate=None, symmetric: bool = False) -> np.ndarray:
    """The ``k`` eigenvalues of largest modulus of ``A`` (minus ``u w^T`` when
    ``deflate=(u, w)``) by ARPACK, sorted; LAPACK when ``k`` is too large for ARPACK or
    when ARPACK fails and ``n <= DENSE_FALLBACK``."""
    n = A.shape[0]

    def dense() -> np.ndarray:
        M = _dense(A)
        if deflate is not None:
            M = M - np.outer(*deflate)
        return _dense_eigvals(M)[:k]

    limit = n if symmetric else n - 1
    if k >= limit:
        return dense()
    op = A if deflate is None else _deflated(A, *deflate)
    ncv = min(n, max(2 * k + 2, _ARPACK_NCV))
    options = dict(k=k, which="LM", v0=_v0(n), ncv=ncv, maxiter=_ARPACK_MAXITER)
    try:
        if symmetric:
            values = spla.eigsh(op, return_eigenvectors=False, **options)
        else:
            values = spla.eigs(op, return_eigenvectors=False, **options)
    except spla.ArpackNoConvergence as error:
        if n <= DENSE_FALLBACK:
            return dense()
        raise RuntimeError(
            f"ARPACK did not converge on the ({n}, {n}) matrix (eigenvalues clustered in"
            " modulus?); try method='dense' if it fits in memory"
        ) from error
    return _sort(values)


def _consensus_eigenvalue_side(A, atol: float):
    """``A`` itself when its rows sum to one, ``A^T`` when its columns do, else ``None``:
    the matrix ``B`` with ``B 1 = 1`` whose spectrum is that of ``A``."""
    if rows_sum_to_one(A, atol):
        return A
    if columns_sum_to_one(A, atol):
        return _transpose(A)
    return None


def _consensus_norm(A, pi: np.ndarray, sparse: bool) -> float:
    """``||A - 1 pi^T||_2``: ``numpy.linalg.norm(., 2)`` on a dense copy, or ARPACK ``svds``
    on the operator ``A - 1 pi^T``, never formed (LAPACK when ARPACK fails and
    ``n <= DENSE_FALLBACK``)."""
    n = A.shape[0]
    ones = np.ones(n)

    def dense() -> float:
        return float(np.linalg.norm(_dense(A) - np.outer(ones, pi), 2))

    if not sparse or n < 3:
        return dense()
    op = _deflated(A, ones, pi)
    try:
        values = spla.svds(
            op, k=1, v0=_v0(n), ncv=min(n, _ARPACK_NCV), maxiter=_ARPACK_MAXITER,
            return_singular_vectors=False,
        )  # fmt: skip
    except spla.ArpackNoConvergence as error:
        if n <= DENSE_FALLBACK:
            return dense()
        raise RuntimeError(
            f"ARPACK did not converge on the ({n}, {n}) operator W - 1 pi^T; try"
            " method='dense' if it fits in memory"
        ) from error
    return float(values.max())


def _second_unit_eigenvalue(B) -> bool:
    """Whether a nonnegative ``B`` (n, n) with ``B 1 = 1`` has an eigenvalue of modulus 1
    besides one copy of 1, read off its graph (an edge i -> j where ``B[i, j] > 0``), with
    no eigen-solve and so no rounding: several closed classes (eigenvalue 1 is not simple,
    e.g. a disconnected graph) or one periodic closed class (period p > 1 puts the p-th
    roots of unity in the spectrum). Transient classes have spectral radius below 1.

    The period of a strongly connected class is the gcd over its edges u -> v of
    ``level(u) + 1 - level(v)``, with BFS levels from any node of the class.

    References:
        - E. Seneta (2006), *Non-negative Matrices and Markov Chains*, revised printing, Springer,
          Chapter 1 (irreducible matrices: a class of period p has the p-th roots of unity
          among its eigenvalues; the classes of a reducible matrix).
        - R. A. Horn and C. R. Johnson (2013), *Matrix Analysis*, 2nd ed., Cambridge University
          Press, Chapter 8 (positive and nonnegative matrices).
    """
    graph = sp.csr_array(B, dtype=float)
    graph.eliminate_zeros()
    count, labels = csgraph.connected_components(graph, directed=True, connection="strong")
    coo = graph.tocoo()
    leaves = labels[coo.row] != labels[coo.col]
    is_open = np.zeros(count, dtype=bool)
    is_open[labels[coo.row[leaves]]] = True
    closed = np.flatnonzero(~is_open)
    if closed.size != 1:
        return True
    nodes = np.flatnonzero(labels == closed[0])
    sub = graph[nodes][:, nodes].tocoo()
    levels = csgraph.shortest_path(sub.tocsr(), unweighted=True, indices=0)
    shift = np.abs(levels[sub.row] + 1 - levels[sub.col]).astype(np.int64)
    return int(np.gcd.reduce(shift)) > 1 if shift.size else False


# ----------------------------------------------------------------------- eigenvalues


def eigenvalues(W: Matrix, k: int | None = None, method: str = "auto") -> Complex[np.ndarray, " k"]:
    """The ``k`` eigenvalues of largest modulus of ``W``, sorted by modulus, descending.

    Near-ties (moduli equal to 12 decimals) are ordered by real part, then imaginary part,
    descending: for a stochastic matrix the eigenvalue 1 comes first, and ``a + bi`` comes
    right before ``a - bi``.

    Args:
        W: ``(n, n)`` dense array or SciPy sparse matrix.
        k: how many, ``1 <= k <= n``; ``None`` for all ``n`` (always computed densely).
        method: ``"auto"`` (LAPACK for ``n <= 500``, ARPACK above), ``"dense"`` or
            ``"sparse"``. ARPACK needs ``k < n - 1`` (``k < n`` for symmetric ``W``) and
            hands over to LAPACK otherwise.

    Returns:
        complex array of shape ``(k,)`` (complex even when the spectrum is real).
    """
    A = _matrix(W)
    n = A.shape[0]
    sparse = _use_sparse(n, method)
    if k is None:
        return _dense_eigvals(A)
    k = as_int(k, "k", minimum=1)
    if k > n:
        raise ValueError(f"k must be <= n = {n}, got {k}")
    if not sparse:
        return _dense_eigvals(A)[:k]
    return _top_eigenvalues(A, k, symmetric=_is_symmetric(A))


def spectral_radius(W: Matrix, method: str = "auto", atol: float = ATOL) -> float:
    """``rho(W) = max_i |lambda_i(W)|``.

    A nonnegative ``W`` whose rows (or columns) all sum to one has ``rho(W) = 1`` exactly
    (``||W||_inf = 1`` bounds it, ``W 1 = 1`` attains it); that case is answered without an
    eigen-solve. Otherwise LAPACK (``n <= 500``) or ARPACK ``eigs(k=1)``.

    Args:
        W: ``(n, n)`` dense array or SciPy sparse matrix.
        method: ``"auto"``, ``"dense"`` or ``"sparse"``.
        atol: tolerance of the stochasticity test.
    """
    A = _matrix(W)
    atol = as_float(atol, "atol", nonnegative=True)
    use_sparse = _use_sparse(A.shape[0], method)
    if is_row_stochastic(A, atol) or is_column_stochastic(A, atol):
        return 1.0
    if not use_sparse:
        return float(np.abs(_dense_eigvals(A)[0]))
    return float(np.abs(_top_eigenvalues(A, 1, symmetric=_is_symmetric(A))[0]))


def second_largest_modulus(W: Matrix, method: str = "auto", atol: float = ATOL) -> float:
    """SLEM: the largest ``|lambda|`` among the eigenvalues of ``W`` other than the Perron one.

    When the rows (or the columns) of ``W`` sum to one, ``1`` is an eigenvalue, and it is
    "the Perron one": one copy of it is removed and the SLEM is the largest modulus of the
    ``n - 1`` others. For a stochastic matrix this is the second-largest ``|lambda|``
    counted with multiplicity: 1 when the eigenvalue 1 is not simple (several closed
    classes, e.g. a disconnected graph) or when ``-1`` or another unit-modulus eigenvalue
    is present (a periodic chain). Otherwise the eigenvalue of largest modulus is removed
    and the SLEM is ``|lambda_2|``. A ``(1, 1)`` matrix has SLEM 0. For a nonnegative
    ``W`` whose rows (or columns) sum to one, whether the SLEM is 1 is read off its graph
    first (:func:`_second_unit_eigenvalue`: several closed classes, or a periodic one), and
    then it is exactly 1.0, with no eigen-solve: a disconnected step has gap exactly 0, not
    ``+-2e-16`` from LAPACK's rounding of the two unit eigenvalues. Otherwise every
    ``|lambda| <= 1``, and a rounding excess above 1 is clipped.

    The sparse branch (``n > 500``) uses Brauer's deflation: if ``B 1 = 1`` then
    ``B - 1 w^T`` with ``w = 1/n`` has the spectrum of ``B`` with one 1 replaced by
    ``1 - w^T 1 = 0``, so the SLEM is ``rho(B - 1 w^T)``, one ARPACK eigenvalue of an
    operator that is never formed (``eigsh`` when ``B`` is symmetric).

    Args:
        W: ``(n, n)`` dense array or SciPy sparse matrix.
        method: ``"auto"``, ``"dense"`` or ``"sparse"``.
        atol: tolerance of the "rows / columns sum to one" tests.
    """
    A = _matrix(W)
    atol = as_float(atol, "atol", nonnegative=True)
    n = A.shape[0]
    use_sparse = _use_sparse(n, method)
    if n == 1:
        return 0.0
    B = _consensus_eigenvalue_side(A, atol)
    nonnegative = _nonnegative(A)
    if B is not None and nonnegative and _second_unit_eigenvalue(B):
        return 1.0  # exactly: the graph says so, no eigen-solve to round it
    if B is None:
        if not use_sparse:
            return float(np.abs(_dense_eigvals(A)[1]))
        return float(np.abs(_top_eigenvalues(A, 2, symmetric=_is_symmetric(A))[1]))
    if not use_sparse:
        values = _dense_eigvals(A)
        rest = np.delete(values, np.argmin(np.abs(values - 1.0)))
        slem = float(np.abs(rest).max())
    else:
        deflate = (np.ones(n), np.full(n, 1.0 / n))
        values = _top_eigenvalues(B, 1, deflate=deflate, symmetric=_is_symmetric(B))
        slem = float(np.abs(values[0]))
    return min(slem, 1.0) if nonnegative else slem


def spectral_gap(W: Matrix, method: str = "auto", atol: float = ATOL) -> float:
    """``1 - second_largest_modulus(W)``: the spectral gap, 1 for exact averaging
    ``1 1^T / n``, and exactly 0.0 for a stochastic matrix with several closed classes
    (block diagonal: a disconnected graph) or a periodic closed class (decided from the
    graph, see :func:`second_largest_modulus`). A reducible matrix with one closed class
    and transient nodes has a positive gap."""
    return 1.0 - second_largest_modulus(W, method=method, atol=atol)

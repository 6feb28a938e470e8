"""Contraction to consensus and time products of mixing matrices: the consensus contraction
``||W - 1 pi^T||_2``, Dobrushin's ergodicity coefficient ``delta(W)``, and the products
``W_k ... W_1 W_0`` of a list or of a window of a time-varying graph sequence.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import scipy.sparse as sp
from jaxtyping import Real

from ..._validate import _show, as_float, as_int, as_real_array, choice
from ..checks import rows_sum_to_one
from ..rowsparse import RowSparse
from ._matrices import ATOL, METHODS, Matrix, Result, _dense, _matrix, _nonnegative, _use_sparse
from .eigen import _consensus_norm
from .perron import perron_vector

__all__ = [
    "consensus_contraction",
    "ergodicity_coefficient",
    "product",
    "sequence_product",
]

_BLOCK = 1 << 22  # entries per block in the ergodicity coefficient


# ----------------------------------------------------------------------- contraction


def consensus_contraction(
    W: Matrix, pi: Real[np.ndarray, " n"] | None = None, method: str = "auto"
) -> float:
    """``||W - 1 pi^T||_2``, the spectral norm of ``W`` on the disagreement.

    With ``pi`` the left Perron vector of a row-stochastic ``W``,
    ``(W - 1 pi^T)^k = W^k - 1 pi^T``, so for every state ``Z``,
    ``||W Z - 1 pi^T Z|| <= ||W - 1 pi^T||_2 ||Z - 1 pi^T Z||``: one step shrinks the
    distance to the consensus by this factor (when it is below 1). For a symmetric doubly
    stochastic ``W`` it equals the SLEM; in general it is at least the SLEM. For a
    column-stochastic ``C`` pass ``C.T``: ``||C^T - 1 v^T||_2 = ||C - v 1^T||_2``.

    Args:
        W: ``(n, n)`` dense array or SciPy sparse matrix.
        pi: shape ``(n,)``; by default ``perron_vector(W, "left")``.
        method: ``"auto"`` (``numpy.linalg.norm(., 2)`` for ``n <= 500``, ARPACK ``svds``
            on the operator ``W - 1 pi^T``, never formed, above), ``"dense"``, ``"sparse"``.
    """
    A = _matrix(W)
    n = A.shape[0]
    sparse = _use_sparse(n, method)
    if pi is None:
        pi = perron_vector(A, "left", method=method)
    else:
        pi = as_real_array(pi, "pi", shape=(n,))
    return _consensus_norm(A, pi, sparse)


# ---------------------------------------------------------------------- ergodicity


def _ergodicity_dense(A: np.ndarray, bound: float) -> float:
    n = A.shape[0]
    chunk = max(1, _BLOCK // (n * n))
    best = 0.0
    for start in range(0, n, chunk):
        block = A[start : start + chunk]
        distance = 0.5 * np.abs(block[:, None, :] - A[None, :, :]).sum(axis=2)
        best = max(best, float(distance.max()))
        if best >= bound * (1 - 1e-15):
            break
    return best


def _ergodicity_sparse(A: sp.csr_array, r: np.ndarray, bound: float) -> float:
    """``max_{i,j} 1/2 ||A_i - A_j||_1`` through the overlaps of the rows' supports:
    ``1/2 ||a - b||_1 = 1/2 (||a||_1 + ||b||_1) - sum_k m(a_k, b_k)`` with
    ``m(x, y) = min(|x|, |y|)`` when x and y have the same sign, else 0; only columns
    where both rows are nonzero contribute, so a block of rows costs the number of
    (entry, entry in the same column) pairs it touches."""
    n = A.shape[0]
    csc = A.tocsc()
    csc.sort_indices()
    column_nnz = np.diff(csc.indptr)
    row_of = np.repeat(np.arange(n), np.diff(A.indptr))
    work = np.bincount(row_of, weights=column_nnz[A.indices], minlength=n)
    cumulative = np.concatenate([[0.0], np.cumsum(work)])
    rows_per_block = max(1, _BLOCK // n)
    best = 0.0
    start = 0
    while start < n:
        stop = int(np.searchsorted(cumulative, cumulative[start] + _BLOCK, side="right")) - 1
        stop = min(max(stop, start + 1), start + rows_per_block, n)
        lo, hi = A.indptr[start], A.indptr[stop]
        cols = A.indices[lo:hi]
        counts = column_nnz[cols]
        total = int(counts.sum())
        offsets = np.cumsum(counts) - counts
        index = np.arange(total) - np.repeat(offsets, counts) + np.repeat(csc.indptr[cols], counts)
        a = np.repeat(row_of[lo:hi] - start, counts)
        va = np.repeat(A.data[lo:hi], counts)
        j, vb = csc.indices[index], csc.data[index]
        overlap = np.where(va * vb > 0, np.minimum(np.abs(va), np.abs(vb)), 0.0)
        size = stop - start
        shared = np.bincount(a * n + j, weights=overlap, minlength=size * n).reshape(size, n)
        distance = 0.5 * (r[start:stop, None] + r[None, :]) - shared
        best = max(best, float(distance.max()))
        if best >= bound * (1 - 1e-15):
            break
        start = stop
    return best


def ergodicity_coefficient(W: Matrix, method: str = "auto", atol: float = ATOL) -> float:
    """Dobrushin's ergodicity coefficient ``delta(W) = max_{i,j} 1/2 ||W_i - W_j||_1``.

    For row-stochastic ``W`` this is ``1 - min_{i,j} sum_k min(W_ik, W_jk)`` in [0, 1]: 0
    for exact averaging ``1 pi^T``, 1 for the identity or whenever two rows have disjoint
    supports (every sparse graph with two nodes at distance >= 3). It is the contraction
    of disagreement in the l1/total-variation sense,
    ``||x^T W||_1 <= delta(W) ||x||_1`` for ``x^T 1 = 0``, hence sub-multiplicative on
    matrices whose rows sum to one: ``delta(A B) <= delta(A) delta(B)``. Signed matrices
    whose rows sum to one are accepted (Seneta's ``tau_1``; it may exceed 1).

    Exact for every n. Cost: dense input (or ``method="dense"``) ``O(n^3)`` by blocks of
    rows (a second or two at n = 600, about a minute at n = 2000); sparse input (or
    ``method="sparse"``) ``O(sum_k nnz(W[:, k])^2 + n^2)`` through the overlaps of the
    rows' supports. Either holds about 4e6 numbers of work in memory at a time. Both
    stop as soon as a pair of rows reaches the upper bound
    ``max_{i != j} (||W_i||_1 + ||W_j||_1) / 2`` (1 for row-stochastic ``W``): on a sparse
    graph two rows with disjoint supports are found in the first block, so even
    ``n = 10^5`` is fast. A matrix with a dense column (the FedAvg rounds' server column)
    costs ``n^2`` pairs for it.

    Args:
        W: ``(n, n)`` dense array or SciPy sparse matrix whose rows sum to one.
        method: ``"auto"`` (by storage), ``"dense"`` or ``"sparse"``.
        atol: tolerance of the "rows sum to one" test.

    Raises:
        ValueError: when a row of ``W`` does not sum to one.
    """
    A = _matrix(W)
    atol = as_float(atol, "atol", nonnegative=True)
    method = choice(method, "method", METHODS)
    if not rows_sum_to_one(A, atol):
        raise ValueError(
            "W must have rows summing to one (row-stochastic) for the ergodicity"
            f" coefficient; row sums range over [{_dense_sums(A).min()!r},"
            f" {_dense_sums(A).max()!r}]"
        )
    n = A.shape[0]
    if n == 1:
        return 0.0
    sparse = sp.issparse(A) if method == "auto" else method == "sparse"
    r = np.asarray(abs(A).sum(axis=1)).ravel()
    top = np.sort(r)[-2:]
    bound = 0.5 * float(top.sum())
    if sparse:
        value = _ergodicity_sparse(sp.csr_array(A), r, bound)
    else:
        value = _ergodicity_dense(_dense(A), bound)
    # rounding may put the maximum a few ulps above its bound (1 for row-stochastic W)
    ceiling = 1.0 if _nonnegative(A) else bound
    return float(min(max(value, 0.0), ceiling))


def _dense_sums(A) -> np.ndarray:
    return np.asarray(A.sum(axis=1)).ravel()


# ------------------------------------------------------------------------- products


def product(matrices: Iterable[Matrix]) -> Result:
    """The time product ``W_{k} ⋯ W_1 W_0`` of ``matrices = [W_0, W_1, ..., W_k]``.

    ``W_0`` is applied first: ``Z_{k+1} = W_k ... W_0 Z_0``. All ``(n, n)``; the result
    is a CSR array when every factor is sparse (beware fill-in: a product of sparse mixing
    matrices over a connected window is dense), else a dense array.

    Args:
        matrices: a non-empty iterable of ``(n, n)`` dense arrays or sparse matrices.
    """
    if (
        isinstance(matrices, (str, bytes, np.ndarray, RowSparse))
        or sp.issparse(matrices)
        or not hasattr(matrices, "__iter__")
    ):
        raise TypeError(f"matrices must be an iterable of matrices (a list), got {_show(matrices)}")
    result = None
    for t, matrix in enumerate(matrices):
        A = _matrix(matrix, f"matrices[{t}]")
        if result is None:
            result = A
            continue
        if A.shape != result.shape:
            raise ValueError(f"matrices[{t}] has shape {A.shape}, expected {result.shape}")
        if sp.issparse(A) != sp.issparse(result):
            A, result = _dense(A), _dense(result)
        result = A @ result
    if result is None:
        raise ValueError("matrices must hold at least one matrix")
    return sp.csr_array(result) if sp.issparse(result) else np.asarray(result)


def sequence_product(sequence, start: int, length: int, rule: str = "row") -> Result:
    """``W_{start+length-1} ⋯ W_{start+1} W_start`` of a time-varying graph sequence.

    Args:
        sequence: a :class:`~stochmix.mixing.sequences.GraphSequence` (anything with
            ``matrix(k, rule)``).
        start: first step, ``>= 0``.
        length: number of steps, ``>= 1``.
        rule: weight rule passed to ``sequence.matrix`` (one of
            :data:`~stochmix.mixing.RULES`: ``"natural"``, ``"metropolis"``, ``"row"``,
            ``"column"``, ``"fastest"``, ``"fdla"``).

    Returns:
        ``(n, n)`` CSR array (see :func:`product`).
    """
    if not callable(getattr(sequence, "matrix", None)):
        raise TypeError(
            f"sequence must be a GraphSequence (with matrix(k, rule)), got"
            f" {type(sequence).__name__}: {_show(sequence)}"
        )
    start = as_int(start, "start", minimum=0)
    length = as_int(length, "length", minimum=1)
    return product(sequence.matrix(k, rule) for k in range(start, start + length))

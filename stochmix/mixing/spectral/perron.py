"""Perron vectors of mixing matrices: the stationary distributions of a stochastic matrix
(one per closed class of its chain) and the Perron vector for the eigenvalue 1, left
(``pi^T W = pi^T``, the weights of the consensus) or right (``W v = v``, where pushed mass
ends up), normalized to sum one.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from jaxtyping import Float

from ..._lazy import lazy_module
from ..._validate import as_float, choice
from ..checks import is_row_stochastic
from ._matrices import ATOL, Matrix, _dense, _matrix, _transpose, _use_sparse
from .eigen import _fixed_normals

__all__ = [
    "perron_vector",
    "stationary_distributions",
]

la = lazy_module("scipy.linalg")
spla = lazy_module("scipy.sparse.linalg")
csgraph = lazy_module("scipy.sparse.csgraph")


def _closed_classes(P) -> list[np.ndarray]:
    """The closed communicating classes of the chain with transitions ``P[i, j] > 0``
    (strongly connected components with no edge leaving them), as sorted index arrays."""
    n = P.shape[0]
    coo = sp.coo_array(P)
    keep = coo.data > 0
    rows, cols = coo.row[keep], coo.col[keep]
    graph = sp.csr_array((np.ones(rows.size), (rows, cols)), shape=(n, n))
    count, labels = csgraph.connected_components(graph, directed=True, connection="strong")
    leaving = labels[rows] != labels[cols]
    is_open = np.zeros(count, dtype=bool)
    is_open[labels[rows[leaving]]] = True
    order = np.argsort(labels, kind="stable")
    groups = np.split(order, np.cumsum(np.bincount(labels, minlength=count))[:-1])
    return [np.sort(groups[c]) for c in np.flatnonzero(~is_open)]


def _class_distribution(P, members: np.ndarray, sparse: bool) -> np.ndarray:
    """Stationary distribution of the irreducible stochastic block ``P[C, C]``: solve
    ``(P_C^T - I) x = 0`` with its last equation replaced by ``1^T x = 1`` (nonsingular,
    since the equations' only dependency involves all of them)."""
    m = members.size
    if m == 1:
        return np.ones(1)
    rhs = np.zeros(m)
    rhs[-1] = 1.0
    if sp.issparse(P):
        block = P[members][:, members]
    else:
        block = P[np.ix_(members, members)]
    if sparse:
        system = (sp.csr_array(block).T - sp.eye_array(m)).tocsr()
        system = sp.vstack([system[:-1], sp.csr_array(np.ones((1, m)))]).tocsc()
        x = spla.splu(system).solve(rhs)
    else:
        system = _dense(block).T - np.eye(m)
        system[-1] = 1.0
        x = la.solve(system, rhs)
    x = np.maximum(x, 0.0)
    return x / x.sum()


def _chain(A, side: str):
    """The transition matrix ``P`` whose stationary row vectors are the Perron vectors of
    ``A`` on ``side``: ``A`` for left, ``A^T`` for right."""
    return A if side == "left" else _transpose(A)


def stationary_distributions(
    W: Matrix, side: str = "left", method: str = "auto", atol: float = ATOL
) -> Float[np.ndarray, "c n"]:
    """Every extreme stationary distribution of a stochastic matrix, one per closed class.

    For row-stochastic ``W`` (``side="left"``) the vectors ``pi >= 0``, ``1^T pi = 1``,
    ``pi^T W = pi^T`` form a simplex whose vertices are the stationary distributions of the
    closed classes of the chain ``W`` (node i moves to j when ``W[i, j] > 0``): strongly
    connected sets of nodes that no edge leaves. Transient nodes get 0. The eigenvalue 1
    of ``W`` is semisimple with multiplicity ``c`` = the number of closed classes. With
    ``side="right"`` the same for a column-stochastic ``W`` and ``W v = v`` (the chain
    ``W^T``).

    Example: the FedAvg round ``average(S, q) @ assign(S)`` with absent clients has one
    closed class per absent client (its node keeps its own value) plus the server's.

    Args:
        W: ``(n, n)`` row-stochastic (left) or column-stochastic (right) matrix.
        side: ``"left"`` or ``"right"``.
        method: ``"auto"``, ``"dense"`` or ``"sparse"`` (a sparse LU per class).
        atol: tolerance of the stochasticity test.

    Returns:
        ``(c, n)`` array, one distribution per row, ordered by the smallest node of each
        class.
    """
    side = choice(side, "side", ("left", "right"))
    A = _matrix(W)
    atol = as_float(atol, "atol", nonnegative=True)
    sparse = _use_sparse(A.shape[0], method)
    P = _chain(A, side)
    if not is_row_stochastic(P, atol):
        kind = "row" if side == "left" else "column"
        raise ValueError(
            f"W must be {kind}-stochastic for its {side} stationary distributions (side={side!r})"
        )
    classes = sorted(_closed_classes(P), key=lambda members: members[0])
    out = np.zeros((len(classes), A.shape[0]))
    for t, members in enumerate(classes):
        out[t, members] = _class_distribution(P, members, sparse)
    return out


def _null_vector(P, sparse: bool) -> np.ndarray:
    """The ``x`` with ``x^T P = x^T`` (a one-dimensional solution space), any scale."""
    n = P.shape[0]
    if not sparse:
        M = _dense(P).T - np.eye(n)
        basis = la.null_space(M, rcond=max(1e-12, n * 1e-13))
        d = basis.shape[1]
        if d == 0:
            raise ValueError("1 is not an eigenvalue of W (to working precision)")
        if d > 1:
            raise ValueError(
                f"eigenvalue 1 of W is not simple (eigenspace of dimension {d}), so its"
                " Perron vector is not unique"
            )
        return basis[:, 0]
    # bordered system [[P^T - I, c], [r^T, 0]] [x; mu] = [0; 1]: nonsingular exactly when
    # the eigenvalue 1 is simple (for generic c, r), and then mu = 0 and P^T x = x.
    c, r = _fixed_normals(n, 2)
    M = (sp.csr_array(_transpose(P)) - sp.eye_array(n)).tocsr()
    system = sp.block_array(
        [[M, sp.csr_array(c[:, None])], [sp.csr_array(r[None, :]), None]], format="csc"
    )
    rhs = np.zeros(n + 1)
    rhs[-1] = 1.0
    try:
        solution = spla.splu(system).solve(rhs)
    except RuntimeError as error:
        raise ValueError(
            "eigenvalue 1 of W is not simple (singular bordered system), so its Perron"
            " vector is not unique"
        ) from error
    x, mu = solution[:n], solution[n]
    scale = np.abs(x).max()
    if not np.isfinite(solution).all() or scale == 0:
        raise ValueError("eigenvalue 1 of W is not simple; its Perron vector is not unique")
    residual = np.abs(M @ x).max() / scale
    if abs(mu) > 1e-8 * scale or residual > 1e-8:
        raise ValueError(
            "1 is not a simple eigenvalue of W (to working precision): no unique Perron vector"
        )
    return x


def perron_vector(
    W: Matrix, side: str = "left", method: str = "auto", atol: float = ATOL
) -> Float[np.ndarray, " n"]:
    """The Perron vector of ``W`` for the eigenvalue 1, normalized to sum one.

    ``side="left"``: ``pi`` with ``pi^T W = pi^T``, ``1^T pi = 1`` (for row-stochastic
    ``W``, ``pi >= 0`` and ``W^k -> 1 pi^T`` when the chain is also aperiodic: the weights
    of the consensus). ``side="right"``: ``v`` with ``W v = v``, ``1^T v = 1`` (for
    column-stochastic ``W``, where pushed mass ends up).

    How it is computed:

    * ``W`` stochastic on the side asked for (row-stochastic for left, column for right):
      through the chain's closed classes (see :func:`stationary_distributions`). Reducible
      matrices are fine as long as one class is closed, e.g. the full-participation FedAvg
      round ``1 e_0^T`` (``pi = e_0``): transient nodes get 0. The eigenvalue 1 of a
      stochastic matrix is semisimple, so it is simple exactly when there is one closed
      class, and then the nonnegative ``pi`` is unique. With several closed classes
      (absent clients isolated in a FedAvg round, a disconnected graph) every convex
      combination of the classes' distributions is stationary: ``ValueError``;
      :func:`stationary_distributions` returns them all. The linear solve per class is
      dense LAPACK, or on the sparse branch a sparse LU (``splu``) of ``(P_C^T - I)``
      with one equation replaced by the normalization ``1^T x = 1``.
    * Otherwise (signed weights whose rows sum to one, the other side of a stochastic
      matrix, ...): the null space of ``W^T - I`` (left) or ``W - I`` (right), by SVD
      (``scipy.linalg.null_space``) or, on the sparse branch, a sparse LU of a bordered
      system. A null space of dimension other than one, or an eigenvector summing to 0,
      raises ``ValueError``. The result may have negative entries.

    Args:
        W: ``(n, n)`` dense array or SciPy sparse matrix.
        side: ``"left"`` or ``"right"``.
        method: ``"auto"``, ``"dense"`` or ``"sparse"``.
        atol: tolerance of the stochasticity test.

    Returns:
        shape ``(n,)``, summing to one.
    """
    side = choice(side, "side", ("left", "right"))
    A = _matrix(W)
    atol = as_float(atol, "atol", nonnegative=True)
    n = A.shape[0]
    sparse = _use_sparse(n, method)
    P = _chain(A, side)
    if is_row_stochastic(P, atol):
        classes = _closed_classes(P)
        if len(classes) > 1:
            first = ", ".join(str(int(c[0])) for c in sorted(classes, key=lambda c: c[0])[:5])
            raise ValueError(
                f"eigenvalue 1 of W is not simple: the chain has {len(classes)} closed"
                f" classes (containing nodes {first}{', ...' if len(classes) > 5 else ''}),"
                f" so its {side} Perron vector is not unique; stationary_distributions(W)"
                " gives one per class"
            )
        out = np.zeros(n)
        out[classes[0]] = _class_distribution(P, classes[0], sparse)
        return out
    x = _null_vector(P, sparse)
    total = x.sum()
    if abs(total) <= 1e-12 * np.abs(x).sum():
        raise ValueError(
            f"the {side} eigenvector of W for eigenvalue 1 sums to zero: it cannot be"
            " normalized to sum one"
        )
    return x / total

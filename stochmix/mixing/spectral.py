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
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Mapping

import numpy as np
import scipy.sparse as sp
from jaxtyping import Complex, Float, Real

from .._lazy import lazy_module
from .._validate import (
    _show,
    as_bool,
    as_bool_array,
    as_float,
    as_int,
    as_nonnegative,
    as_real_array,
    as_seed,
    choice,
)
from .checks import (
    check_matrix,
    columns_sum_to_one,
    is_column_stochastic,
    is_row_stochastic,
    rows_sum_to_one,
)
from .rowsparse import RowSparse

la = lazy_module("scipy.linalg")
spla = lazy_module("scipy.sparse.linalg")
csgraph = lazy_module("scipy.sparse.csgraph")

Matrix = Real[np.ndarray, "m n"] | sp.sparray | sp.spmatrix | RowSparse
Result = Float[np.ndarray, "n n"] | sp.csr_array

#: Largest n handled by LAPACK under ``method="auto"``.
DENSE_LIMIT = 500
#: Largest n for which a non-converging ARPACK run falls back to LAPACK.
DENSE_FALLBACK = 4000
#: Branch choices accepted by the ``method`` argument.
METHODS = ("auto", "dense", "sparse")
#: Tolerance of the stochasticity tests.
ATOL = 1e-10

_ARPACK_NCV = 40
_ARPACK_MAXITER = 300
_SEED = 20240917  # fixed ARPACK start vectors: the same matrix gives the same numbers
_BLOCK = 1 << 22  # entries per block in the ergodicity coefficient


# ------------------------------------------------------------------------------- helpers


def _matrix(W, name: str = "W", square: bool = True) -> np.ndarray | sp.csr_array:
    """``W`` as a float ndarray or canonical float CSR array, after validation."""
    if isinstance(W, RowSparse):
        W = W.tocsr()
    check_matrix(W, name)
    if isinstance(W, np.ndarray):
        A = np.array(W, dtype=float)
        values = A
    else:
        A = sp.csr_array(W).astype(float)
        A.sum_duplicates()
        values = A.data
    if square and A.shape[0] != A.shape[1]:
        raise ValueError(f"{name} must be a square matrix, got shape {A.shape}")
    if A.shape[0] == 0:
        raise ValueError(f"{name} must have at least one row, got shape {A.shape}")
    if not np.isfinite(values).all():
        raise ValueError(f"{name} must have finite entries")
    return A


def _use_sparse(n: int, method: str) -> bool:
    method = choice(method, "method", METHODS)
    if method == "auto":
        return n > DENSE_LIMIT
    return method == "sparse"


def _dense(A) -> np.ndarray:
    return A.toarray() if sp.issparse(A) else A


def _transpose(A):
    return A.T.tocsr() if sp.issparse(A) else A.T


def _nonnegative(A) -> bool:
    values = A.data if sp.issparse(A) else A
    return bool((values >= 0).all())


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


def _v0(n: int) -> np.ndarray:
    return np.random.default_rng(_SEED).standard_normal(n)


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
    and the SLEM is ``|lambda_2|``. A ``(1, 1)`` matrix has SLEM 0. A nonnegative ``W``
    whose rows (or columns) sum to one has every ``|lambda| <= 1``, so a rounding excess
    above 1 is clipped (a disconnected step has SLEM 1 and gap 0, not ``-2e-16``).

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
    return min(slem, 1.0) if _nonnegative(A) else slem


def spectral_gap(W: Matrix, method: str = "auto", atol: float = ATOL) -> float:
    """``1 - second_largest_modulus(W)``: the spectral gap (0 for a reducible or periodic
    stochastic matrix, 1 for exact averaging ``1 1^T / n``)."""
    return 1.0 - second_largest_modulus(W, method=method, atol=atol)


# ------------------------------------------------------------------- Perron vectors


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
    rng = np.random.default_rng(_SEED)
    c, r = rng.standard_normal(n), rng.standard_normal(n)
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
    ones = np.ones(n)
    if not sparse or n < 3:
        return float(np.linalg.norm(_dense(A) - np.outer(ones, pi), 2))
    op = _deflated(A, ones, pi)
    try:
        values = spla.svds(
            op, k=1, v0=_v0(n), ncv=min(n, _ARPACK_NCV), maxiter=_ARPACK_MAXITER,
            return_singular_vectors=False,
        )  # fmt: skip
    except spla.ArpackNoConvergence as error:
        if n <= DENSE_FALLBACK:
            return float(np.linalg.norm(_dense(A) - np.outer(ones, pi), 2))
        raise RuntimeError(
            f"ARPACK did not converge on the ({n}, {n}) operator W - 1 pi^T; try"
            " method='dense' if it fits in memory"
        ) from error
    return float(values.max())


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
    """The time product ``W_{k} ... W_1 W_0`` of ``matrices = [W_0, W_1, ..., W_k]``.

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
    """``W_{start+length-1} ... W_{start+1} W_start`` of a time-varying graph sequence.

    Args:
        sequence: a :class:`~stochmix.mixing.sequences.GraphSequence` (anything with
            ``matrix(k, rule)``).
        start: first step, ``>= 0``.
        length: number of steps, ``>= 1``.
        rule: weight rule passed to ``sequence.matrix`` (``"natural"``, ``"metropolis"``,
            ``"row"``, ``"column"``).

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


# --------------------------------------------------------------------- expectations


def _mask_stream(process_or_masks, rounds, seed) -> tuple[Iterable, int]:
    if callable(getattr(process_or_masks, "masks", None)) or callable(
        getattr(process_or_masks, "sample", None)
    ):
        if rounds is None:
            raise ValueError("rounds is required when process_or_masks is a process")
        rounds = as_int(rounds, "rounds", minimum=1)
        if callable(getattr(process_or_masks, "masks", None)):
            return itertools.islice(process_or_masks.masks(seed), rounds), rounds
        return process_or_masks.sample(rounds, seed), rounds
    try:
        masks = as_bool_array(process_or_masks, "process_or_masks")
    except TypeError:
        raise TypeError(
            "process_or_masks must be a participation process (with .masks(seed)) or a"
            f" boolean (rounds, N) array, got {type(process_or_masks).__name__}"
            f" {_show(process_or_masks)} (dtype {np.asarray(process_or_masks).dtype})"
        ) from None
    if masks.ndim != 2 or masks.shape[0] == 0:
        raise ValueError(
            f"process_or_masks must have shape (rounds, N) with rounds >= 1, got {masks.shape}"
        )
    if rounds is not None:
        rounds = as_int(rounds, "rounds", minimum=1)
        if rounds > masks.shape[0]:
            raise ValueError(f"rounds must be <= {masks.shape[0]} (masks given), got {rounds}")
        masks = masks[:rounds]
    return masks, masks.shape[0]


def expected_matrix(
    builder: Callable,
    process_or_masks,
    rounds: int | None = None,
    seed=None,
    *,
    std_error: bool = False,
):
    """Monte Carlo estimate of ``E[builder(mask)]`` over participation masks.

    ``(1/R) sum_{t<R} builder(mask_t)``, e.g. ``expected_matrix(assign, Bernoulli(p),
    rounds=10_000, seed=0)`` estimates ``E[A_S]`` (compare :func:`expected_assign`).

    Args:
        builder: maps a bool mask of shape ``(N,)`` to a square matrix (dense or sparse),
            e.g. :func:`~stochmix.mixing.federated.assign`, or
            ``lambda m: average(m, q, eta)``.
        process_or_masks: a participation process (any object with ``.masks(seed)``, an
            iterator of masks, or ``.sample(rounds, seed)``) or a bool array of shape
            ``(rounds, N)`` (its rows are the masks; ``seed`` is then unused).
        rounds: number of masks R; required for a process, at most the number of rows for
            an array (default all of them).
        seed: seed of the process's stream.
        std_error: also return the standard error of the mean of every entry,
            ``sqrt(s^2 / R)`` with ``s^2`` the unbiased sample variance (needs R >= 2).

    Returns:
        the mean, a CSR array when ``builder`` returns sparse matrices, else a dense array;
        with ``std_error=True`` the pair ``(mean, standard_error)`` in the same format.
    """
    if not callable(builder):
        raise TypeError(f"builder must be callable, got {_show(builder)}")
    seed = as_seed(seed)
    std_error = as_bool(std_error, "std_error")
    masks, count = _mask_stream(process_or_masks, rounds, seed)
    if std_error and count < 2:
        raise ValueError(f"std_error needs at least 2 rounds, got {count}")
    total = total_sq = None
    shape = None
    sparse = None
    batch: list = []

    def flush() -> None:
        nonlocal total, total_sq
        if not batch:
            return
        rows = np.concatenate([b.row for b in batch])
        cols = np.concatenate([b.col for b in batch])
        vals = np.concatenate([b.data for b in batch])
        part = sp.csr_array((vals, (rows, cols)), shape=shape)
        part_sq = sp.csr_array((vals * vals, (rows, cols)), shape=shape)
        total = part if total is None else total + part
        total_sq = part_sq if total_sq is None else total_sq + part_sq
        batch.clear()

    for t, mask in enumerate(masks):
        M = _matrix(builder(np.asarray(mask, dtype=bool)), f"builder(mask {t})")
        if shape is None:
            shape, sparse = M.shape, sp.issparse(M)
        elif M.shape != shape:
            raise ValueError(f"builder(mask {t}) has shape {M.shape}, expected {shape}")
        if sparse:
            batch.append(sp.coo_array(M))
            if len(batch) >= 1024:
                flush()
        else:
            M = _dense(M)
            total = M.copy() if total is None else total + M
            total_sq = M * M if total_sq is None else total_sq + M * M
    if sparse:
        flush()
        mean = sp.csr_array(total / count)
        if not std_error:
            return mean
        var = sp.csr_array((total_sq - total.multiply(total) / count) / (count - 1))
        var.data = np.sqrt(np.maximum(var.data, 0.0) / count)
        return mean, var
    mean = total / count
    if not std_error:
        return mean
    var = (total_sq - total * total / count) / (count - 1)
    return mean, np.sqrt(np.maximum(var, 0.0) / count)


def _marginals(p, name: str = "p") -> np.ndarray:
    arr = as_real_array(p, name, finite=False)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-d array, got shape {arr.shape}")
    bad = ~((arr >= 0) & (arr <= 1))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name} must lie in [0, 1]; entry {i} is {arr[i]!r}")
    return arr


def _csr(rows, cols, vals, n: int) -> sp.csr_array:
    matrix = sp.csr_array((vals, (rows, cols)), shape=(n, n))
    matrix.sum_duplicates()
    matrix.eliminate_zeros()
    matrix.sort_indices()
    return matrix


def expected_assign(p: Real[np.ndarray, " n"]) -> sp.csr_array:
    """``E[A_S]`` for participation marginals ``p`` (client i takes part w.p. ``p_i``).

    Row 0 is ``e_0``; row ``i + 1`` is ``p_i e_0 + (1 - p_i) e_{i+1}``. Row-stochastic.
    ``A_S`` is affine in the mask's indicators, so this holds for any process with these
    marginals, independent across clients or not (uniform sampling of a fixed size,
    Markov, ...).

    Args:
        p: shape ``(N,)``, entries in [0, 1].

    Returns:
        ``(N+1, N+1)`` CSR array.
    """
    p = _marginals(p)
    n, nodes = p.size, np.arange(1, p.size + 1)
    rows = np.concatenate([[0], nodes, nodes])
    cols = np.concatenate([[0], np.zeros(n, np.int64), nodes])
    return _csr(rows, cols, np.concatenate([[1.0], p, 1.0 - p]), n + 1)


def expected_collect(p: Real[np.ndarray, " n"]) -> sp.csr_array:
    """``E[C_S]`` for participation marginals ``p``.

    Row 0 is ``e_0 + sum_i p_i e_{i+1}``; row ``i + 1`` is ``(1 - p_i) e_{i+1}``.
    Column-stochastic. Valid for any process with these marginals (``C_S`` is affine in
    the mask).

    Returns:
        ``(N+1, N+1)`` CSR array.
    """
    p = _marginals(p)
    n, nodes = p.size, np.arange(1, p.size + 1)
    rows = np.concatenate([[0], np.zeros(n, np.int64), nodes])
    cols = np.concatenate([[0], nodes, nodes])
    return _csr(rows, cols, np.concatenate([[1.0], p, 1.0 - p]), n + 1)


def expected_local_diagonal(p: Real[np.ndarray, " n"]) -> sp.csr_array:
    """``E[D_S] = diag(0, p_1, ..., p_N)`` for participation marginals ``p`` (any
    process). Returns an ``(N+1, N+1)`` CSR array."""
    p = _marginals(p)
    nodes = np.arange(1, p.size + 1)
    return _csr(nodes, nodes, p, p.size + 1)


def expected_average(
    p: Real[np.ndarray, " n"], weights: Real[np.ndarray, " n"], server_lr: float = 1.0
) -> sp.csr_array:
    """``E[average(S, q, eta)]`` for marginals ``p`` and *fixed* per-client weights ``q``.

    Row 0 is ``(1 - eta sum_i p_i q_i) e_0 + eta sum_i p_i q_i e_{i+1}``; the other rows
    are those of the identity. Exact for any process with these marginals when ``q`` does
    not depend on S (``"unbiased"`` weights ``q_i = 1/(N p_i)`` give row 0 ``=
    (1 - eta) e_0 + (eta/N) sum_i e_{i+1}``); not for ``"uniform"`` weights
    ``1/|S|``, which depend on the draw: use :func:`expected_matrix` for those.

    Returns:
        ``(N+1, N+1)`` CSR array whose rows sum to one.
    """
    p = _marginals(p)
    q = as_nonnegative(weights, "weights")
    if q.shape != p.shape:
        raise ValueError(f"weights must have the shape of p {p.shape}, got {q.shape}")
    eta = as_float(server_lr, "server_lr", positive=True)
    n, nodes = p.size, np.arange(1, p.size + 1)
    pull = eta * p * q
    rows = np.concatenate([[0], np.zeros(n, np.int64), nodes])
    cols = np.concatenate([[0], nodes, nodes])
    vals = np.concatenate([[1.0 - pull.sum()], pull, np.ones(n)])
    return _csr(rows, cols, vals, n + 1)


# ---------------------------------------------------------------------- summaries

SUMMARY_KEYS = (
    "n",
    "nnz",
    "kind",
    "row_stochastic",
    "column_stochastic",
    "doubly_stochastic",
    "spectral_radius",
    "slem",
    "spectral_gap",
    "ergodicity",
    "consensus_contraction",
)


def mixing_summary(W: Matrix, method: str = "auto", atol: float = ATOL) -> dict:
    """The spectral facts of one mixing matrix, as a dict.

    Keys (``SUMMARY_KEYS``):

    * ``n``, ``nnz`` (stored nonzeros; ``n^2`` minus the zeros for dense input);
    * ``kind``: ``"doubly"``, ``"row"``, ``"column"`` (stochastic), ``"rows sum 1"``,
      ``"cols sum 1"`` (signed) or ``"general"``; and the three booleans
      ``row_stochastic``, ``column_stochastic``, ``doubly_stochastic`` (checks.py, to
      ``atol``);
    * ``spectral_radius``, ``slem``, ``spectral_gap``;
    * ``ergodicity``: Dobrushin's coefficient when ``W`` is row-stochastic, else ``None``;
    * ``consensus_contraction``: ``||W - 1 pi^T||_2`` (pi the left Perron vector) when
      the rows sum to one, ``||W - v 1^T||_2`` (v the right one) when only the columns
      do; ``None`` when neither, or when that Perron vector is not unique.

    Args:
        W: ``(n, n)`` dense array or SciPy sparse matrix.
        method: ``"auto"``, ``"dense"`` or ``"sparse"`` for the eigen-solvers.
        atol: tolerance of the stochasticity tests.
    """
    A = _matrix(W)
    atol = as_float(atol, "atol", nonnegative=True)
    choice(method, "method", METHODS)
    n = A.shape[0]
    row, column = is_row_stochastic(A, atol), is_column_stochastic(A, atol)
    rows_one, columns_one = rows_sum_to_one(A, atol), columns_sum_to_one(A, atol)
    if row and column:
        kind = "doubly"
    elif row or column:
        kind = "row" if row else "column"
    elif rows_one or columns_one:
        kind = "rows sum 1" if rows_one else "cols sum 1"
    else:
        kind = "general"
    contraction = None
    try:
        if rows_one:
            contraction = consensus_contraction(A, method=method)
        elif columns_one:
            contraction = consensus_contraction(_transpose(A), method=method)
    except ValueError:
        contraction = None
    slem = second_largest_modulus(A, method=method, atol=atol)
    return {
        "n": n,
        "nnz": int(A.nnz) if sp.issparse(A) else int(np.count_nonzero(A)),
        "kind": kind,
        "row_stochastic": row,
        "column_stochastic": column,
        "doubly_stochastic": row and column,
        "spectral_radius": spectral_radius(A, method=method, atol=atol),
        "slem": slem,
        "spectral_gap": 1.0 - slem,
        "ergodicity": ergodicity_coefficient(A, atol=atol) if row else None,
        "consensus_contraction": contraction,
    }


_COLUMNS = (
    ("matrix", None),
    ("kind", "kind"),
    ("n", "n"),
    ("rho", "spectral_radius"),
    ("SLEM", "slem"),
    ("gap", "spectral_gap"),
    ("delta", "ergodicity"),
    ("||W-1pi'||", "consensus_contraction"),
)


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, (bool, np.bool_)):
        return "yes" if value else "no"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return f"{float(value):.6g}"
    return str(value)


def summary_table(matrices: Mapping[str, object], method: str = "auto") -> str:
    """A plain-text table of :func:`mixing_summary` for several named matrices.

    One line per entry of ``matrices`` (name -> matrix, or name -> a summary dict already
    computed), columns ``matrix kind n rho SLEM gap delta ||W-1pi'||`` right-aligned under
    a rule of dashes; ``-`` marks a quantity that does not apply. Numbers are printed with
    6 significant digits.
    """
    if not isinstance(matrices, Mapping):
        raise TypeError(
            f"matrices must be a mapping name -> matrix, got {type(matrices).__name__}: "
            f"{_show(matrices)}"
        )
    choice(method, "method", METHODS)
    lines = [[title for title, _ in _COLUMNS]]
    for name, value in matrices.items():
        if isinstance(value, Mapping):
            summary = value
        else:
            try:
                summary = mixing_summary(value, method=method)
            except (TypeError, ValueError) as error:
                raise type(error)(f"matrices[{name!r}]: {error}") from None
        lines.append([str(name)] + [_cell(summary.get(key)) for _, key in _COLUMNS[1:]])
    widths = [max(len(line[c]) for line in lines) for c in range(len(_COLUMNS))]
    rule = ["-" * len(title) for title, _ in _COLUMNS]
    rows = [lines[0], rule, *lines[1:]]
    return "\n".join(
        "  ".join(cell.rjust(width) for cell, width in zip(line, widths, strict=True))
        for line in rows
    )


__all__ = [
    "ATOL",
    "DENSE_FALLBACK",
    "DENSE_LIMIT",
    "METHODS",
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
    "product",
    "second_largest_modulus",
    "sequence_product",
    "spectral_gap",
    "spectral_radius",
    "stationary_distributions",
    "summary_table",
]

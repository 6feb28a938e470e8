"""Exact affine maps of the canonical recursion on problems whose gradients are affine.

When every client gradient is affine, ``grad F_i(x) = H_i x - c_i`` (:class:`Quadratic`:
``c_i = H_i z_i``; :class:`LeastSquares`: ``H_i = A_i^T A_i + reg I``, ``c_i = A_i^T b_i``),
every phase ``Z <- M Z + B G(X)`` of a method is an affine map of the state. With the
row-vector convention and ``Z`` (m, d) vectorised row-major, ``vec(Z)[i d + k] = Z[i, k]``:

    vec(Z+) = T vec(Z) + t,
    T = M (x) I_d + (B (x) I_d) blockdiag(H_c) (S (x) I_d),       t = -(B (x) I_d) vec(c),

where ``S`` selects, for each client ``c`` the phase asks about, the model row
``model_offset + c`` of ``model_block`` (the engine's default gradient points), and
``blockdiag(H_c)`` holds the Hessians of those clients only. Everything is a SciPy sparse
matrix; a round (or a whole periodic pattern of rounds) is the composition of its phases.

What the maps give exactly:

* :func:`round_operator` and :func:`pattern_operator`: the map of one round / of one period
  of a participation pattern; they reproduce :func:`stochmix.run` to rounding.
* :func:`fixed_point_under_pattern`: where a method ends under a periodic pattern (FedAvg's
  biased end point, FOCUS's exact ``x_star``).
* :func:`periodic_rate`: the exact asymptotic rate under a periodic pattern.
* :func:`lyapunov_rate`: the almost-sure rate under a random participation process (top
  Lyapunov exponent of the random product of the rounds' linear parts).

**Fixed directions.** Many methods conserve something: FOCUS and gradient tracking keep
``sum(y) - sum(g)`` (the tracking invariant) in every round, and a row no phase of a pattern
touches (a client that never participates) keeps its value. Each such quantity is an
eigenvalue 1 of ``T`` whatever the step size, so ``I - T`` is singular and the spectral radius
of ``T`` is 1 although the method converges. The error the method actually makes never has a
component there: it starts with the conserved quantities at their final value. So the
functions here (a) pick the fixed point on the slice of the starting state (``start=`` of
:meth:`AffineMap.fixed_point`), (b) measure rates on the complement of the fixed directions
(``exclude_unit=True``), and (c) run the Lyapunov recursion from errors the method can make
(``start="initial"``) with the conserved combinations projected out, since rounding would
otherwise excite them (:func:`conserved_quantities`); see each function.
"""

from __future__ import annotations

import math
import weakref
from typing import NamedTuple

import numpy as np
import scipy.linalg
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from jaxtyping import Bool, Float, Int
from scipy import stats

from .._validate import (
    _show,
    as_bool,
    as_bool_array,
    as_client_indices,
    as_float,
    as_int,
    as_probabilities,
    as_real_array,
    choice,
    is_scalar,
)
from ..engine import Layout, Method, Phase, RunContext
from ..mixing.checks import check_matrix
from ..problems import LeastSquares, Quadratic

DENSE_LIMIT = 2000  # maps of at most this size are analysed with dense linear algebra
RANK_RTOL = 1e-10  # singular values of I - T below RANK_RTOL * largest count as zero
UNIT_ATOL = 1e-8  # sparse path: eigenvalues this close to 1 count as fixed directions


class SingularMapError(np.linalg.LinAlgError, ValueError):
    """``I - T`` is singular, so the affine map has no unique fixed point."""


# ------------------------------------------------------------------------ affine gradients
class AffineGradients:
    """Per-client affine gradients ``grad F_i(x) = H_i x - c_i``.

    Attributes:
        hessians: (N, d) diagonals when ``diagonal``, else (N, d, d) symmetric H_i.
        linear: (N, d), row i is c_i.
        diagonal: whether the H_i are stored as diagonals.
    """

    def __init__(self, hessians: np.ndarray, linear: np.ndarray):
        hessians = as_real_array(hessians, "hessians")
        linear = as_real_array(linear, "linear")
        if linear.ndim != 2:
            raise ValueError(f"linear must have shape (N, d), got {linear.shape}")
        n, d = linear.shape
        if hessians.shape not in ((n, d), (n, d, d)):
            raise ValueError(
                f"hessians must have shape ({n}, {d}) or ({n}, {d}, {d}) to match linear "
                f"{linear.shape}, got {hessians.shape}"
            )
        self.hessians, self.linear = hessians, linear
        self.diagonal = hessians.ndim == 2

    @property
    def n_clients(self) -> int:
        return self.linear.shape[0]

    @property
    def dim(self) -> int:
        return self.linear.shape[1]

    def apply(self, clients: np.ndarray, points: np.ndarray) -> np.ndarray:
        """``H_c x`` for each requested client c at its point x (the linear part only)."""
        h = self.hessians[clients]
        if self.diagonal:
            return h * points
        return np.einsum("mij,mj->mi", h, points)

    def block(self, clients: np.ndarray) -> sp.csr_array:
        """``blockdiag(H_c)`` over ``clients``, a sparse (c d, c d) matrix."""
        h = self.hessians[clients]
        c, d = clients.size, self.dim
        if self.diagonal:
            return sp.diags_array(h.reshape(-1), format="csr")
        bsr = sp.bsr_array((h, np.arange(c), np.arange(c + 1)), shape=(c * d, c * d))
        return sp.csr_array(bsr)

    def weighted(self, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(sum_i w_i H_i, sum_i w_i c_i)`` as a dense (d, d) matrix and a (d,) vector."""
        if self.diagonal:
            hw = np.diag(weights @ self.hessians)
        else:
            hw = np.einsum("n,nij->ij", weights, self.hessians)
        return hw, weights @ self.linear


_AFFINE_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def affine_gradients(problem) -> AffineGradients:
    """The affine gradients ``grad F_i(x) = H_i x - c_i`` of a problem.

    Accepts a :class:`~stochmix.problems.Quadratic` (``c_i = H_i z_i``), a
    :class:`~stochmix.problems.LeastSquares` (``H_i = A_i^T A_i + reg I``, ``c_i = A_i^T b_i``),
    any object with a ``hessians_and_linear_terms()`` method returning ``(H, c)``, or an
    :class:`AffineGradients` (returned as is). Results are cached per problem object.

    Raises:
        TypeError: a problem whose gradients are not known to be affine.
    """
    if isinstance(problem, AffineGradients):
        return problem
    try:
        hit = _AFFINE_CACHE.get(problem)
    except TypeError:  # not weak-referenceable or not hashable
        hit = None
    if hit is not None:
        return hit
    if isinstance(problem, Quadratic):
        h, z = problem.hessians, problem.centers
        c = h * z if problem.diagonal else np.einsum("nij,nj->ni", h, z)
        out = AffineGradients(h, c)
    elif isinstance(problem, LeastSquares) or hasattr(problem, "hessians_and_linear_terms"):
        out = AffineGradients(*problem.hessians_and_linear_terms())
    else:
        raise TypeError(
            "problem must have affine gradients (a Quadratic, a LeastSquares, or an object with "
            f"hessians_and_linear_terms()), got {type(problem).__name__}: {_show(problem)}"
        )
    try:
        _AFFINE_CACHE[problem] = out
    except TypeError:
        pass
    return out


def _check_points(method: Method) -> None:
    if type(method).points is not Method.points:
        raise NotImplementedError(
            f"{type(method).__name__} overrides points(): it takes its gradients at points that "
            "are not rows of the state (push-sum divides the model block by the weight block), "
            "so a phase is not affine in the state and has no exact linear operator"
        )


# ------------------------------------------------------------------------------ the map
class AffineMap:
    """``v -> T v + t`` on vectorised states ``v = vec(Z)`` (row-major, ``Z`` of shape
    ``state_shape``).

    Unpacks as a pair: ``T, t = affine_map``. ``a.compose(b)`` (also ``a @ b``) is "``a``
    after ``b``": ``v -> a(b(v))``.

    Attributes:
        linear: ``T``, a SciPy CSR array (n, n).
        offset: ``t``, shape (n,).
        state_shape: (m, d), or None.
    """

    def __init__(self, linear, offset, state_shape: tuple[int, int] | None = None):
        if not sp.issparse(linear):
            linear = as_real_array(linear, "linear")
        check_matrix(linear, "linear", square=True)
        self.linear = sp.csr_array(linear, dtype=np.float64)
        if not np.isfinite(self.linear.data).all():
            raise ValueError("linear must be finite (it holds NaN or inf)")
        n = self.linear.shape[0]
        self.offset = as_real_array(offset, "offset").reshape(-1)
        if self.offset.shape != (n,):
            raise ValueError(
                f"offset must hold {n} entries to match linear, got {np.shape(offset)}"
            )
        if state_shape is not None:
            if is_scalar(state_shape):
                raise TypeError(f"state_shape must be a pair (m, d), got {_show(state_shape)}")
            if len(state_shape) != 2:
                raise ValueError(f"state_shape must be a pair (m, d), got {_show(state_shape)}")
            state_shape = tuple(as_int(v, "state_shape", minimum=0) for v in state_shape)
            if state_shape[0] * state_shape[1] != n:
                raise ValueError(f"state_shape {state_shape} does not hold {n} entries")
        self.state_shape = state_shape

    @classmethod
    def identity(cls, size: int, state_shape: tuple[int, int] | None = None) -> AffineMap:
        """The identity map on vectors of length ``size``."""
        size = as_int(size, "size", minimum=0)
        return cls(sp.identity(size, format="csr"), np.zeros(size), state_shape)

    @property
    def size(self) -> int:
        """n, the length of the vectors the map acts on."""
        return self.linear.shape[0]

    @property
    def T(self) -> sp.csr_array:  # noqa: N802  (the mathematical name)
        return self.linear

    @property
    def t(self) -> np.ndarray:
        return self.offset

    def __iter__(self):
        yield self.linear
        yield self.offset

    def __call__(self, z: Float[np.ndarray, "..."]) -> Float[np.ndarray, "..."]:
        """``T vec(z) + t``, returned in the shape of ``z`` ((n,) or (m, d))."""
        z = as_real_array(z, "z", finite=False)
        if z.size != self.size:
            raise ValueError(f"z must hold {self.size} entries, got shape {z.shape}")
        return (self.linear @ z.reshape(-1) + self.offset).reshape(z.shape)

    def compose(self, other: AffineMap) -> AffineMap:
        """``self`` after ``other``: ``v -> T_s (T_o v + t_o) + t_s``."""
        if not isinstance(other, AffineMap):
            raise TypeError(f"other must be an AffineMap, got {_show(other)}")
        if other.size != self.size:
            raise ValueError(
                f"other must act on vectors of length {self.size} like this map, got "
                f"length {other.size}"
            )
        return AffineMap(
            self.linear @ other.linear,
            self.linear @ other.offset + self.offset,
            self.state_shape or other.state_shape,
        )

    __matmul__ = compose

    def power(self, k: int) -> AffineMap:
        """The map applied ``k`` times."""
        k = as_int(k, "k", minimum=0)
        out, base = AffineMap.identity(self.size, self.state_shape), self
        while k:
            if k & 1:
                out = base.compose(out)
            k >>= 1
            if k:
                base = base.compose(base)
        return out

    # ------------------------------------------------------------------- fixed points
    def _dense_svd(self):
        a = np.eye(self.size) - self.linear.toarray()
        u, s, vt = scipy.linalg.svd(a)
        tol = RANK_RTOL * max(float(s[0]) if s.size else 0.0, 1.0)
        return a, u, s, vt, int((s > tol).sum())

    def unit_multiplicity(self) -> int:
        """dim ker(I - T): how many independent fixed directions (eigenvalue 1) T has.

        Dense (SVD of I - T, relative tolerance ``RANK_RTOL``) for maps of size at most
        ``DENSE_LIMIT``; above it, the number of sparse eigenvalues within ``UNIT_ATOL`` of 1.
        """
        if self.size <= DENSE_LIMIT:
            return self.size - self._dense_svd()[4]
        vals = self._top_eigenvalues(exclude_unit=False, extra=16)
        return int((np.abs(vals - 1.0) <= UNIT_ATOL).sum())

    def fixed_point(self, start: Float[np.ndarray, "..."] | None = None) -> Float[np.ndarray, " n"]:
        """The ``v`` with ``v = T v + t``.

        When ``I - T`` is invertible the fixed point is unique and ``start`` is ignored.
        When it is singular (T has eigenvalue 1: a conserved quantity, or rows the map never
        changes) the fixed points form an affine family; with ``start`` this returns the one
        that iterating the map from ``start`` converges to, the fixed point ``v`` with
        ``v - start`` in the range of ``I - T`` (every conserved quantity keeps its value at
        ``start``), assuming eigenvalue 1 is semisimple.

        Small maps (size <= ``DENSE_LIMIT``) use a dense SVD of ``I - T``; large ones a sparse
        LU factorisation (a pivot below 1e-13 times the largest counts as singular) and, when
        singular with a ``start``, GMRES started from ``start`` (its Krylov space lies in the
        range of ``I - T``, so it stays on the right slice).

        Raises:
            SingularMapError: ``I - T`` is singular and no ``start`` was given (for a
                least-squares / minimum-norm point instead, solve
                ``scipy.sparse.linalg.lsqr(I - T, t)``), or the system has no solution at
                all (the map drifts along a fixed direction).
        """
        n, t = self.size, self.offset
        z0 = None if start is None else as_real_array(start, "start").reshape(-1)
        if z0 is not None and z0.shape != (n,):
            raise ValueError(f"start must hold {n} entries, got {np.shape(start)}")
        if n <= DENSE_LIMIT:
            a, u, s, vt, rank = self._dense_svd()
            if rank == n:
                return scipy.linalg.solve(a, t)
            self._singular(z0, n - rank)
            r0 = t - a @ z0
            scale = np.linalg.norm(t) + np.linalg.norm(a @ z0) + np.finfo(float).tiny
            if np.linalg.norm(u[:, rank:].T @ r0) > 1e-8 * scale:
                raise SingularMapError(
                    "the affine map has no fixed point on the slice of start: its offset has "
                    "a component along a fixed direction of T, so the iterates drift"
                )
            q = u[:, :rank]
            w = scipy.linalg.lstsq(a @ q, r0)[0]
            v = z0 + q @ w
        else:
            a = (sp.identity(n, format="csc") - self.linear).tocsc()
            try:
                lu = spla.splu(a)
                pivots = np.abs(lu.U.diagonal())
                if pivots.min() > 1e-13 * pivots.max():
                    return lu.solve(t)
            except RuntimeError:  # exactly singular factor
                pass
            self._singular(z0, None)
            v = _gmres(a, t, z0)
            scale = np.linalg.norm(t) + np.linalg.norm(a @ z0) + np.finfo(float).tiny
        resid = np.linalg.norm(v - self.linear @ v - t)
        if not resid <= 1e-8 * scale:
            raise SingularMapError(
                f"could not find a fixed point on the slice of start (residual {resid:.3g}): "
                "eigenvalue 1 of T is probably not semisimple, so the iterates drift"
            )
        return v

    @staticmethod
    def _singular(z0, nullity) -> None:
        if z0 is None:
            count = "" if nullity is None else f" ({nullity} fixed directions)"
            raise SingularMapError(
                f"I - T is singular{count}: T has eigenvalue 1 (a conserved quantity such as "
                "FOCUS's or gradient tracking's sum(y) - sum(g), or rows no phase changes such "
                "as a client that never participates), so the fixed point is not unique. Pass "
                "start= (a state) for the fixed point the iteration reaches from it, or solve "
                "scipy.sparse.linalg.lsqr(I - T, t) for a least-squares / minimum-norm point"
            )

    # ---------------------------------------------------------------------- spectrum
    def _top_eigenvalues(self, exclude_unit: bool, extra: int = 8) -> np.ndarray:
        n = self.size
        k = min(n - 2, 6 + extra)
        while True:
            vals = spla.eigs(
                self.linear.astype(np.float64),
                k=k,
                which="LM",
                return_eigenvectors=False,
                maxiter=50 * n,
                tol=1e-12,
            )
            keep = vals[np.abs(vals - 1.0) > UNIT_ATOL] if exclude_unit else vals
            if keep.size or k >= n - 2:
                return keep if exclude_unit else vals
            k = min(n - 2, 2 * k)

    def spectral_radius(self, exclude_unit: bool = False) -> float:
        """max |lambda| over the eigenvalues of T.

        With ``exclude_unit=True`` the fixed directions are left out: as many eigenvalues
        closest to 1 as ``I - T`` has null directions (``unit_multiplicity``). The result is
        then the spectral radius of T on the range of ``I - T``, the rate at which the
        iterates reach the fixed point on the slice of their start (``fixed_point(start)``).

        Dense eigenvalues for maps of size at most ``DENSE_LIMIT``; above it ARPACK's
        largest-magnitude eigenvalues, dropping those within ``UNIT_ATOL`` of 1.
        """
        exclude_unit = as_bool(exclude_unit, "exclude_unit")
        n = self.size
        if n <= DENSE_LIMIT:
            vals = scipy.linalg.eigvals(self.linear.toarray())
            if exclude_unit:
                drop = n - self._dense_svd()[4]
                if drop:
                    vals = vals[np.argsort(np.abs(vals - 1.0))[drop:]]
            return float(np.abs(vals).max()) if vals.size else 0.0
        vals = self._top_eigenvalues(exclude_unit)
        return float(np.abs(vals).max()) if vals.size else 0.0

    def __repr__(self) -> str:
        return f"AffineMap(size={self.size}, nnz={self.linear.nnz}, state_shape={self.state_shape})"


def _gmres(a, b, x0):
    """GMRES to near machine precision, from ``x0`` (scipy >= 1.12 calls the tolerance
    ``rtol``, older versions ``tol``)."""
    n = a.shape[0]
    kwargs = {"x0": x0, "restart": min(n, 200), "maxiter": 50, "atol": 0.0}
    try:
        v, info = spla.gmres(a, b, rtol=1e-14, **kwargs)
    except TypeError:  # pragma: no cover  (scipy < 1.12)
        v, info = spla.gmres(a, b, tol=1e-14, **kwargs)
    return v


# ------------------------------------------------------------------- phases and rounds
def run_context(method: Method, problem, probabilities=None) -> RunContext:
    """A :class:`RunContext` as :func:`stochmix.run` makes it (``method.start`` called).

    ``probabilities`` are the participation marginals a method may read (FedStale, unbiased
    FedAvg); pass the process's ``.probabilities``.
    """
    if not isinstance(method, Method):
        raise TypeError(f"method must be a stochmix Method, got {_show(method)}")
    if not (hasattr(problem, "n_clients") and hasattr(problem, "dim")):
        raise TypeError(
            f"problem must be a stochmix Problem (with n_clients and dim), got {_show(problem)}"
        )
    n, d = int(problem.n_clients), int(problem.dim)
    if probabilities is not None:
        probabilities = as_probabilities(probabilities, "probabilities", n)
    ctx = RunContext(Layout(method.blocks(n)), n, d, probabilities)
    method.start(ctx)
    return ctx


def phase_operator(phase: Phase, layout: Layout, method: Method, problem) -> AffineMap:
    """The exact affine map ``vec(Z+) = T vec(Z) + t`` of one phase.

    ``T = M (x) I_d + (B (x) I_d) blockdiag(H_c) (S (x) I_d)`` and ``t = -(B (x) I_d) vec(c)``
    over the clients the phase asks gradients of, ``S`` selecting their model rows
    (``model_offset + c`` of ``model_block``). Unpacks as ``T, t``.

    Raises:
        NotImplementedError: the method overrides ``points`` (push-sum), so the phase is not
            affine in the state.
    """
    _check_points(method)
    aff = affine_gradients(problem)
    m, d = layout.size, aff.dim
    if phase.size != m:
        raise ValueError(f"phase acts on {phase.size} rows but the layout has {m}")
    eye = sp.identity(d, format="csr")
    lin = sp.csr_array(sp.kron(phase.matrix(), eye, format="csr"))
    offset = np.zeros(m * d)
    if phase.clients.size and phase.inject is not None:
        clients = phase.clients
        c = clients.size
        coo = phase.inject.tocoo()
        inject = sp.csr_array((coo.data, (phase.rows[coo.row], coo.col)), shape=(m, c))
        kb = sp.csr_array(sp.kron(inject, eye, format="csr"))
        model_rows = layout.rows(method.model_block, clients + method.model_offset)
        select = sp.csr_array((np.ones(c), (np.arange(c), model_rows)), shape=(c, m))
        ks = sp.csr_array(sp.kron(select, eye, format="csr"))
        lin = lin + kb @ aff.block(clients) @ ks
        offset = -(kb @ aff.linear[clients].reshape(-1))
    return AffineMap(lin, offset, (m, d))


def _participants(participants, n: int) -> np.ndarray:
    """Sorted client indices from a boolean mask of shape (n,) or distinct indices."""
    if isinstance(participants, np.ndarray) and participants.dtype == np.bool_:
        return np.flatnonzero(as_bool_array(participants, "participants", shape=(n,)))
    return np.sort(as_client_indices(participants, n, "participants", distinct=True))


def round_operator(
    method: Method,
    problem,
    participants: Int[np.ndarray, " s"] | Bool[np.ndarray, " n"],
    r: int = 0,
    ctx: RunContext | None = None,
    *,
    probabilities=None,
) -> AffineMap:
    """The exact affine map of round ``r`` with the given participants (indices or a mask).

    Composes the round's phases (``method.round_phases(r, participants, ctx)``) in order. A
    fresh context is made as :func:`stochmix.run` makes it unless ``ctx`` is given; pass the
    same ``ctx`` for consecutive rounds of a method that learns during the run (FedAU), whose
    ``round_phases`` updates ``ctx.memory``. Unpacks as ``T, t``.
    """
    if ctx is None:
        ctx = run_context(method, problem, probabilities)
    elif not isinstance(ctx, RunContext):
        raise TypeError(f"ctx must be a RunContext (see run_context) or None, got {_show(ctx)}")
    aff = affine_gradients(problem)
    if aff.n_clients != ctx.n_clients or aff.dim != ctx.dim:
        raise ValueError(
            f"problem has {aff.n_clients} clients in dimension {aff.dim} but ctx has "
            f"{ctx.n_clients} in {ctx.dim}"
        )
    r = as_int(r, "r", minimum=0)
    idx = _participants(participants, ctx.n_clients)
    shape = (ctx.layout.size, ctx.dim)
    out = AffineMap.identity(shape[0] * shape[1], shape)
    for phase in method.round_phases(r, idx, ctx):
        if not phase.is_identity:
            out = phase_operator(phase, ctx.layout, method, aff).compose(out)
    return out


def _masks(masks, n: int) -> np.ndarray:
    arr = as_bool_array(masks, "masks")
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] != n:
        raise ValueError(f"masks must have shape (period, {n}), got {arr.shape}")
    return arr


def pattern_operator(
    method: Method,
    problem,
    masks: Bool[np.ndarray, "p n"],
    first_round: int = 0,
    ctx: RunContext | None = None,
    *,
    probabilities=None,
) -> AffineMap:
    """The map of rounds ``first_round .. first_round + P - 1`` whose participants are
    ``masks[r % P]`` (P = len(masks)): one period of a periodic participation pattern."""
    ctx = run_context(method, problem, probabilities) if ctx is None else ctx
    masks = _masks(masks, ctx.n_clients)
    first_round = as_int(first_round, "first_round", minimum=0)
    shape = (ctx.layout.size, ctx.dim)
    out = AffineMap.identity(shape[0] * shape[1], shape)
    for r in range(first_round, first_round + masks.shape[0]):
        out = round_operator(method, problem, masks[r % masks.shape[0]], r, ctx).compose(out)
    return out


# ------------------------------------------------------------------ periodic patterns
class FixedPoint(NamedTuple):
    """The state a method settles in under a periodic pattern, and the model it reports."""

    state: np.ndarray
    model: np.ndarray


class PeriodicRate(NamedTuple):
    """Exact asymptotic rate under a periodic pattern: the spectral radius of one period's
    linear part and its P-th root, the rate per round."""

    per_period: float
    per_round: float
    period: int


def _first_round(first_round, period: int) -> int:
    if first_round is None:
        return period
    return as_int(first_round, "first_round", minimum=0)


def fixed_point_under_pattern(
    method: Method,
    problem,
    masks: Bool[np.ndarray, "p n"],
    *,
    x0: Float[np.ndarray, " d"] | None = None,
    first_round: int | None = None,
    probabilities=None,
) -> FixedPoint:
    """Where ``method`` ends when round r has participants ``masks[r % P]``.

    The state at the start of every period (after rounds ``first_round - 1 + k P``) converges
    to the fixed point ``Z*`` of the period's composed map. When that map has fixed
    directions (FOCUS's conserved tracking sum, a client outside the pattern) the fixed point
    taken is the one reached from the method's own start: the state after the warm-up rounds
    ``0 .. first_round - 1`` run from ``x0`` (zeros by default). ``first_round`` defaults to P,
    so that round 0's special phases (gradient tracking's initial gradients) are in the warm-up
    and the phase of the pattern (``r mod P``, also the index of time-varying graphs and of
    amplification periods) is that of the run.

    Returns:
        ``FixedPoint(state, model)``: ``Z*`` (m, d) and ``method.output(Z*, ctx)`` (d,), for
        instance FedAvg's biased end point or FOCUS's exact ``x_star``.
    """
    ctx = run_context(method, problem, probabilities)
    masks = _masks(masks, ctx.n_clients)
    period = masks.shape[0]
    first = _first_round(first_round, period)
    x0 = np.zeros(ctx.dim) if x0 is None else as_real_array(x0, "x0")
    if x0.shape != (ctx.dim,):
        raise ValueError(f"x0 must have shape ({ctx.dim},), got {x0.shape}")
    z = ctx.layout.initial(x0)
    for r in range(first):
        z = round_operator(method, problem, masks[r % period], r, ctx)(z)
    cycle = pattern_operator(method, problem, masks, first, ctx)
    state = cycle.fixed_point(start=z).reshape(z.shape)
    return FixedPoint(state, np.asarray(method.output(state, ctx), dtype=np.float64))


def periodic_rate(
    method: Method,
    problem,
    masks: Bool[np.ndarray, "p n"],
    *,
    first_round: int | None = None,
    exclude_unit: bool = True,
    probabilities=None,
) -> PeriodicRate:
    """The exact asymptotic linear rate of ``method`` when round r has participants
    ``masks[r % P]``.

    The spectral radius of the linear part of one period's map, and per round its 1/P-th
    power. With ``exclude_unit=True`` (default) the fixed directions of the map (eigenvalue 1
    of conserved quantities, rows outside the pattern) are left out: the error of a run never
    has a component there, and without them FOCUS would always read 1. ``first_round``
    defaults to P (see :func:`fixed_point_under_pattern`); the nonzero eigenvalues of a
    period's map do not depend on where the period starts, but round 0 may have extra
    phases.
    """
    exclude_unit = as_bool(exclude_unit, "exclude_unit")
    ctx = run_context(method, problem, probabilities)
    masks = _masks(masks, ctx.n_clients)
    period = masks.shape[0]
    cycle = pattern_operator(method, problem, masks, _first_round(first_round, period), ctx)
    rho = cycle.spectral_radius(exclude_unit=exclude_unit)
    return PeriodicRate(rho, rho ** (1.0 / period), period)


# ---------------------------------------------------------------- conserved quantities
CONSERVED_LIMIT = 4000  # state rows up to which lyapunov_rate finds conserved quantities
CONSERVED_RTOL = 1e-13  # eigenvalues of the scan's Gram matrix below this (relative) are null


class _ConservedScan:
    """Accumulates ``G = sum_p A_p A_p^T`` over phases, ``A_p = [M_p - I, B_p]`` (rows of
    the state x (rows + gradient columns), each part scaled to unit max). The common left
    null space of every ``A_p``, the null space of ``G``, holds the v with ``v^T M_p = v^T``
    and ``v^T B_p = 0`` for every phase: linear combinations of rows that no phase changes,
    whatever the gradients."""

    def __init__(self, m: int):
        self.gram = np.zeros((m, m))
        self.row_max = np.zeros(m)

    def add_round(self, phases: list) -> None:
        """Add a round's phases (a phase object repeated within the round counts once)."""
        for phase in {id(p): p for p in phases}.values():
            self.add(phase)

    def add(self, phase: Phase) -> None:
        if phase.is_identity:
            return
        k = phase.rows.size
        diff = sp.csr_array(phase.mix) - sp.csr_array(
            (np.ones(k), (np.arange(k), phase.rows)), shape=phase.mix.shape
        )
        parts = [diff] if phase.inject is None else [diff, sp.csr_array(phase.inject)]
        block = np.zeros((k, k))
        for part in parts:
            part = sp.csc_array(part)
            part.eliminate_zeros()
            if not part.nnz:
                continue
            # Scale every column to unit max (the left null space does not change), so that a
            # combination broken only by small coefficients (a step size) still shows.
            top = abs(part).max(axis=0).toarray().reshape(-1)
            part = sp.csr_array(part @ sp.diags_array(1.0 / np.where(top > 0, top, 1.0)))
            block += (part @ part.T).toarray()
            rows_top = abs(part).max(axis=1).toarray().reshape(-1)
            self.row_max[phase.rows] = np.maximum(self.row_max[phase.rows], rows_top)
        self.gram[np.ix_(phase.rows, phase.rows)] += block

    def basis(self) -> np.ndarray:
        # Then every row to unit max: the Gram of the row-scaled stack is D G D, whose null
        # vectors u give the conserved v = D u. A row that only small coefficients break (the
        # server row, when a phase also holds 1 / step-size entries) then shows too.
        scale = 1.0 / np.where(self.row_max > 0, self.row_max, 1.0)
        vals, vecs = scipy.linalg.eigh(scale[:, None] * self.gram * scale[None, :])
        # Exactly conserved combinations sit at rounding level, 1e-16 of the largest.
        tol = CONSERVED_RTOL * max(float(vals[-1]) if vals.size else 0.0, 1.0)
        null = scale[:, None] * vecs[:, vals <= tol]
        return scipy.linalg.orth(null) if null.shape[1] else null


def conserved_quantities(
    method: Method,
    problem,
    masks: Bool[np.ndarray, "r n"],
    *,
    first_round: int = 0,
    probabilities=None,
) -> Float[np.ndarray, "m k"]:
    """An orthonormal basis V (m, k) of the row combinations every phase conserves.

    ``v`` is conserved when ``v^T M = v^T`` and ``v^T B = 0`` for every phase of rounds
    ``first_round, first_round + 1, ...`` with participants ``masks[0], masks[1], ...``: then
    ``v^T Z`` (each column) is the same after every round, for any gradients. FOCUS and
    gradient tracking conserve ``sum(y) - sum(g)``; a client missing from every mask keeps its
    rows. ``V (x) I_d`` spans the left eigenvectors of eigenvalue 1 that every round map
    shares (up to problem-specific ones, which a strongly convex problem does not have).
    Dense (m x m); meant for states of a few thousand rows.
    """
    ctx = run_context(method, problem, probabilities)
    masks = _masks(masks, ctx.n_clients)
    first_round = as_int(first_round, "first_round", minimum=0)
    scan = _ConservedScan(ctx.layout.size)
    for j, mask in enumerate(masks):
        scan.add_round(method.round_phases(first_round + j, np.flatnonzero(mask), ctx))
    return scan.basis()


# ---------------------------------------------------------------- random participation
class LyapunovRate(NamedTuple):
    """Top Lyapunov exponent of a random product of rounds, as a rate per round.

    Attributes:
        rate: exp(exponent), the almost-sure linear rate per round.
        low, high: the confidence interval of ``rate``.
        exponent: mean over batches of the per-round log growth.
        stderr: standard error of ``exponent`` (batch means).
        batch_exponents: (batches,) per-round log growth of each batch.
        rounds: measured rounds (after burn-in).
        confidence: level of the interval.
        conserved: number of conserved row combinations projected out (see
            :func:`lyapunov_rate`).
    """

    rate: float
    low: float
    high: float
    exponent: float
    stderr: float
    batch_exponents: np.ndarray
    rounds: int
    confidence: float
    conserved: int


class _Rounds:
    """The phases of each round of a run, from ``participation.masks(seed)``, reusing the
    phases of earlier rounds with the same ``phase_key`` as :func:`stochmix.run` does."""

    def __init__(self, method, problem, participation, seed):
        self.method = method
        self.ctx = run_context(method, problem, participation.probabilities)
        self.masks = participation.masks(seed)
        self.cache: dict = {}

    def phases(self, r: int) -> tuple[list, bool]:
        """Round r's phases, and whether they are new (not reused from an earlier round)."""
        participants = np.flatnonzero(next(self.masks))
        key = self.method.phase_key(r, participants)
        hit = self.cache.get(key) if key is not None else None
        if hit is not None:
            return hit, False
        phases = self.method.round_phases(r, participants, self.ctx)
        if key is not None and len(self.cache) < 1024:
            self.cache[key] = phases
        return phases, True


def lyapunov_rate(
    method: Method,
    problem,
    participation,
    rounds: int = 2000,
    seed=0,
    burn_in: int = 200,
    batches: int = 20,
    *,
    start: str = "initial",
    measure: str = "output",
    conserved="auto",
    confidence: float = 0.95,
    renormalize_every: int = 10,
) -> LyapunovRate:
    """Almost-sure linear rate of ``method`` under a random participation process.

    Under a participation process the error of a method with affine gradients follows the
    random product of the rounds' linear parts: two runs with the same masks from two
    starting points differ by ``e_r = T_r ... T_1 e_0``, and for methods whose rounds share a
    fixed point (FOCUS, gradient tracking: ``x_star`` with ``y = 0``, ``g_i = grad F_i(x_star)``)
    the error itself is such a product. Its top Lyapunov exponent
    ``lambda = lim (1/r) log ||e_r||`` gives the rate ``rho = exp(lambda)`` that the log-error
    of a single run follows (the slope :meth:`Result.rate` fits), not the mean-square rate.

    Method: power iteration of one vector (k = 1 is enough for the top exponent; no QR is
    needed), the homogeneous recursion (gradients ``H_c x``) applied phase by phase with the
    run's own masks ``participation.masks(seed)`` (the same masks as ``run(..., seed=seed)``),
    the vector renormalised every ``renormalize_every`` rounds and its log growth
    accumulated. After ``burn_in`` rounds the next ``rounds`` are cut into ``batches`` equal
    batches; the per-round log growth of each batch gives a Student t interval
    (``confidence``) over the batch means, reported for ``rho = exp(lambda)``.

    Which error, the choice that makes the answer the rate of a run:

    * **Conserved quantities are projected out** (``conserved="auto"``). FOCUS and gradient
      tracking conserve ``sum(y) - sum(g)`` in every round: an eigenvalue 1 of every round
      map whatever the step size. The method's errors have no component there, but rounding
      puts about 1e-16 of one into the iterated vector, and after the vector has been
      renormalised across 16 decades of decay that component dominates and the estimate
      reads rho = 1. So the row combinations every phase of the run conserves
      (:func:`conserved_quantities`, found by a first pass over the same masks; dense, for
      states of at most ``CONSERVED_LIMIT`` rows) are projected out of the vector at every
      renormalisation. Their common kernel ``ker V^T`` is invariant under every round and
      carries every mode but the unit ones (``V^T T = V^T`` leaves only eigenvalue 1 on the
      quotient), so the iteration measures the product restricted to it: the rate at which a
      run reaches the limit on the slice of its start, as ``exclude_unit`` does for
      :func:`periodic_rate`. ``conserved=None`` skips this; an (m, k) array gives them.
    * ``start="initial"`` (default): ``e_0 = layout.initial(u) - layout.initial(0)`` with
      ``u ~ N(0, I_d)``, the difference of the method's starting states from two starting
      points: an error the method can make. ``start="random"``: Gaussian over the whole
      state (projected as above), the rate of the full state.
    * ``measure="output"`` (default): the log growth of the *reported model's* error
      ``method.output(e)`` (the server row; the network average for decentralized methods)
      between batch boundaries; renormalising the whole vector does not change these ratios.
      State directions the output never reads (the frozen row of a client that has not
      participated lately keeps its last value) thus do not enter. ``measure="state"``: the
      growth of the whole vector.

    Raises:
        NotImplementedError: the method overrides ``points`` (push-sum).
        ValueError: the output error vanishes relative to the state (it decays faster than
            directions it never sees); ``measure="state"`` is then the meaningful choice.
    """
    _check_points(method)
    choice(start, "start", ("initial", "random"))
    choice(measure, "measure", ("output", "state"))
    rounds = as_int(rounds, "rounds", minimum=2)
    burn_in = as_int(burn_in, "burn_in", minimum=0)
    batches = as_int(batches, "batches", minimum=2)
    renormalize_every = as_int(renormalize_every, "renormalize_every", minimum=1)
    confidence = as_float(confidence, "confidence", positive=True, maximum=0.999999)
    length = rounds // batches
    if length < 1:
        raise ValueError(f"rounds ({rounds}) must be at least batches ({batches})")
    if not callable(getattr(participation, "masks", None)) or not hasattr(
        participation, "n_clients"
    ):
        raise TypeError(
            f"participation must be a participation process (with masks(seed)), got "
            f"{_show(participation)}"
        )
    aff = affine_gradients(problem)
    if int(participation.n_clients) != aff.n_clients:
        raise ValueError(
            f"participation covers {participation.n_clients} clients but the problem has "
            f"{aff.n_clients}"
        )
    total = burn_in + batches * length
    plan = _Rounds(method, problem, participation, seed)
    ctx, m = plan.ctx, plan.ctx.layout.size

    if isinstance(conserved, str):
        choice(conserved, "conserved", ("auto",))
    elif conserved is not None:
        conserved = as_real_array(conserved, "conserved")
    if isinstance(conserved, str):
        if m > CONSERVED_LIMIT:
            raise ValueError(
                f"conserved='auto' needs a dense {m} x {m} scan (more than CONSERVED_LIMIT = "
                f"{CONSERVED_LIMIT} rows); pass conserved=None or the (m, k) basis"
            )
        scan, first = _ConservedScan(m), _Rounds(method, problem, participation, seed)
        for r in range(total):
            phases, new = first.phases(r)
            if new:
                scan.add_round(phases)
        basis = scan.basis()
    elif conserved is None:
        basis = np.zeros((m, 0))
    else:
        basis = conserved
        if basis.ndim != 2 or basis.shape[0] != m:
            raise ValueError(f"conserved must have shape ({m}, k), got {basis.shape}")
        basis = scipy.linalg.orth(basis) if basis.shape[1] else basis

    def project(v):
        if basis.shape[1]:
            v -= basis @ (basis.T @ v)
        return v

    def size(v) -> float:
        if measure == "output":
            return float(np.linalg.norm(np.asarray(method.output(v, ctx))))
        return float(np.linalg.norm(v))

    if seed is None or isinstance(seed, (int, np.integer)):
        rng = np.random.default_rng(np.random.SeedSequence(seed).spawn(1)[0])
    else:
        rng = np.random.default_rng()
    if start == "initial":
        e = ctx.layout.initial(rng.standard_normal(aff.dim)) - ctx.layout.initial(np.zeros(aff.dim))
    else:
        e = rng.standard_normal((m, aff.dim))
    e = project(e)

    boundaries = {burn_in + b * length: b for b in range(batches + 1)}
    logs = np.empty(batches + 1)
    log_scale = 0.0
    for r in range(total + 1):
        if r in boundaries:
            whole, seen = float(np.linalg.norm(e)), size(e)
            if whole == 0.0:  # the product is exactly zero: finite-time convergence
                inf = np.full(batches, -math.inf)
                return LyapunovRate(
                    0.0, 0.0, 0.0, -math.inf, 0.0, inf, batches * length, confidence, 0
                )
            if seen <= 1e-250 * whole:
                raise ValueError(
                    "the output error vanished relative to the state (it decays faster than "
                    "state directions it never sees); use measure='state'"
                )
            logs[boundaries[r]] = log_scale + math.log(seen)
        if r == total:
            break
        for phase in plan.phases(r)[0]:
            if phase.is_identity:
                continue
            new = phase.mix @ e
            if phase.inject is not None:
                points = method.points(e, ctx, phase.clients)
                new += phase.inject @ aff.apply(phase.clients, points)
            e[phase.rows] = new
        if (r + 1) % renormalize_every == 0 or (r + 1) in boundaries:
            e = project(e)
            norm = float(np.linalg.norm(e))
            if not np.isfinite(norm):
                raise FloatingPointError(f"the error recursion overflowed at round {r}")
            if norm > 0.0:
                e /= norm
                log_scale += math.log(norm)
    exps = np.diff(logs) / length
    mean = float(exps.mean())
    stderr = float(exps.std(ddof=1) / math.sqrt(batches))
    half = float(stats.t.ppf(0.5 + confidence / 2.0, batches - 1)) * stderr
    return LyapunovRate(
        math.exp(mean),
        math.exp(mean - half),
        math.exp(mean + half),
        mean,
        stderr,
        exps,
        batches * length,
        confidence,
        int(basis.shape[1]),
    )

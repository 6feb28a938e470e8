"""Exactness, part of every certificate: the method's round must have a fixed point at the
minimiser the certificate names, and the run, started as :func:`stochmix.run` starts it,
must end there.

Two checks, both before any SDP:

1. **Structural** (:func:`structural_reason`): the round's state-space system has a fixed
   point with every gradient taken at one model while the parts' gradients there differ
   (weighted sum zero). FedAvg with local steps (client drift) and DGD with a constant step
   have none.
2. **The run's end** (:func:`end_reason`): on a probe quadratic with heterogeneous
   minimisers (one per coordinate of ``PROBE_DIM``, curvatures drawn in [mu, L], a random
   ``x0``), the fixed point of the method's period map reached from the method's own start
   (its initial blocks and the warm-up rounds, round 0's own phases included; the
   conserved quantities of the round computed from its phases' operators:
   :func:`~stochmix.analysis.linear.fixed_point_under_pattern`) must be the minimiser of
   ``sum_i w_i f_i``. A fixed point at x_star that the run never reaches (an invariant of
   the round that the start breaks: a momentum memory started at the first gradients,
   node activation of gradient tracking), a method that averages with other weights than
   the certificate's, or a mixing matrix whose stationary vector is not uniform all end
   elsewhere; the reason names which.
"""

from __future__ import annotations

import copy
import warnings

import networkx as nx
import numpy as np
import scipy.sparse as sp

from ...problems import Quadratic
from ..linear.conserved import _ConservedScan
from ..linear.gradients import affine_gradients
from ..linear.maps import AffineMap, SingularMapError
from ..linear.operators import phase_operator, refuse_sampled, run_context
from ..linear.periodic import _apply, _phases, fixed_point_under_pattern
from .system import RoundSystem

__all__ = ["PROBE_DIM", "Unverified", "end_reason", "sigma_probe", "structural_reason"]

#: coordinates of the probe quadratic: each an independent probe (own centers, curvatures)
PROBE_DIM = 2
#: the run's end must be within this of the minimiser, relative to the spread of the
#: probe's centers (exact methods end within about 1e-12; inexact ones 1e-2 away and more)
ENDS_RTOL = 1e-7
_SEED = 20240601
#: a fixed point exists when the least-squares residual of its equations is at most this
#: (relative): a method without one misses by O(1) (SCAFFOLD with other weights: 0.1 and
#: more); exact ones leave rounding: 1e-15 to 5e-15 for APAPC on rings of 3 to 8 at kappa
#: 10 and 1000, but up to about 1e-8 for EXTRA's per-agent systems over the sigma-class
#: at L = 1e-5 (steps of 5e4 against entries of 1)
STRUCTURAL_RTOL = 1e-6


class Unverified(Exception):
    """The end of the run could not be computed (a numerical failure): nothing is certified
    without it."""


# --------------------------------------------------------------------------- structural
def _fixed_point_residual(system: RoundSystem, u: np.ndarray, y: np.ndarray) -> float:
    """How far the system is from having a fixed point with gradients ``u`` at points
    ``y`` (and, with mixing inputs, ``w = 0`` and ``v = 0``): the relative least-squares
    residual of ``xi = A xi + B_u u``, ``y = C_y xi + D_yu u``, ``0 = C_w xi + D_wu u``."""
    p, m = system.calls, system.A.shape[0]
    bu, cy, dyu = system.B[:, :p], system.C[:p], system.D[:p, :p]
    cw, dwu = system.C[p:], system.D[p:, :p]
    lhs = np.vstack([np.eye(m) - system.A, cy, cw])
    rhs = np.concatenate([bu @ u, y - dyu @ u, -dwu @ u])
    xi, *_ = np.linalg.lstsq(lhs, rhs, rcond=None)
    return float(np.abs(lhs @ xi - rhs).max() / max(1.0, float(np.abs(rhs).max())))


_INEXACT = (
    "with parts whose gradients differ at the minimiser (grad f_i(x_star) != 0), {name} has "
    "no fixed point at x_star (the points where it takes gradients cannot all sit at x_star: "
    "client drift of local steps, the bias of a constant step without correction), so it "
    "does not converge linearly to the exact minimiser over this class; rate 1"
)


def structural_reason(systems, targets, name) -> str:
    """'' when every target ``(system index, u, y, kind)`` has a fixed point, else the
    reason ("consensus": gradients zero at one model; "drift": heterogeneous gradients at
    points zero)."""
    for which, u, y, kind in targets:
        if _fixed_point_residual(systems[which], u, y) > STRUCTURAL_RTOL:
            if kind == "consensus":
                return (
                    f"{name} has no fixed point with every gradient point at one model and "
                    "zero gradients, so no rate to a minimiser can be certified; rate 1"
                )
            return _INEXACT.format(name=name)
    return ""


def disconnected_reason(method) -> str:
    """'' when the union of the graphs over one period is strongly connected, else why
    there is no rate (the components never agree)."""
    from scipy.sparse.csgraph import connected_components

    graphs = method.graphs
    union = sum(abs(graphs.adjacency(k)) for k in range(graphs.period or 1))
    count, _ = connected_components(union, directed=True, connection="strong")
    if count > 1:
        return (
            f"{method.name}'s graphs have {count} strongly connected components over a period: "
            "the components never agree on x_star; rate 1"
        )
    return ""


# --------------------------------------------------------------------------- the run's end
def _probe(n: int, L: float, mu: float) -> tuple[Quadratic, np.ndarray]:
    """A diagonal quadratic with heterogeneous minimisers (n, PROBE_DIM), curvatures in
    [mu, L], and a random start x0."""
    rng = np.random.default_rng(_SEED)
    centers = rng.standard_normal((n, PROBE_DIM))
    curvatures = rng.uniform(mu, L, size=(n, PROBE_DIM))
    return Quadratic(centers, curvatures), rng.standard_normal(PROBE_DIM)


def weighted_minimiser(problem: Quadratic, weights: np.ndarray) -> np.ndarray:
    """``argmin sum_i w_i f_i`` of a diagonal quadratic, ``f_i = h_i / 2 (x - c_i)^2`` per
    coordinate: ``sum_i w_i h_i c_i / sum_i w_i h_i``, shape (d,)."""
    h, c = problem.hessians, problem.centers
    return (weights[:, None] * h * c).sum(axis=0) / (weights[:, None] * h).sum(axis=0)


def sigma_probe(method, sigma: float, n: int = 4):
    """A copy of a decentralized method that mixes with two matrices of the sigma-class in
    turn (``W_k = W_{k mod 2}``: one symmetric, one not), on ``n`` nodes: the probe of the
    run's end over the class."""
    from ...mixing.rowsparse import RowSparse
    from ...mixing.sequences import StaticSequence

    rng = np.random.default_rng(_SEED)
    j = np.full((n, n), 1.0 / n)
    perp = np.eye(n) - j
    mats = []
    for symmetric in (True, False):
        g = rng.standard_normal((n, n))
        g = perp @ (g + g.T if symmetric else g) @ perp
        mats.append(j + sigma * g / np.linalg.norm(g, 2))
    operators = [RowSparse.whole(sp.csr_array(w)) for w in mats]
    probe = copy.copy(method)
    probe.graphs = StaticSequence(nx.complete_graph(n))
    probe.check_mixing = False

    def mixing(k, rule, direction=None):
        op = copy.copy(operators[k % 2])
        op.mixes = probe.direction(rule) if direction is None else direction
        return op

    probe.mixing = mixing
    return probe, np.ones((2, n), dtype=bool)


def end_reason(method, masks: np.ndarray, weights: np.ndarray, L: float, mu: float) -> str:
    """'' when ``method``, started as :func:`stochmix.run` starts it, with participants
    ``masks[r % P]`` in round r, ends at ``argmin sum_i weights_i f_i`` of a probe quadratic
    of the class (to ``ENDS_RTOL``); else the reason, naming what differs.

    The end is the fixed point of one period's map (rounds P .. 2P - 1) on the slice of
    the state after the warm-up rounds 0 .. P - 1 run from ``x0``: ``(I - T) z = t`` with
    ``V^T z = V^T z_start`` for the conserved quantities ``V`` of the period's phases,
    solved coordinate by coordinate in least squares with rows and columns equilibrated
    (the state mixes models and gradients, units apart by L: EXTRA with step 0.5 / L is
    found exact from L = 1e-9 to 1e15; below, the composed map's rounding moves the end
    by more than ``ENDS_RTOL`` and the answer is "inexact", never a wrong rate).

    Raises:
        Unverified: the end could not be computed.
    """
    n = masks.shape[1]
    problem, x0 = _probe(n, L, mu)
    target = weighted_minimiser(problem, weights)
    period = _Period(method, problem, masks, x0)
    try:
        end = period.end()
    except SingularMapError:
        return (
            f"{method.name}, started as the library starts it, has no fixed point on a probe "
            "quadratic of the class (a direction of its state drifts without end), so it "
            "does not converge to x_star; rate 1"
        )
    except (ArithmeticError, np.linalg.LinAlgError) as error:
        raise Unverified(f"where the run ends could not be computed ({error})") from None
    if not np.all(np.isfinite(end)):
        raise Unverified("where the run ends could not be computed (not finite)")
    spread = max(1.0, float(np.abs(problem.centers).max()))
    if np.abs(end - target).max() <= ENDS_RTOL * spread:
        return ""
    return _diagnose(period, weights, end, target, spread)


#: Sweeps of the rows' and columns' equilibration in :func:`_balanced_lstsq`.
EQUILIBRATION_SWEEPS = 30


def _balanced_lstsq(lhs: np.ndarray, rhs: np.ndarray) -> tuple[np.ndarray, float, int]:
    """Least squares with rows and columns equilibrated (Ruiz's iteration: each sweep
    divides every row and column by the square root of its largest entry, so that both
    tend to unit max) and two steps of iterative refinement: the solution, the relative
    residual and the numerical rank. One pass of row then column scaling is not enough
    where the state mixes units far apart (a step of 5e11 against gradients of 1e-12:
    EXTRA at L = 1e-12 had a residual of 0.33 and lost 6 of 18 ranks)."""
    rows, cols = np.ones(lhs.shape[0]), np.ones(lhs.shape[1])
    a = lhs
    for _ in range(EQUILIBRATION_SWEEPS):
        r, c = np.abs(a).max(axis=1), np.abs(a).max(axis=0)
        r, c = np.sqrt(np.where(r > 0, r, 1.0)), np.sqrt(np.where(c > 0, c, 1.0))
        a = a / r[:, None] / c[None, :]
        rows, cols = rows / r, cols / c
    b = rhs * rows
    y, _, rank, sv = np.linalg.lstsq(a, b, rcond=1e-12)
    for _ in range(2):  # refinement: the residual of a consistent system to rounding
        y = y + np.linalg.lstsq(a, b - a @ y, rcond=1e-12)[0]
    x = y * cols
    resid = float(np.linalg.norm(a @ y - b) / max(np.linalg.norm(b), 1e-300))
    return x, resid, int(rank)


class _Period:
    """One period of ``method``'s run on ``problem`` under ``masks``, started from ``x0`` as
    :func:`stochmix.run` starts it: the state after the warm-up rounds 0 .. P - 1, the
    period's dense map per coordinate and its conserved quantities."""

    def __init__(self, method, problem, masks, x0):
        self.method, self.problem, self.masks, self.x0 = method, problem, masks, x0
        ctx = run_context(method, problem)
        aff = affine_gradients(problem)
        p = masks.shape[0]
        z = ctx.layout.initial(x0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for r in range(p):
                _apply(_phases(method, masks, r, ctx), z, method, ctx, aff)
            cycle_phases = [_phases(method, masks, r, ctx) for r in range(p, 2 * p)]
        m, d = z.shape
        scan = _ConservedScan(m)
        for phases in cycle_phases:
            scan.add_round(phases)
        cycle = AffineMap.identity(m * d, (m, d))
        for phases in cycle_phases:
            for phase in phases:
                refuse_sampled(phase)
                if not phase.is_identity:
                    cycle = phase_operator(phase, ctx.layout, method, aff).compose(cycle)
        self.ctx, self.start, self.basis = ctx, z, scan.basis()
        linear = sp.csr_array(cycle.linear)
        # coordinates do not mix (diagonal Hessians, M (x) I_d): one system per coordinate
        self.maps = [(linear[j::d, j::d].toarray(), cycle.offset[j::d]) for j in range(d)]

    def end(self) -> np.ndarray:
        """The model the run ends at, (d,)."""
        m, d = self.start.shape
        state = np.empty((m, d))
        for j, (t_lin, t_off) in enumerate(self.maps):
            lhs = np.vstack([np.eye(m) - t_lin, self.basis.T])
            rhs = np.concatenate([t_off, self.basis.T @ self.start[:, j]])
            state[:, j], resid, rank = _balanced_lstsq(lhs, rhs)
            if resid > 1e-9:
                raise SingularMapError("the period's map has no fixed point on the start's slice")
            if rank < m:  # fixed directions the phases do not explain: iterate's limit
                state[:, j] = np.nan
        if np.isnan(state).any():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return fixed_point_under_pattern(
                    self.method, self.problem, self.masks, x0=self.x0
                ).model
        return np.asarray(self.method.output(state, self.ctx), dtype=np.float64)


def _close(a: np.ndarray, b: np.ndarray, spread: float) -> bool:
    return bool(np.abs(a - b).max() <= 1e-6 * spread)


def _diagnose(period: _Period, weights, end, target, spread) -> str:
    method, problem, masks = period.method, period.problem, period.masks
    name = method.name
    n = masks.shape[1]
    where = f"(on a probe quadratic it ends at {end[0]:.6g}, the minimiser is {target[0]:.6g})"
    uniform = np.full(n, 1.0 / n)
    if not np.allclose(weights, uniform) and _close(
        end, weighted_minimiser(problem, uniform), spread
    ):
        shown = np.array2string(weights, precision=4, separator=", ")
        return (
            f"{name} ends at the minimiser of the uniform average (1/n) sum_i f_i, not at the "
            f"weighted minimiser x_star of sum_i w_i f_i with weights={shown} {where}: it averages "
            "its clients with other weights than the certificate's, so no linear rate to "
            "the weighted minimiser; rate 1"
        )
    stationary = _stationary(method)
    if stationary is not None:
        pi, rule = stationary
        shown = np.array2string(pi, precision=4, separator=", ")
        if _close(end, weighted_minimiser(problem, pi), spread):
            return (
                f"{name}'s mixing matrix (rule {rule!r}) is not column-stochastic: its "
                f"stationary vector pi (pi W = pi, sum 1) is {shown}, not uniform, and the "
                "run ends at the pi-weighted minimiser argmin sum_i pi_i f_i, not at x_star "
                f"{where}; rate 1"
            )
    broken = _broken_invariant(period, target)
    if broken:
        where = f"{name}, started as the library starts it, ends away from x_star {where}"
        return f"{where}: {broken}; rate 1"
    return (
        f"{name}, started as the library starts it, ends away from x_star {where} (a quantity "
        "it conserves starts away from its value at the minimiser, or its end point weights "
        "the parts differently): no linear rate to the exact minimiser; rate 1"
    )


def _stationary(method) -> tuple[np.ndarray, str] | None:
    """The stationary vector (pi P = pi, sum 1) of the product of one period of a
    decentralized method's matrices under its first rule whose matrices are not
    column-stochastic, and that rule; None when every matrix is (or not decentralized)."""
    graphs = getattr(method, "graphs", None)
    needs = getattr(type(method), "needs", None)
    if graphs is None or not needs or graphs.period is None:
        return None
    for attribute in needs:
        rule = getattr(method, attribute)
        product = np.eye(graphs.n_nodes)
        stochastic = True
        for k in range(graphs.period):
            w = graphs.matrix(k, rule)
            w = w.toarray() if sp.issparse(w) else np.asarray(w, dtype=float)
            stochastic &= bool(np.allclose(w.sum(axis=0), 1.0, atol=1e-10))
            product = w @ product
        if stochastic:
            continue
        values, vectors = np.linalg.eig(product.T)
        pi = np.real(vectors[:, int(np.argmin(np.abs(values - 1.0)))])
        return pi / pi.sum(), rule
    return None


def _broken_invariant(period: _Period, target) -> str:
    """Which conserved quantity of the round starts away from its value at the fixed point
    at the minimiser, as a phrase (coordinate 0 of the probe); '' when none does."""
    method, ctx, basis = period.method, period.ctx, period.basis
    m = period.start.shape[0]
    if not basis.shape[1]:
        return ""
    t_lin, t_off = period.maps[0]
    n = ctx.n_clients
    pins = np.zeros((n + 1, m))
    pins[np.arange(n), ctx.layout.rows(method.model_block, np.arange(n) + method.client_node)] = 1
    pins[n] = np.asarray(method.output(np.eye(m), ctx), dtype=float).reshape(m)
    lhs = np.vstack([np.eye(m) - t_lin, pins])
    rhs = np.concatenate([t_off, np.full(n + 1, target[0])])
    particular, resid, _ = _balanced_lstsq(lhs, rhs)
    if resid > 1e-8:
        return ""  # no fixed point at x_star at all: not an invariant's doing
    _, sv, vt = np.linalg.svd(lhs)
    free = vt[int((sv > 1e-10 * sv[0]).sum()) :].T  # fixed points at x_star: particular + free a
    start = period.start[:, 0]
    gap = basis.T @ (start - particular)
    if free.shape[1]:
        a, *_ = np.linalg.lstsq(basis.T @ free, gap, rcond=None)
        particular = particular + free @ a
        gap = basis.T @ (start - particular)
    if np.linalg.norm(gap) <= 1e-8 * max(1.0, float(np.abs(start).max())):
        return ""
    c = basis @ (gap / np.linalg.norm(gap))
    c = c / np.abs(c).max()
    c = -c if c[np.flatnonzero(np.abs(c) >= 1e-8)[0]] < 0 else c  # the first term positive
    scale = 1e-9 * max(1.0, float(np.abs(start).max()))
    now, needed = (v if abs(v) > scale else 0.0 for v in (c @ start, c @ particular))
    return (
        f"every round conserves {_describe(c, ctx.layout)}, which is {now:.6g} as the run "
        f"starts (its initial blocks and round 0's own phases) but must be {needed:.6g} at "
        "the fixed point at the minimiser: the start breaks an "
        "invariant of the round (a memory or tracker block started away from its value, "
        "say at the first gradients instead of 0), so the run ends elsewhere"
    )


def _describe(c: np.ndarray, layout) -> str:
    """A conserved row combination ``c^T Z`` by blocks: ``sum(y) - sum(m)``, or 'a weighted
    sum of y's rows' where a block's coefficients differ."""
    terms = []
    for block in layout.blocks:
        part = c[layout.rows(block.name)]
        if np.abs(part).max() < 1e-8:
            continue
        if np.allclose(part, part[0], atol=1e-8):
            coef = f"{abs(part[0]):.4g} " if not np.isclose(abs(part[0]), 1.0) else ""
            sign = "-" if part[0] < 0 else "+"
            terms.append(f"{sign} {coef}sum({block.name})")
        else:
            terms.append(f"+ a weighted sum of {block.name}'s rows")
    text = " ".join(terms).removeprefix("+ ")
    return f"the quantity {text}"

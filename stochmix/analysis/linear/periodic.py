"""Periodic participation patterns: where a method ends (:func:`fixed_point_under_pattern`)
and its exact asymptotic rate (:func:`periodic_rate`) when round r has participants
``masks[r % P]``."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import scipy.linalg
from jaxtyping import Bool, Float

from ..._validate import as_bool, as_int, as_real_array
from ...engine import Method
from . import maps
from .conserved import _ConservedScan
from .gradients import affine_gradients
from .maps import AffineMap
from .operators import (
    _check_points,
    _masks,
    pattern_operator,
    phase_operator,
    refuse_sampled,
    run_context,
)

__all__ = [
    "FixedPoint",
    "PeriodicRate",
    "REFINE_STEPS",
    "fixed_point_under_pattern",
    "periodic_rate",
]

REFINE_STEPS = 4  # at most this many corrections of a fixed point by the phase-wise residual


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

    **Accuracy.** The composed map of a period carries the rounding of its sparse products,
    and the fixed point is as sensitive to it as ``I - T`` is ill-conditioned (1e4 and more
    for slow methods); worse, when ``I - T`` is singular the slice taken from its numerical
    left null space is off by as much. So, on maps analysed densely (``DENSE_LIMIT``): the
    slice is fixed by the *exact* conserved quantities of the period's phases
    (:func:`conserved_quantities`: structural, from the phases' coefficients, not from the
    composed map) whenever they account for every fixed direction (``V^T vec(Z*) =
    V^T vec(Z_start)`` per column, with ``I - T`` solved in least squares jointly), and the
    point is then refined by the residual of the period applied phase by phase, as
    :func:`stochmix.run` applies it (up to ``REFINE_STEPS`` corrections). FOCUS's model then
    equals the minimiser of the objective over the clients that take part to about 1e-14
    (1e-10 before, with clients that never take part). Larger maps use
    :meth:`AffineMap.fixed_point` as is.

    Returns:
        ``FixedPoint(state, model)``: ``Z*`` (m, d) and ``method.output(Z*, ctx)`` (d,), for
        instance FedAvg's biased end point or FOCUS's exact ``x_star``.
    """
    _check_points(method)
    ctx = run_context(method, problem, probabilities)
    aff = affine_gradients(problem)
    masks = _masks(masks, ctx.n_clients, someone=True)
    period = masks.shape[0]
    first = _first_round(first_round, period)
    x0 = np.zeros(ctx.dim) if x0 is None else as_real_array(x0, "x0")
    if x0.shape != (ctx.dim,):
        raise ValueError(f"x0 must have shape ({ctx.dim},), got {x0.shape}")
    z = ctx.layout.initial(x0)
    for r in range(first):
        _apply(_phases(method, masks, r, ctx), z, method, ctx, aff)
    # The period's phases, built once: the composed map and the phase-wise residual use the
    # same ones (a method that learns during the run sees each round once, in order).
    cycle_phases = [_phases(method, masks, r, ctx) for r in range(first, first + period)]
    m, d = z.shape
    cycle = AffineMap.identity(m * d, (m, d))
    for phases in cycle_phases:
        for phase in phases:
            refuse_sampled(phase)
            if not phase.is_identity:
                cycle = phase_operator(phase, ctx.layout, method, aff).compose(cycle)
    if cycle.size > maps.DENSE_LIMIT:
        state = cycle.fixed_point(start=z).reshape(z.shape)
    else:
        state = _dense_fixed_point(cycle, cycle_phases, z, method, ctx, aff)
    return FixedPoint(state, np.asarray(method.output(state, ctx), dtype=np.float64))


def _phases(method: Method, masks: np.ndarray, r: int, ctx) -> list:
    return method.round_phases(r, np.flatnonzero(masks[r % masks.shape[0]]), ctx)


def _apply(phases: list, z: np.ndarray, method: Method, ctx, aff) -> None:
    """Apply phases to the state ``z`` (m, d) in place, as the engine does (gradients
    ``H_c x - c_c`` at the model rows)."""
    for phase in phases:
        if phase.is_identity:
            continue
        refuse_sampled(phase)
        new = phase.mix @ z
        if phase.inject is not None:
            clients = phase.clients
            points = method.points(z, ctx, clients)
            new += phase.inject @ (aff.apply(clients, points) - aff.linear[clients])
        z[phase.rows] = new


def _dense_fixed_point(cycle: AffineMap, cycle_phases, z, method, ctx, aff) -> np.ndarray:
    """The fixed point of a period's map on the slice of ``z`` (m, d), solved densely and
    refined by the phase-wise residual (see :func:`fixed_point_under_pattern`)."""
    n, (m, d) = cycle.size, z.shape
    a = np.eye(n) - cycle.linear.toarray()
    nullity = cycle.unit_multiplicity()
    z0 = z.reshape(-1)
    if nullity == 0:
        system, rhs = a, cycle.offset
        zero = np.zeros(0)
        start = None
    else:
        scan = _ConservedScan(m)
        for phases in cycle_phases:
            scan.add_round(phases)
        basis = scan.basis()
        if basis.shape[1] * d != nullity:  # fixed directions the phases do not explain
            return cycle.fixed_point(start=z).reshape(z.shape)
        conserved = np.kron(basis, np.eye(d))  # (n, k d), orthonormal columns
        system = np.vstack([a, conserved.T])
        start = conserved.T @ z0
        rhs = np.concatenate([cycle.offset, start])
        zero = np.zeros(conserved.shape[1])
    q, r = scipy.linalg.qr(system, mode="economic")
    solve = lambda b: scipy.linalg.solve_triangular(r, q.T @ b)  # noqa: E731
    v = solve(rhs)
    if start is not None:
        resid = system @ v - rhs
        scale = np.linalg.norm(rhs) + np.finfo(float).tiny
        if not np.linalg.norm(resid) <= 1e-8 * scale:
            raise maps.SingularMapError(
                "the affine map has no fixed point on the slice of start: its offset has a "
                "component along a fixed direction of T, so the iterates drift"
            )
    best, best_v = np.inf, v
    for _ in range(REFINE_STEPS + 1):
        # the residual in extended precision (where NumPy has it): then the refined point is
        # accurate to double rounding whatever the conditioning (mixed-precision refinement)
        before = v.reshape(m, d).astype(np.longdouble)
        after = before.copy()
        for phases in cycle_phases:
            _apply(phases, after, method, ctx, aff)
        step = (after - before).reshape(-1).astype(np.float64)
        size = float(np.linalg.norm(step))
        last = best
        if size < best:
            best, best_v = size, v
        if size == 0.0 or size > 0.5 * last:  # at rounding level: no more to gain
            break
        v = v + solve(np.concatenate([step, zero]))
    v = best_v
    return v.reshape(m, d)


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
    masks = _masks(masks, ctx.n_clients, someone=True)
    period = masks.shape[0]
    cycle = pattern_operator(method, problem, masks, _first_round(first_round, period), ctx)
    rho = cycle.spectral_radius(exclude_unit=exclude_unit)
    return PeriodicRate(rho, rho ** (1.0 / period), period)

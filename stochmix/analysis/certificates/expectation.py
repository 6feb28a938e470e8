"""Mean-square certificates under random participation: :func:`certify_mean_square` and its
:class:`MeanSquareCertificate`.

Under a participation process independent across rounds (``Bernoulli``, ``UniformSample``,
``WeightedSample`` of one client, ``Full``), round k is the random linear system

.. math::

    \\xi^+ = A_S \\xi + B_S u_S,\\qquad y_S = C_S \\xi + D_S u_S,

``S`` the round's participation set, drawn with probability ``Pr(S)`` independently of
the past, ``u_S`` the gradients of its calls at the points ``y_S`` (the systems of
:func:`~stochmix.analysis.certificates.round_system`, one per set, on one common state).
A rate rho is certified in mean square when ``V = xi^T P xi``, ``P >= I``, has ``E[V^+ |
xi] <= rho^2 V`` for every objective of the class:

.. math::

    \\sum_S \\Pr(S) [A_S\\ B_S]^T P [A_S\\ B_S] - \\rho^2 [I\\ 0]^T P [I\\ 0]
    + \\sum_S \\sum_c \\lambda_{S,c} Q_{S,c} \\preceq 0

over ``(xi, u_S1, u_S2, ...)``: every set's gradients are inputs of their own with their
own sector constraints ``Q_{S,c}`` (and those between two calls of one client in the
round) and their own multipliers ``lambda_{S,c} >= 0``: the S-procedure applied to each
realisation, so the inequality holds whatever gradients each set's calls see (sound: the
sets' gradients of one objective are one choice among those). The matrix is an arrow (the
sets' inputs meet only through xi), so it is negative semidefinite exactly when it splits
as ``Pr(S) [A_S B_S]^T P [A_S B_S] + sum_c lambda_{S,c} Q_{S,c} - diag(T_S, 0) <= 0`` for
every S with ``sum_S T_S = rho^2 P`` (chordal decomposition, Agler et al. 1988): one LMI of
the size of the state and the set's calls per set, not one of all of them.

Then ``E V_k <= rho^(2k) V_0`` and ``E ||xi_k||^2 <= cond(P) rho^(2k) ||xi_0||^2``: the
error falls in mean square (Costa, Fragoso and Marques, 2005, for Markov jump linear
systems; here the jumps are i.i.d.). The sets are enumerated, so the number of sets is
bounded (:data:`MAX_MASKS`: Bernoulli up to 8 clients, ``UniformSample(10, 5)``).
Exactness: every set's round must have one common fixed point at the minimiser (FedAvg
under partial participation has none: each set pulls towards the minimiser of its own
participants, whatever the local steps), and the run, started as :func:`stochmix.run`
starts it, must end there (checked through a cyclic pattern of every set, with round 0
under each set).
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..._validate import _show, as_bool, as_int, as_real_array
from ...engine import Method
from .certify import (
    _ENTRIES,
    Certificate,
    _check_size,
    check_class,
    check_entry,
    is_sigma,
    method_for_mixing,
)
from .exactness import Unverified, disconnected_reason, end_reason
from .expected_sdp import ExpectedFeasibility
from .lmi import bisect_rate, require_cvxpy
from .system import RoundSystem, _complement, _left_null, round_system

__all__ = [
    "MAX_MASKS",
    "MeanSquareCertificate",
    "certify_mean_square",
    "mask_distribution",
]

#: The most participation sets the mean-square certificate enumerates (one LMI and one
#: slack matrix each): ``Bernoulli`` over up to 8 clients (2^8 sets), ``UniformSample(n,
#: s)`` while ``C(n, s) <= 256`` (``UniformSample(10, 5)``: 252).
MAX_MASKS = 256


@dataclass
class MeanSquareCertificate(Certificate):
    """A certified rate of the mean-square error under a random participation process, or
    why there is none (see :class:`~stochmix.analysis.Certificate` for the
    fields they share).

    ``rate`` is rho per round with ``E V_{k+1} <= rho^2 E V_k`` for the Lyapunov function
    ``V = xi^T P xi`` (``lyapunov[0]``), so ``E ||xi_k - xi_star||^2 <= cond(P) rho^(2k)
    ||xi_0 - xi_star||^2``: a rate in expectation, over the participation sets, for every
    objective of the class; not a bound on every run.

    Attributes:
        masks: (T, n) the participation sets enumerated, one per row; probabilities: (T,)
            their probabilities (sum 1).
        coordinates: (r, m) the certificate's state from one coordinate of the method's
            state as :func:`stochmix.run` lays it out (``xi = coordinates @ z``: the rows
            that matter, balanced, without the directions every set's round conserves);
            output: (r,) the reported model as a row over ``xi``. Empty when not certified.
    """

    masks: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), bool), repr=False)
    probabilities: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)
    coordinates: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)), repr=False)
    output: np.ndarray = field(default_factory=lambda: np.zeros(0), repr=False)

    def __str__(self) -> str:
        head = f"{self.method} (L={self.L:g}, mu={self.mu:g}, {self.masks.shape[0]} sets)"
        if self.certified:
            return (
                f"{head}: certified mean-square rate {self.rate:.6f} per round "
                f"(margin {self.margin:.1e})"
            )
        return f"{head}: {self.status}: {self.reason}"

    def bound(self, error, rounds) -> np.ndarray:
        """The certified bound on ``E ||x_k - x_star||^2`` of the reported model after each
        of ``rounds`` rounds, from the state's initial error ``error`` = ``z_0 - z_star``
        ((m,) or (m, d), laid out as :func:`stochmix.run` lays out the state; rows the
        certificate leaves out are ignored): ``(o^T P^-1 o) rho^(2k) sum_j xi_j^T P xi_j``
        with ``xi_j = coordinates @ error[:, j]`` and ``o`` the output row
        (Cauchy-Schwarz in P's norm). Valid when the start is on the conserved slice of the
        fixed point, as :func:`stochmix.run` starts a method this certificate accepts.

        Raises:
            ValueError: not certified, or ``error`` of the wrong shape.
        """
        if not self.certified:
            raise ValueError(f"bound: {self.method} is {self.status}, nothing is bounded")
        e = as_real_array(error, "error")
        e = e[:, None] if e.ndim == 1 else e
        if e.ndim != 2 or e.shape[0] != self.coordinates.shape[1]:
            raise ValueError(
                f"error must have {self.coordinates.shape[1]} rows (the method's state), got "
                f"shape {np.shape(error)}"
            )
        k = as_real_array(rounds, "rounds")
        p = self.lyapunov[0]
        xi = self.coordinates @ e
        v0 = float(np.einsum("ij,ik,kj->", xi, p, xi))
        gain = float(self.output @ np.linalg.solve(p, self.output))
        return gain * v0 * self.rate ** (2.0 * k)


def mask_distribution(participation, n_clients: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """The participation sets of one round and their probabilities: ``(masks (T, n) bool,
    probabilities (T,))``, sets of probability 0 left out.

    ``participation``: ``Full(n)``; ``Bernoulli`` (every subset, ``prod_i p_i^{s_i} (1 -
    p_i)^{1 - s_i}``); ``UniformSample(n, s)`` (every s-subset, ``1 / C(n, s)``);
    ``WeightedSample`` of size 1 (one client, ``w_i / sum w``); or a pair ``(masks,
    probabilities)`` of one's own law. ``n_clients``, when given, must match.

    Raises:
        ValueError: another process (correlated across rounds, recorded, no closed-form
            law), more than :data:`MAX_MASKS` sets, or a pair that is not a law of masks;
            naming ``participation`` and the value.
    """
    from ...participation import Bernoulli, Full, UniformSample, WeightedSample

    def too_many(count: int, n: int) -> ValueError:
        return ValueError(
            f"participation: the mean-square certificate enumerates the participation sets "
            f"of a round, at most {MAX_MASKS} (stochmix.analysis.certificates.MAX_MASKS: "
            f"Bernoulli over up to 8 clients, UniformSample(10, 5)), got {count} sets of "
            f"{n} clients for participation={participation!r}"
        )

    if isinstance(participation, Full):
        masks, probs = np.ones((1, participation.n_clients), bool), np.ones(1)
    elif isinstance(participation, Bernoulli):
        n = participation.n_clients
        if 2**n > MAX_MASKS:
            raise too_many(2**n, n)
        masks = ((np.arange(2**n)[:, None] >> np.arange(n)) & 1).astype(bool)
        p = np.asarray(participation.probabilities, dtype=float)
        probs = np.where(masks, p, 1.0 - p).prod(axis=1)
    elif isinstance(participation, UniformSample):
        n, size = participation.n_clients, participation.size
        count = math.comb(n, size)
        if count > MAX_MASKS:
            raise too_many(count, n)
        chosen = np.array(list(itertools.combinations(range(n), size)), dtype=np.int64)
        masks = np.zeros((count, n), bool)
        masks[np.arange(count)[:, None], chosen] = True
        probs = np.full(count, 1.0 / count)
    elif isinstance(participation, WeightedSample) and participation.size == 1:
        n = participation.n_clients
        if n > MAX_MASKS:
            raise too_many(n, n)
        masks, probs = np.eye(n, dtype=bool), np.asarray(participation.probabilities, float)
    elif isinstance(participation, tuple) and len(participation) == 2:
        masks = np.asarray(participation[0])
        probs = as_real_array(participation[1], "participation probabilities")
        if masks.dtype != np.bool_ or masks.ndim != 2 or probs.shape != (masks.shape[0],):
            raise ValueError(
                "participation as a law must be (masks (T, n) bool, probabilities (T,)), got "
                f"masks of shape {masks.shape} and dtype {masks.dtype}, probabilities of "
                f"shape {probs.shape}"
            )
        if masks.shape[0] > MAX_MASKS:
            raise too_many(masks.shape[0], masks.shape[1])
        if np.any(probs < 0) or abs(probs.sum() - 1.0) > 1e-9:
            raise ValueError(
                f"participation probabilities must be >= 0 and sum to 1, got {_show(probs)}"
            )
        if np.unique(masks, axis=0).shape[0] != masks.shape[0]:
            raise ValueError("participation masks must be distinct sets, got repeated rows")
    else:
        raise ValueError(
            "participation must be a process independent across rounds whose law has a "
            "closed form (Full, Bernoulli, UniformSample, WeightedSample of size 1) or a "
            f"pair (masks, probabilities), got participation={participation!r}"
        )
    keep = probs > 0
    masks, probs = masks[keep], probs[keep] / probs[keep].sum()
    if n_clients is not None and masks.shape[1] != n_clients:
        raise ValueError(
            f"n_clients = {n_clients} does not match the participation's {masks.shape[1]} clients"
        )
    if not masks.any(axis=0).all():
        raise ValueError(
            f"participation: clients {np.flatnonzero(~masks.any(axis=0))} never take part, so "
            "the run has no rate to the minimiser of every part"
        )
    return masks, probs


def certify_mean_square(
    method: Method,
    *,
    L,
    mu,
    participation,
    mixing=None,
    n_clients=None,
    weights=None,
    pairs: bool = True,
    tol: float = 1e-7,
    solver: str | None = None,
) -> MeanSquareCertificate:
    """The worst-case rate of the mean-square error of ``method`` under a random
    participation process, over every objective whose parts are L-smooth and mu-strongly
    convex: ``E ||xi_k - xi_star||^2 <= C rho^(2k)`` (see the module docstring). Also
    reached as ``certify(..., participation=process, mean_square=True)``.

    Args:
        method: as for :func:`~stochmix.analysis.certify`; a decentralized
            method's participants are its active nodes, its graphs of period 1.
        L, mu: the class, 0 < mu <= L.
        participation: the process (see :func:`mask_distribution`).
        mixing: decentralized methods: None (their own graph) or a graph or a matrix; not
            a sigma (the class of matrices is certified with every node active).
        n_clients: must match the process when given.
        weights: the objective's positive weights over the parts (default equal).
        pairs: the inequalities between two calls of one client in a round (local steps).
        tol: bisection tolerance on rho, in (0, 1). solver: a cvxpy SDP solver.

    Returns:
        MeanSquareCertificate: ``status`` "certified", "inexact" (no common fixed point at
        the minimiser, or the run ends elsewhere: FedAvg under partial participation,
        with one local step or more) or "not certified".

    Raises:
        ValueError: as :func:`~stochmix.analysis.certify`, and a process
            without an enumerable law or with more than :data:`MAX_MASKS` sets, a sigma,
            graphs with a period other than 1, a process the method refuses to run under
            (its ``check_participation``: node activation of a method that needs doubly
            stochastic mixing), before any solve.

    References:
        - O. Costa, M. Fragoso, R. Marques, "Discrete-Time Markov Jump Linear Systems",
          Springer, 2005 (mean-square stability, ch. 3).
        - L. Lessard, B. Recht, A. Packard, SIAM J. Optim. 26(1), 2016.
        - J. Agler, W. Helton, S. McCullough, L. Rodman, "Positive semidefinite matrices
          with a given sparsity pattern", Linear Algebra Appl. 107, 1988.
    """
    L, mu = check_class(L, mu)
    pairs = as_bool(pairs, "pairs")
    tol, solver, decentralized = check_entry(method, tol, solver)
    if mixing is not None and not decentralized:
        raise ValueError(
            f"mixing is for decentralized methods; {method.name} mixes through its server "
            f"(got mixing={_show(mixing)})"
        )
    if is_sigma(mixing):
        raise ValueError(
            "mixing: the class of mixing matrices is certified with every node active; under "
            f"random participation give one graph or matrix, got mixing={mixing!r}"
        )
    if n_clients is not None:
        n_clients = as_int(n_clients, "n_clients", minimum=1)
    masks, probs = mask_distribution(participation, n_clients)
    n = masks.shape[1]
    target: Any = method
    if decentralized:
        target = method if mixing is None else method_for_mixing(method, mixing)
        if target.graphs.period != 1:
            raise ValueError(
                f"mixing: {method.name}'s graphs have period {target.graphs.period}; the "
                "mean-square certificate takes one mixing matrix (period 1)"
            )
        if target.graphs.n_nodes != n:
            raise ValueError(
                f"participation: {n} clients for {method.name}'s {target.graphs.n_nodes} nodes"
            )
        if weights is not None:
            raise ValueError(
                f"weights are for federated methods; {method.name}'s objective is its nodes' "
                f"average (got weights={_show(weights)})"
            )
    _check_size(method, n, decentralized, "participation")
    if not isinstance(participation, tuple):
        target.check_participation(participation)  # what run refuses, refused alike
    w = np.full(n, 1.0 / n) if weights is None else as_real_array(weights, "weights")
    if w.shape != (n,) or not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise ValueError(f"weights must be {n} positive numbers, got {_show(weights)}")
    w = w / w.sum()

    start = time.perf_counter()
    raw = [round_system(target, mask[None, :], 1) for mask in masks]  # a round per set
    systems, coordinates, output = _common_form(raw, L)
    out = MeanSquareCertificate(method.name, 1.0, "inexact", L, mu, None, 1)
    out.masks, out.probabilities = masks, probs
    out.reason = _common_fixed_point_reason(systems, w, method.name)
    if not out.reason and decentralized:
        out.reason = disconnected_reason(target)
    if not out.reason:
        try:
            out.reason = _end_reason(target, masks, w, L, mu)
        except Unverified as error:
            out.status = "not certified"
            out.reason = f"{error}; no rate is certified without knowing the run ends at x_star"
    reduced, basis = _reduced(systems)
    out.state_size = reduced[0].A.shape[0]
    if out.reason:
        out.seconds = time.perf_counter() - start
        return out
    require_cvxpy()
    feasibility = ExpectedFeasibility(reduced, probs, mu / L, pairs, solver)
    rate, found = bisect_rate(feasibility, tol)
    out.solves, out.seconds = feasibility.solves, time.perf_counter() - start
    if found is None or rate >= 1.0:
        out.status = "not certified"
        out.reason = (
            "no quadratic Lyapunov function falls in expectation by a factor below 1 a round "
            "under the sector constraints of every participation set (the method may diverge "
            "in mean square for some objective of the class, or the analysis is too loose)"
        )
        return out
    out.status, out.rate, out.margin = "certified", float(rate), found.margin
    out.lyapunov = found.lyapunov
    out.multipliers = {"gradients": found.gradient_multipliers}
    out.coordinates = basis.T @ coordinates
    out.output = basis.T @ output
    return out


_ENTRIES["mean_square"] = certify_mean_square  # certify(..., mean_square=True)


# --------------------------------------------------------------------------- the systems
def _common_form(raw: list[RoundSystem], L: float):
    """The sets' systems in gradient units of L, their common state balanced by one
    diagonal similarity in powers of 2 (Osborne's iteration on all the sets' ``[A B; C
    D]`` together), and restricted to the rows that reach a gradient point or the output
    in some set. Returns the systems, the (r, m) map from the method's state to theirs and
    the output row over theirs."""
    m = raw[0].A.shape[0]
    keep = raw[0].output != 0
    for s in raw:
        keep |= np.abs(s.C).sum(axis=0) > 0
    while True:  # and every row a kept row reads, in any set
        grown = keep.copy()
        for s in raw:
            grown |= np.abs(s.A[keep]).sum(axis=0) > 0
        if grown.sum() == keep.sum():
            break
        keep = grown
    idx = np.flatnonzero(keep)
    systems = []
    for s in raw:
        b, d = s.B[idx].copy(), s.D.copy()
        b[:, : s.calls] *= L
        d[:, : s.calls] *= L
        systems.append(replace(s, A=s.A[np.ix_(idx, idx)], B=b, C=s.C[:, idx], D=d))
    output = raw[0].output[idx].copy()
    scale = np.ones(idx.size)
    off = ~np.eye(idx.size, dtype=bool)
    for _ in range(40):
        rows = sum(
            (np.where(off, s.A, 0.0) ** 2).sum(axis=1) + (s.B**2).sum(axis=1) for s in systems
        )
        cols = sum(
            (np.where(off, s.A, 0.0) ** 2).sum(axis=0) + (s.C**2).sum(axis=0) for s in systems
        )
        rows, cols = np.sqrt(rows), np.sqrt(cols)
        ok = (rows > 0) & (cols > 0)
        f = np.ones_like(rows)
        f[ok] = np.exp2(np.round(0.5 * np.log2(cols[ok] / rows[ok])))
        if np.all(f == 1.0):
            break
        systems = [
            replace(s, A=s.A * f[:, None] / f[None, :], B=s.B * f[:, None], C=s.C / f[None, :])
            for s in systems
        ]
        output = output / f
        scale = scale * f
    coordinates = np.zeros((idx.size, m))
    coordinates[np.arange(idx.size), idx] = scale
    return systems, coordinates, output


def _reduced(systems: list[RoundSystem]) -> tuple[list[RoundSystem], np.ndarray]:
    """The systems without the directions every set's round conserves whatever the
    gradients (``c^T A_S = c^T``, ``c^T B_S = 0`` for every S), and the basis (r', r) of
    what is left (orthonormal columns)."""
    r = systems[0].A.shape[0]
    stacked = np.hstack([np.hstack([s.A - np.eye(r), s.B]) for s in systems])
    conserved = _left_null(stacked, max(1.0, float(np.abs(stacked).max())))
    basis = _complement(conserved) if conserved.shape[1] else np.eye(r)
    out = [replace(s, A=basis.T @ s.A @ basis, B=basis.T @ s.B, C=s.C @ basis) for s in systems]
    return out, basis


def _common_fixed_point_reason(systems: list[RoundSystem], w: np.ndarray, name: str) -> str:
    """'' when one state is a fixed point of every set's round with every gradient taken at
    one model: with zero gradients (consensus) and with the parts' gradients at the
    minimiser (any ``g`` with ``sum_i w_i g_i = 0``, a basis of them); else the reason."""
    n = w.size
    targets = [np.zeros(n)]
    for i in range(1, n):
        g = np.zeros(n)
        g[i], g[0] = 1.0, -w[i] / w[0]
        targets.append(g)
    r = systems[0].A.shape[0]
    for which, g in enumerate(targets):
        lhs, rhs = [], []
        for s in systems:
            p = s.calls
            u = g[s.clients]
            y = np.ones(p) if which == 0 else np.zeros(p)
            lhs += [np.eye(r) - s.A, s.C[:p]]
            rhs += [s.B[:, :p] @ u, y - s.D[:p, :p] @ u]
        a, b = np.vstack(lhs), np.concatenate(rhs)
        xi, *_ = np.linalg.lstsq(a, b, rcond=None)
        if np.abs(a @ xi - b).max() > 1e-9 * max(1.0, float(np.abs(b).max())):
            if which == 0:
                return (
                    f"{name} has no state fixed by the round of every participation set with "
                    "every gradient point at one model and zero gradients; rate 1"
                )
            return (
                f"under this participation, {name}'s rounds of different participation sets "
                "have no common fixed point at x_star when the parts' gradients differ there "
                "(grad f_i(x_star) != 0): each set pulls towards a point of its own (FedAvg "
                "under partial participation, with one local step or more, moves to the "
                "minimiser of the round's participants), so the run does not converge to "
                "x_star, in mean square or otherwise; rate 1"
            )
    return ""


def _end_reason(method, masks: np.ndarray, w: np.ndarray, L: float, mu: float) -> str:
    """'' when the run, started as :func:`stochmix.run` starts it, ends at the minimiser,
    whatever the sets drawn. Once every set's round shares the fixed point (checked first),
    where a run ends is fixed by the quantities every set's round conserves, at the values
    the start and round 0 give them: so the end of the cyclic pattern of every set (each
    once a period) is checked, with round 0 under one set of each group of sets that give
    those quantities the same values (round 0's own phases may depend on who takes
    part)."""
    starts = _round0_groups(method, masks, L, mu)
    for first in starts:
        reason = end_reason(method, np.roll(masks, -first, axis=0), w, L, mu)
        if reason and len(starts) > 1:
            shown = "".join("1" if b else "0" for b in masks[first])
            return f"with round 0's participants {shown}: {reason}"
        if reason:
            return reason
    return ""


def _round0_groups(method, masks: np.ndarray, L: float, mu: float) -> list[int]:
    """One set (its index) per distinct value of the conserved quantities after round 0
    on the exactness probe, round 0 under each set in turn."""
    import warnings

    from ..linear.conserved import _ConservedScan
    from ..linear.gradients import affine_gradients
    from ..linear.operators import run_context
    from ..linear.periodic import _apply, _phases
    from .exactness import _probe

    problem, x0 = _probe(masks.shape[1], L, mu)
    ctx = run_context(method, problem)
    aff = affine_gradients(problem)
    scan = _ConservedScan(ctx.layout.size)
    for mask in masks:
        scan.add_round(_phases(method, mask[None, :], 1, ctx))
    basis = scan.basis()
    if not basis.shape[1]:
        return [0]
    values = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for mask in masks:  # one round each (at most MAX_MASKS), not a period's map
            z = ctx.layout.initial(x0)
            _apply(_phases(method, mask[None, :], 0, ctx), z, method, ctx, aff)
            values.append((basis.T @ z).ravel())
    values_arr = np.array(values)
    tol = 1e-9 * max(1.0, float(np.abs(values_arr).max()))
    groups: list[int] = []
    for i, value in enumerate(values_arr):
        if not any(np.abs(value - values_arr[j]).max() <= tol for j in groups):
            groups.append(i)
    return groups

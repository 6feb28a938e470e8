"""The rate certificate as a semidefinite feasibility problem, and the bisection on the rate.

For a :class:`~stochmix.analysis.certificates.system.RoundSystem` with state ``xi``,
gradients ``u`` at points ``y`` and mixing products ``v = W w``, a rate rho is certified when
there are ``P >= I``, multipliers ``lambda >= 0`` and ``Lambda >= 0`` (PSD) such that

.. math::

    \\begin{bmatrix} A & B \\end{bmatrix}^T P \\begin{bmatrix} A & B \\end{bmatrix}
    - \\rho^2 \\begin{bmatrix} I & 0 \\end{bmatrix}^T P \\begin{bmatrix} I & 0 \\end{bmatrix}
    + \\sum_c \\lambda_c Q_c + \\sum_{c < c'} \\lambda_{cc'} Q_{cc'}
    + \\sigma^2 G_w^T \\Lambda G_w - G_v^T \\Lambda G_v \\preceq 0,

with ``Q_c`` the sector constraint of call c about the fixed point, ``(u_c - mu y_c)(L y_c -
u_c) >= 0`` (every L-smooth, mu-strongly convex function satisfies it, gradients of one
dimension at a time: the analysis holds in every dimension), ``Q_cc'`` the same between two
calls of one client (any two points of one function: Taylor, Hendrickx and Glineur's
interpolation inequalities without the function values), and the last two terms the
constraint ``||v_perp|| <= sigma ||w_perp||`` on the disagreement directions, with a full
PSD multiplier (one W for every mixing product of the iteration). Then ``V = xi^T P xi``
falls by rho^2 every round (Lessard, Recht and Packard, 2016), and ``||xi_k|| <=
sqrt(cond P) rho^k ||xi_0||``. Several systems (the average and disagreement parts of a
decentralized method) share the gradient multipliers and have one ``P`` each.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

from ..._lazy import optional_module
from .system import RoundSystem

__all__ = ["Candidates", "Feasibility", "Solution", "bisect_rate", "require_cvxpy"]


def require_cvxpy():
    """cvxpy, or an ImportError that says how to install it."""
    return optional_module("cvxpy", "analysis", "rate certificates and mixing design")


def _sector(alpha: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """The symmetric matrix of the quadratic form ``(alpha^T z)(beta^T z)``."""
    outer = np.outer(alpha, beta)
    return (outer + outer.T) / 2


@dataclass
class Solution:
    """What one feasible solve found: the Lyapunov matrices, the multipliers and the largest
    eigenvalue of each LMI relative to its P (the margin, <= 0); with constraints across
    rounds (:mod:`~stochmix.analysis.certificates.lifted`) also the function values'
    coefficients ``p`` of the Lyapunov function and the multipliers ``nu`` of its
    positivity (None otherwise)."""

    rate: float
    lyapunov: list
    gradient_multipliers: np.ndarray
    mixing_multipliers: list
    margin: float
    status: str
    function_values: np.ndarray | None = None
    positivity: np.ndarray | None = None


@dataclass
class Feasibility:
    """The certificate's SDP for given systems, ``L``, ``mu`` and ``sigma``, compiled once;
    ``solve(rho)`` says whether rho is certified."""

    systems: list[RoundSystem]
    L: float
    mu: float
    pairs: list[tuple[int, int]]
    sigma: float = 0.0
    solver: str | None = None
    solves: int = field(default=0, init=False)
    seconds: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        cp = require_cvxpy()
        calls = self.systems[0].calls
        self._lam = cp.Variable(calls + len(self.pairs), nonneg=True)
        self._rho2 = cp.Parameter(nonneg=True)
        self._t = cp.Variable()
        constraints = [self._t >= -1.0]
        self._parts = []
        for system in self.systems:
            lmi, p_var, big_lambda, pieces = self._lmi(cp, system)
            constraints.append(lmi << self._t * np.eye(lmi.shape[0]))
            if p_var is not None:
                constraints.append(p_var >> np.eye(p_var.shape[0]))
            if big_lambda is not None:
                constraints.append(big_lambda >> 0)
            self._parts.append((p_var, big_lambda, pieces))
        self._problem = cp.Problem(cp.Minimize(self._t), constraints)
        installed = cp.installed_solvers()  # about 10 ms: once, not at every solve
        self._solver_name = self.solver or ("CLARABEL" if "CLARABEL" in installed else "SCS")

    def _lmi(self, cp, system: RoundSystem):
        r = system.A.shape[0]
        p, q = system.calls, system.mixings
        size = r + p + q
        e = np.hstack([system.A, system.B])
        f = np.hstack([np.eye(r), np.zeros((r, p + q))])
        gy = np.hstack([system.C[:p], system.D[:p]])
        gw = np.hstack([system.C[p:], system.D[p:]])
        unit = np.eye(size)
        u = unit[r : r + p]
        v = unit[r + p :]
        forms = [_sector(u[c] - self.mu * gy[c], self.L * gy[c] - u[c]) for c in range(p)]
        for a, b in self.pairs:
            du, dy = u[a] - u[b], gy[a] - gy[b]
            forms.append(_sector(du - self.mu * dy, self.L * dy - du))
        stack = np.stack(forms).reshape(len(forms), -1) if forms else np.zeros((0, size * size))
        lmi = cp.Constant(np.zeros((size, size)))
        if forms:
            lmi = cp.reshape(self._lam @ stack, (size, size), order="C")
        p_var = cp.Variable((r, r), symmetric=True) if r else None
        if p_var is not None:
            lmi = lmi + e.T @ p_var @ e - self._rho2 * (f.T @ p_var @ f)
        big_lambda = None
        if q:
            big_lambda = cp.Variable((q, q), symmetric=True)
            lmi = lmi + self.sigma**2 * (gw.T @ big_lambda @ gw) - v.T @ big_lambda @ v
        lmi = (lmi + lmi.T) / 2
        return lmi, p_var, big_lambda, (e, f, stack, gw, v)

    def solve(self, rho: float) -> Solution | None:
        """The certificate at rate ``rho``, or None when none is found."""
        return solve_verified(self, rho)

    def _verify(self, rho: float, status: str) -> Solution | None:
        """Recompute each LMI from the solver's numbers; accept only a negative
        semidefinite one (to 1e-9 of its P's scale) with P positive definite."""
        lam = np.asarray(self._lam.value, dtype=float)
        values = [
            (None if p_var is None else p_var.value, None if big is None else big.value)
            for p_var, big, _ in self._parts
        ]
        return self._check(rho, status, lam, values)

    def _check(self, rho: float, status: str, lam, values: list) -> Solution | None:
        """:meth:`_verify` on given numbers: the multipliers ``lam`` and, for each system,
        its ``(P, Lambda)`` (None where it has none)."""
        lam = np.maximum(np.asarray(lam, dtype=float), 0.0)
        worst = -np.inf
        lyapunov, mixing = [], []
        for (p_value, big_value), (p_var, big_lambda, (e, f, stack, gw, v)) in zip(
            values, self._parts, strict=True
        ):
            size = e.shape[1]
            lmi = (lam @ stack).reshape(size, size) if stack.shape[0] else np.zeros((size, size))
            scale = 1.0
            if p_var is not None:
                pm = np.asarray(p_value, dtype=float)
                pm = (pm + pm.T) / 2
                if np.linalg.eigvalsh(pm)[0] <= 0:
                    return None
                lmi = lmi + e.T @ pm @ e - rho * rho * (f.T @ pm @ f)
                scale = max(scale, float(np.abs(pm).max()))
                lyapunov.append(pm)
            if big_lambda is not None:
                lm = np.asarray(big_value, dtype=float)
                lm = (lm + lm.T) / 2
                w, vecs = np.linalg.eigh(lm)
                lm = (vecs * np.maximum(w, 0.0)) @ vecs.T  # the PSD part: a valid multiplier
                lmi = lmi + self.sigma**2 * (gw.T @ lm @ gw) - v.T @ lm @ v
                mixing.append(lm)
            top = float(np.linalg.eigvalsh((lmi + lmi.T) / 2)[-1]) / scale
            worst = max(worst, top)
        if worst > 0.0:  # never a positive margin: the bisection backs off instead
            return None
        return Solution(rho, lyapunov, lam, mixing, worst, status)


@runtime_checkable
class Candidates(Protocol):
    """What :func:`bisect_rate` bisects: a compiled SDP (:class:`Feasibility`, or the
    lifted one of :mod:`~stochmix.analysis.certificates.lifted`) whose ``solve(rho)`` gives
    a verified :class:`Solution` or None."""

    solves: int
    seconds: float

    def solve(self, rho: float) -> Solution | None: ...


def solve_verified(sdp, rho: float) -> Solution | None:
    """Solve ``sdp``'s problem at rate ``rho`` (its ``_rho2`` parameter set to rho^2) with
    its ``_solver_name``, counting ``solves`` and ``seconds``, and return what its
    ``_verify(rho, status)`` makes of the solver's numbers; None when the solver fails or
    finds nothing. The one solve of every certificate's SDP (one round, across rounds, in
    expectation): the solver's word is never taken without the check."""
    cp = require_cvxpy()
    sdp._rho2.value = rho * rho
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():  # "may be inaccurate": _verify decides
            warnings.simplefilter("ignore", UserWarning)
            sdp._problem.solve(solver=sdp._solver_name)
    except cp.error.SolverError:
        return None
    finally:
        sdp.solves += 1
        sdp.seconds += time.perf_counter() - start
    if sdp._problem.status not in ("optimal", "optimal_inaccurate"):
        return None
    return sdp._verify(rho, sdp._problem.status)


def bisect_rate(
    feasibility: Candidates, tol: float, lower: float = 0.0
) -> tuple[float, Solution | None]:
    """The smallest certified rate in [0, 1] (bisection: the set of certified rates is an
    interval up to 1) to ``tol`` relative to ``1 - rho`` (a rate of 1 - 1e-7 is told from
    1), at most 64 solves, and its certificate; ``(1.0, None)`` when rho = 1 has none (no
    linear rate is proved).

    ``lower``: a rate no certificate can beat, in (0, 1) (the exact rate of an instance of
    the class, :func:`~stochmix.analysis.certificates.symmetry.instance_rate`; 0: none).
    The search then starts there: the first solves are at ``lower + 2^j tol (1 - lower) /
    2`` (j = 0, 1, 2), so that a certificate tight at ``lower`` takes one or two solves
    (to the same tolerance), and the bisection goes on above them otherwise. ``lower`` only
    steers the search: every rate returned is one a verified solve certifies."""
    lo, hi, best = 0.0, 1.0, None
    if 0.0 < lower < 1.0:
        lo, step = lower, 0.5 * tol * (1.0 - lower)
        for j in range(3):  # galloping up from the floor
            mid = lower + step * 2**j
            if mid >= 1.0:
                break
            found = feasibility.solve(mid)
            if found is not None:
                hi, best = mid, found
                break
            lo = mid
    if best is None:
        best = feasibility.solve(1.0)
        if best is None:
            return 1.0, None
        if lo == 0.0:
            bottom = feasibility.solve(0.0)
            if bottom is not None:
                return 0.0, bottom
    for _ in range(64):
        if hi - lo <= tol * max(1.0 - lo, 1e-12):
            break
        mid = (lo + hi) / 2
        found = feasibility.solve(mid)
        if found is None:
            lo = mid
        else:
            hi, best = mid, found
    return hi, best

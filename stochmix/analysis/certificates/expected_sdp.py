"""The SDP of the mean-square certificate (:mod:`~stochmix.analysis.certificates.expectation`):
one LMI per participation set S, of the size of the state and S's gradient calls,

.. math::

    \\Pr(S) [A_S\\ B_S]^T P [A_S\\ B_S] + \\sum_c \\lambda_{S,c} Q_{S,c}
    - \\mathrm{diag}(T_S, 0) \\preceq 0, \\qquad \\sum_S T_S = \\rho^2 P,\\qquad P \\succeq I,

the chordal splitting of the one LMI over the state and every set's gradients (whose
blocks meet only through the state): ``E[V^+] <= rho^2 V`` for ``V = xi^T P xi`` whatever
gradients of the class each set's calls see.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .lmi import Solution, _sector, require_cvxpy, solve_verified
from .system import RoundSystem

__all__ = ["FLOOR", "ExpectedFeasibility"]

#: The most negative margin the SDP asks for (each set's LMI ``<= t I``, ``t >= -FLOOR``).
FLOOR = 1e-3


@dataclass
class ExpectedFeasibility:
    """The mean-square certificate's SDP (see the module docstring) for the sets' systems
    (one common state, gradient units of L: the class [m, 1]) and their probabilities,
    compiled once; ``solve(rho)`` gives a verified :class:`~.lmi.Solution` or None."""

    systems: list[RoundSystem]
    probabilities: np.ndarray
    m: float
    pairs: bool = True
    solver: str | None = None
    solves: int = field(default=0, init=False)
    seconds: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        cp = require_cvxpy()
        r = self.systems[0].A.shape[0]
        self._r = r
        self._p = cp.Variable((r, r), symmetric=True)
        self._rho2 = cp.Parameter(nonneg=True)
        self._t = cp.Variable()
        constraints = [self._t >= -FLOOR, self._p >> np.eye(r)]
        self._parts = []
        slacks = []
        for system, prob in zip(self.systems, self.probabilities, strict=True):
            e, stack = self._forms(system)
            size = e.shape[1]
            lam = cp.Variable(stack.shape[0], nonneg=True) if stack.shape[0] else None
            slack = cp.Variable((r, r), symmetric=True)
            lift = np.eye(size)[:r]  # xi inside (xi, u_S)
            lmi = prob * (e.T @ self._p @ e) - lift.T @ slack @ lift
            if lam is not None:
                lmi = lmi + cp.reshape(lam @ stack, (size, size), order="C")
            lmi = (lmi + lmi.T) / 2
            constraints.append(lmi << self._t * np.eye(size))
            slacks.append(slack)
            self._parts.append((e, stack, lam, slack, prob, lift))
        constraints.append(sum(slacks) == self._rho2 * self._p)
        self._problem = cp.Problem(cp.Minimize(self._t), constraints)
        installed = cp.installed_solvers()
        self._solver_name = self.solver or ("CLARABEL" if "CLARABEL" in installed else "SCS")

    def _forms(self, system: RoundSystem) -> tuple[np.ndarray, np.ndarray]:
        """``[A B]`` and the stacked sector forms (calls, then pairs of calls of one client)
        over ``(xi, u_S)``."""
        r, p = self._r, system.calls
        e = np.hstack([system.A, system.B[:, :p]])
        gy = np.hstack([system.C[:p], system.D[:p, :p]])
        u = np.eye(r + p)[r:]
        m = self.m
        forms = [_sector(u[c] - m * gy[c], gy[c] - u[c]) for c in range(p)]
        if self.pairs:
            who = system.clients
            for a in range(p):
                for b in range(a + 1, p):
                    if who[a] == who[b]:
                        du, dy = u[a] - u[b], gy[a] - gy[b]
                        forms.append(_sector(du - m * dy, dy - du))
        size = r + p
        stack = np.stack(forms).reshape(len(forms), -1) if forms else np.zeros((0, size * size))
        return e, stack

    def solve(self, rho: float) -> Solution | None:
        """The certificate at rate ``rho``, or None when none is found."""
        return solve_verified(self, rho)

    def _verify(self, rho: float, status: str) -> Solution | None:
        """Recompute every set's LMI from the solver's numbers, with the slacks' residual
        ``rho^2 P - sum_S T_S`` shared out equally so that they sum to ``rho^2 P`` exactly;
        accept only negative semidefinite ones (P positive definite)."""
        pm = np.asarray(self._p.value, dtype=float)
        pm = (pm + pm.T) / 2
        if np.linalg.eigvalsh(pm)[0] <= 0:
            return None
        slacks = [np.asarray(part[3].value, dtype=float) for part in self._parts]
        slacks = [(s + s.T) / 2 for s in slacks]
        residual = (rho * rho * pm - sum(slacks)) / len(slacks)
        scale = max(1.0, float(np.abs(pm).max()))
        worst = -np.inf
        multipliers = []
        for (e, stack, lam, _, prob, lift), slack in zip(self._parts, slacks, strict=True):
            size = e.shape[1]
            lmi = prob * (e.T @ pm @ e) - lift.T @ (slack + residual) @ lift
            if lam is not None:
                values = np.maximum(np.asarray(lam.value, dtype=float), 0.0)
                lmi = lmi + (values @ stack).reshape(size, size)
                multipliers.append(values)
            else:
                multipliers.append(np.zeros(0))
            worst = max(worst, float(np.linalg.eigvalsh((lmi + lmi.T) / 2)[-1]) / scale)
        if worst > 0.0:
            return None
        return Solution(rho, [pm], np.concatenate(multipliers), [], worst, status)

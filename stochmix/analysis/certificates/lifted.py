"""The certificate with constraints across rounds: function values and the interpolation
inequalities between the gradient calls of two consecutive rounds.

The one-round LMI of :mod:`~stochmix.analysis.certificates.lmi` constrains each gradient
call only against the fixed point and against the other calls of its own round, so it
cannot see that the gradient a momentum method takes in round k+1 comes from the same
function as the one it took in round k; its certificates of heavy ball and Nesterov's
method are loose (Nesterov's is refused for kappa >= 25). Here the Lyapunov function holds
the round's gradients and function values as well as the state,

.. math::

    V_k = \\begin{bmatrix} \\xi_k \\\\ u_k \\end{bmatrix}^T P
          \\begin{bmatrix} \\xi_k \\\\ u_k \\end{bmatrix} + \\sum_c p_c F_{k,c},

``F_{k,c} = f(y_{k,c}) - f(y^\\star_c) - \\nabla f(y^\\star_c)^T (y_{k,c} - y^\\star_c) >= 0``
the value at call c of the part it asks (about the fixed point), and one round is analysed
with both rounds' calls: the variables are ``(xi_k, u_k, v_k, u_{k+1}, v_{k+1})``, and
every ordered pair (a, b) of points of one part among the fixed point, the calls of round k
and the calls of round k + 1 enters with a multiplier ``lambda_ab >= 0`` through Taylor,
Hendrickx and Glineur's interpolation inequality with function values (in units of L, the
class [m, 1], m = mu / L < 1),

.. math::

    F_a \\ge F_b + g_b^T (x_a - x_b) + \\frac{1}{2(1 - m)} \\left( \\|g_a - g_b\\|^2
    + m \\|x_a - x_b\\|^2 - 2 m (g_a - g_b)^T (x_a - x_b) \\right).

A rate rho is certified when ``V_{k+1} - rho^2 V_k + sum lambda_ab psi_ab + (mixing) <= 0``
for all variables (``psi_ab >= 0`` the inequality above; the function values' coefficients
must vanish, they are free) and ``V_k >= ||xi_k||^2`` under the interpolation inequalities
of round k (an S-procedure with multipliers ``nu >= 0``). Then ``||xi_k||^2 <= V_k <=
rho^(2k) V_0`` along every run: the certificate of Taylor, Van Scoy and Lessard (2018), the
Lyapunov form of the weighted off-by-one IQC of Lessard, Recht and Packard (2016). With
``P`` on the state alone, ``p = 0`` and the pairs of round k+1 unused, the conditions are
those of the one-round LMI (the sector constraint is ``psi_{c*} + psi_{*c}``, scaled by 1 -
m), so a rate certified there is certified here: the lifted certificate is never looser.

Several systems (the eigen-systems of a symmetric W, the average and disagreement parts
over the sigma-class) share the multipliers and the function values (a call's value is the
sum over nodes, as the inequalities with one multiplier for every node are), and have one
``P`` each, as in the one-round LMI.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .lmi import Feasibility, Solution, _sector, require_cvxpy, solve_verified
from .system import RoundSystem

__all__ = ["LiftedFeasibility", "point_pairs"]

#: The most negative margin the SDP asks for (the decrease LMI ``<= t I``, ``t >= -FLOOR``):
#: the conditions are homogeneous, so any t < 0 proves the rate; a deep floor lets the
#: solver scale P up without bound, and Clarabel then stops on numerical errors near the
#: certified rate (SCAFFOLD, K = 3, three clients).
FLOOR = 1e-3


def point_pairs(clients: np.ndarray, rounds: int) -> list[tuple[int, int]]:
    """Ordered pairs (a, b), a != b, of points of one part: point 0 is the fixed point (of
    every part), point ``1 + k p + c`` is call c of round k (k < ``rounds``, p calls a
    round, ``clients[c]`` its part)."""
    p = clients.size
    owner = np.concatenate([np.full(1, -1), np.tile(clients, rounds)])
    out = []
    for a in range(owner.size):
        for b in range(owner.size):
            if a != b and (a == 0 or b == 0 or owner[a] == owner[b]):
                out.append((a, b))
    return out if p else []


@dataclass
class _Forms:
    """The interpolation inequalities ``psi_ab >= 0`` of one system: the quadratic part of
    each over the SDP's variables (stacked (pairs, size * size)) and the coefficient of
    every point's function value (pairs, points - 1)."""

    quadratic: np.ndarray
    values: np.ndarray


def _forms(points: np.ndarray, grads: np.ndarray, pairs, m: float) -> _Forms:
    """``psi_ab = F_a - F_b - g_b^T dx - (|dg|^2 + m |dx|^2 - 2 m dg^T dx) / (2 (1 - m))``
    with ``dx = x_a - x_b``, ``dg = g_a - g_b``; ``points`` and ``grads`` (n_points, size)
    the rows giving x and g of each point over the variables (row 0 the fixed point: 0)."""
    size = points.shape[1]
    n_values = points.shape[0] - 1
    quad = np.zeros((len(pairs), size * size))
    values = np.zeros((len(pairs), n_values))
    scale = 1.0 / (2.0 * (1.0 - m))
    for i, (a, b) in enumerate(pairs):  # pairs of points of a round (a handful per call)
        dx, dg = points[a] - points[b], grads[a] - grads[b]
        form = -_sector(grads[b], dx) - scale * (
            np.outer(dg, dg) + m * np.outer(dx, dx) - 2 * m * _sector(dg, dx)
        )
        quad[i] = form.ravel()
        if a:
            values[i, a - 1] += 1.0
        if b:
            values[i, b - 1] -= 1.0
    return _Forms(quad, values)


@dataclass
class LiftedFeasibility:
    """The lifted certificate's SDP for given systems and the class [mu, L] (mu < L),
    compiled once; ``solve(rho)`` says whether rho is certified. ``clients[c]``: the part
    call c asks (calls of one part are paired, across the two rounds too). ``fallback``:
    the one-round LMI of the same systems, tried at a rate the lifted SDP does not certify
    (its certificates are the lifted SDP's too; solved alone it is smaller and better
    conditioned, so a numerical failure of the larger SDP never costs a rate the
    one-round LMI proves)."""

    systems: list[RoundSystem]
    L: float
    mu: float
    clients: np.ndarray
    sigma: float = 0.0
    solver: str | None = None
    fallback: Feasibility | None = None
    solves: int = field(default=0, init=False)
    seconds: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        cp = require_cvxpy()
        self._m = self.mu / self.L
        if not self._m < 1:
            raise ValueError(f"the lifted certificate needs mu < L, got mu/L = {self._m!r}")
        p = int(self.clients.size)
        self._pairs2 = point_pairs(self.clients, 2)  # fixed point, round k, round k + 1
        self._pairs1 = point_pairs(self.clients, 1)  # fixed point, round k
        self._lam = cp.Variable(len(self._pairs2), nonneg=True)
        self._nu = cp.Variable(len(self._pairs1), nonneg=True)
        self._p = cp.Variable(p)
        self._rho2 = cp.Parameter(nonneg=True)
        self._t = cp.Variable()
        constraints = [self._t >= -FLOOR]
        self._parts = []
        values2 = values1 = None
        for system in self.systems:
            part = self._system(cp, system)
            dec, pos, p_var, lams = part["lmis"]
            constraints += [dec << self._t * np.eye(dec.shape[0]), pos >> 0]
            constraints += [lam >> 0 for lam in lams]
            values2, values1 = part["values2"], part["values1"]
            self._parts.append(part)
        if p and values2 is not None and values1 is not None:
            # the function values are free: their coefficients vanish
            constraints.append(self._lam @ values2[:, :p] == self._rho2 * self._p)
            constraints.append(self._lam @ values2[:, p:] == -self._p)
            constraints.append(self._nu @ values1 == self._p)
        self._problem = cp.Problem(cp.Minimize(self._t), constraints)
        installed = cp.installed_solvers()
        self._solver_name = self.solver or ("CLARABEL" if "CLARABEL" in installed else "SCS")

    def _system(self, cp, system: RoundSystem) -> dict:
        r = system.A.shape[0]
        p, q = system.calls, system.mixings
        m = self._m
        # variables of the round: (xi, u, v, u', v'); of the positivity: (xi, u, v)
        size = r + 2 * (p + q)
        unit = np.eye(size)
        xi, u, v = unit[:r], unit[r : r + p], unit[r + p : r + p + q]
        u2, v2 = unit[r + p + q : r + 2 * p + q], unit[r + 2 * p + q :]
        cd = np.hstack([system.C, system.D])
        now = cd @ np.vstack([xi, u, v])  # rows of y (p) then w (q) in round k
        nxt = np.hstack([system.A, system.B]) @ np.vstack([xi, u, v])  # xi_{k+1}
        later = cd @ np.vstack([nxt, u2, v2])  # y, w in round k + 1
        zero = np.zeros((1, size))
        points2 = np.vstack([zero, now[:p], later[:p]])
        grads2 = np.vstack([zero, u, u2])
        forms2 = _forms(points2, grads2, self._pairs2, m)
        small = r + p + q
        cut = np.eye(size)[:small].T  # (xi, u, v) inside the round's variables
        points1 = np.vstack([zero[:, :small], now[:p] @ cut])
        grads1 = np.vstack([zero[:, :small], u @ cut])
        forms1 = _forms(points1, grads1, self._pairs1, m)
        here = np.vstack([xi, u])  # (xi_k, u_k)
        there = np.vstack([nxt, u2])  # (xi_{k+1}, u_{k+1})
        p_var = cp.Variable((r + p, r + p), symmetric=True)
        dec = cp.reshape(self._lam @ forms2.quadratic, (size, size), order="C")
        dec = dec + there.T @ p_var @ there - self._rho2 * (here.T @ p_var @ here)
        pos = here[:, :small].T @ p_var @ here[:, :small]
        if forms1.quadratic.shape[0]:
            pos = pos - cp.reshape(self._nu @ forms1.quadratic, (small, small), order="C")
        pos = pos - np.diag(np.r_[np.ones(r), np.zeros(p + q)])
        lams = []
        gw_now, gw_later = now[p:], later[p:]
        if q:
            lam_now, lam_later, lam_pos = (cp.Variable((q, q), symmetric=True) for _ in range(3))
            dec = dec + self.sigma**2 * (gw_now.T @ lam_now @ gw_now) - v.T @ lam_now @ v
            dec = dec + self.sigma**2 * (gw_later.T @ lam_later @ gw_later) - v2.T @ lam_later @ v2
            w_pos, v_pos = gw_now @ cut, v @ cut
            pos = pos - (self.sigma**2 * (w_pos.T @ lam_pos @ w_pos) - v_pos.T @ lam_pos @ v_pos)
            lams = [lam_now, lam_later, lam_pos]
        dec = (dec + dec.T) / 2
        pos = (pos + pos.T) / 2
        return {
            "lmis": (dec, pos, p_var, lams),
            "forms": (forms2, forms1),
            "rows": (here, there, cut, v, v2, gw_now, gw_later, r),
            "values2": forms2.values,
            "values1": forms1.values,
        }

    def solve(self, rho: float) -> Solution | None:
        """The certificate at rate ``rho``, or None when none is found (by the lifted SDP,
        then by the one-round ``fallback``)."""
        found = self._solve(rho)
        if found is None and self.fallback is not None:
            before = self.fallback.seconds
            found = self.fallback.solve(rho)
            self.solves += 1
            self.seconds += self.fallback.seconds - before
        return found

    def _solve(self, rho: float) -> Solution | None:
        return solve_verified(self, rho)

    def _folded(self, lam: np.ndarray, nu: np.ndarray, p: np.ndarray, rho: float):
        """The multipliers with the solver's residuals in the function values' coefficients
        (about 1e-9) moved onto the pairs with the fixed point, so that the coefficients
        vanish exactly: ``psi_{c*} = F_c - ...`` and ``psi_{*c} = -F_c + ...`` for every
        call; only increases, so every multiplier stays >= 0."""
        calls = p.size
        values2, values1 = self._parts[0]["values2"], self._parts[0]["values1"]
        lam, nu = lam.copy(), nu.copy()
        index2 = {pair: i for i, pair in enumerate(self._pairs2)}
        index1 = {pair: i for i, pair in enumerate(self._pairs1)}
        # decrease: coefficients (lam @ values2) - (rho^2 p, -p) must be 0
        residual = lam @ values2 - np.r_[rho * rho * p, -p]
        for point in range(2 * calls):  # residual e on F: psi_{*c} (-F) if e > 0, psi_{c*} if < 0
            e = residual[point]
            lam[index2[(0, point + 1) if e > 0 else (point + 1, 0)]] += abs(e)
        # positivity: the form is V - nu psi, its coefficients p - nu @ values1
        residual = p - nu @ values1
        for point in range(calls):  # e F left: take e psi_{c*} (+F) off if e > 0, psi_{*c} if < 0
            e = residual[point]
            nu[index1[(point + 1, 0) if e > 0 else (0, point + 1)]] += abs(e)
        return lam, nu

    def _verify(self, rho: float, status: str) -> Solution | None:
        """Recompute each LMI from the solver's numbers (multipliers clipped at 0, the
        function values' coefficients made exactly 0); accept only a negative semidefinite
        decrease and a positivity with ``V >= ||xi||^2 / 2``."""
        lam = np.asarray(self._lam.value, dtype=float)
        nu = np.asarray(self._nu.value, dtype=float)
        p = np.asarray(self._p.value, dtype=float) if self.clients.size else np.zeros(0)
        values = [
            (part["lmis"][2].value, [var.value for var in part["lmis"][3]]) for part in self._parts
        ]
        return self._check(rho, status, lam, nu, p, values)

    def _check(self, rho: float, status: str, lam, nu, p, values: list) -> Solution | None:
        """:meth:`_verify` on given numbers: the multipliers ``lam`` and ``nu``, the function
        values' coefficients ``p`` and, for each system, ``(P, [Lambda...])``."""
        lam = np.maximum(np.asarray(lam, dtype=float), 0.0)
        nu = np.maximum(np.asarray(nu, dtype=float), 0.0)
        lam, nu = self._folded(lam, nu, np.asarray(p, dtype=float), rho)
        worst = -np.inf
        lyapunov, mixing = [], []
        for (p_value, lam_values), part in zip(values, self._parts, strict=True):
            forms2, forms1 = part["forms"]
            here, there, cut, v, v2, gw_now, gw_later, r = part["rows"]
            size, small = here.shape[1], cut.shape[1]
            pm = np.asarray(p_value, dtype=float)
            pm = (pm + pm.T) / 2
            dec = (lam @ forms2.quadratic).reshape(size, size)
            dec = dec + there.T @ pm @ there - rho * rho * (here.T @ pm @ here)
            pos = here[:, :small].T @ pm @ here[:, :small]
            if forms1.quadratic.shape[0]:
                pos = pos - (nu @ forms1.quadratic).reshape(small, small)
            lm = []
            for value in lam_values:
                x = np.asarray(value, dtype=float)
                w, vecs = np.linalg.eigh((x + x.T) / 2)
                lm.append((vecs * np.maximum(w, 0.0)) @ vecs.T)  # the PSD part: valid
            if lm:
                s2 = self.sigma**2
                dec = dec + s2 * (gw_now.T @ lm[0] @ gw_now) - v.T @ lm[0] @ v
                dec = dec + s2 * (gw_later.T @ lm[1] @ gw_later) - v2.T @ lm[1] @ v2
                w_pos, v_pos = gw_now @ cut, v @ cut
                pos = pos - (s2 * (w_pos.T @ lm[2] @ w_pos) - v_pos.T @ lm[2] @ v_pos)
                mixing.append(lm)
            half = np.diag(np.r_[np.full(r, 0.5), np.zeros(small - r)])
            if np.linalg.eigvalsh((pos + pos.T) / 2 - half)[0] < 0:
                return None
            scale = max(1.0, float(np.abs(pm).max()))
            top = float(np.linalg.eigvalsh((dec + dec.T) / 2)[-1]) / scale
            worst = max(worst, top)
            lyapunov.append(pm)
        if worst > 0.0:  # never a positive margin: the bisection backs off instead
            return None
        return Solution(rho, lyapunov, lam, mixing, worst, status, function_values=p, positivity=nu)

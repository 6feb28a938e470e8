"""The one-round whole-network certificate solved by an interior-point method that keeps the
Lyapunov matrix's Kronecker structure.

The LMI of :mod:`~stochmix.analysis.certificates.lmi` for one system without mixing inputs,

.. math::

    t I - E^T P E + \\rho^2 F^T P F - \\sum_c \\lambda_c Q_c \\succeq 0,\\quad
    P - I \\succeq 0,\\quad \\lambda \\ge 0,\\quad t + 1 \\ge 0,\\quad \\min t,

(``E = [A B]``, ``F = [I 0]``) is a dual-form SDP ``C - sum_i y_i A_i = Z >= 0`` whose
variables ``y`` are the ``r (r + 1) / 2`` entries of P, the multipliers and t. A general
conic solver handed this problem (Clarabel through cvxpy) factorises its whole KKT system,
in which every PSD cone is a dense block of ``N (N + 1) / 2`` rows and every entry of P
touches every entry of the LMI: at n = 20 (N = 79, r = 59) about 6,700 dense rows a Newton
step, minutes a solve. A primal-dual method of the HKM direction (Helmberg, Rendl,
Vanderbei and Wolkowicz; Kojima, Shindoh and Hara; Monteiro) only needs the Schur
complement ``M_ij = sum_blocks tr(A_i X A_j Z^{-1})``, of the size of ``y``, and the P part
of it is a sum of Kronecker products: with ``A_ab = sum_k s_k G_k^T S_ab G_k`` (``S_ab =
e_a e_b^T + e_b e_a^T``),

.. math::

    \\mathrm{tr}(A_{ab} X A_{cd} Z^{-1}) = \\sum_{k, l} s_k s_l
    \\left(U_{bc} V_{da} + U_{bd} V_{ca} + U_{ac} V_{db} + U_{ad} V_{cb}\\right),\\quad
    U = G_k X G_l^T,\\ V = G_l Z^{-1} G_k^T,

so one Newton step costs ``O(r^4 + m^3)`` (m the entries of y), not ``O(N^6)``.

The method starts dual feasible (P = 2 I, every multiplier 1, t above the LMI's top
eigenvalue) and stays so (Z is recomputed from y at every step, a step kept only where it
is positive definite), so every iterate is a certificate of its own t; it stops at the
first iterate with t < 0 that :meth:`~stochmix.analysis.certificates.lmi.Feasibility._check`
accepts on the full LMI (the same check as the cvxpy path), and gives up when the primal
iterate proves the optimum positive (weak duality) or the steps stall. Soundness rests on
the check alone.

References:
    - C. Helmberg, F. Rendl, R. Vanderbei, H. Wolkowicz, "An interior-point method for
      semidefinite programming", SIAM J. Optim. 6(2), 1996.
    - S. Mehrotra, "On the implementation of a primal-dual interior point method", SIAM J.
      Optim. 2(4), 1992.
    - K.-C. Toh, M. Todd, R. Tütüncü, "SDPT3: a MATLAB software package for semidefinite
      programming", Optim. Methods Softw. 11, 1999.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from functools import cache
from typing import no_type_check

import numpy as np
from scipy.linalg import cho_factor, cho_solve

from ...engine.plan.gradients import numba_unavailable
from .lmi import Feasibility, Solution

__all__ = ["StructuredFeasibility", "structured_applies"]

#: Newton steps at most per solve.
MAX_STEPS = 80

#: A warm start begins where an earlier solve's duality measure fell under this fraction of
#: the first cold start's (:meth:`StructuredFeasibility.probe`).
WARM_MU = 1e-4

#: Newton steps at most after the primal iterate proves the optimum positive, for the
#: optimum's value (:meth:`StructuredFeasibility.probe`).
VALUE_STEPS = 12


def structured_applies(systems: list, sigma: float) -> bool:
    """Whether :class:`StructuredFeasibility` takes these systems: one, without mixing
    inputs (the whole-network round), with a state."""
    return len(systems) == 1 and systems[0].mixings == 0 and systems[0].A.shape[0] > 0


@dataclass
class _Block:
    """One PSD block ``Z = C - sum_k s_k G_k^T P G_k - sum_j y_j D_j`` of size N: ``terms``
    the (G (r, N), s) pairs (s = None: rho^2 times ``-1``, set at each solve) and ``dense``
    (k, N, N) the matrices of the other variables."""

    c: np.ndarray
    terms: list
    dense: np.ndarray


def _sympick(w: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``tr(S_ab W) = W_ab + W_ba`` for every pair (works on a stack (..., r, r))."""
    return w[..., a, b] + w[..., b, a]


@no_type_check  # compiled by Numba: no runtime type checks wrapped around it
def _add_kron(out, u, v, a, b, weight):  # pragma: no cover - run compiled
    """``out += weight * kron(u, v)`` entry by entry (:meth:`_Gather.kron`): U and V read
    where they lie (small: in the L1 cache), no index arrays of size m^2."""
    m = a.size
    for i in range(m):
        ai, bi = a[i], b[i]
        for j in range(m):
            aj, bj = a[j], b[j]
            s = u[bi, aj] * v[bj, ai]
            s += u[bi, bj] * v[aj, ai]
            s += u[ai, aj] * v[bj, bi]
            s += u[ai, bj] * v[aj, bi]
            out[i, j] += weight * s


@cache
def _compiled_kron():
    """:func:`_add_kron` compiled with Numba (imported on first use), or None where Numba
    cannot be used (then :class:`_Gather` gathers with NumPy: the same sums)."""
    if numba_unavailable() is not None:
        return None
    import numba

    return numba.njit(nogil=True, cache=True)(_add_kron)


class _Gather:
    """The pairs of :meth:`kron` (and, without Numba, their flat indices, computed once per
    size)."""

    def __init__(self, r: int, a: np.ndarray, b: np.ndarray) -> None:
        self.a, self.b = a.astype(np.intp), b.astype(np.intp)
        self._compiled = _compiled_kron()
        if self._compiled is None:
            self.ba = (b[:, None] * r + a[None, :]).astype(np.intp)
            self.bb = (b[:, None] * r + b[None, :]).astype(np.intp)
            self.aa = (a[:, None] * r + a[None, :]).astype(np.intp)
            self.ab = (a[:, None] * r + b[None, :]).astype(np.intp)

    def kron(self, u: np.ndarray, v: np.ndarray) -> np.ndarray:
        """``tr(S_i U S_j V)`` for pairs i = (a_i, b_i), j = (a_j, b_j): (m, m), with
        ``tr(S_ab U S_cd V) = U_bc V_da + U_bd V_ca + U_ac V_db + U_ad V_cb``."""
        if self._compiled is not None:
            out = np.zeros((self.a.size, self.a.size))
            self._compiled(out, u, v, self.a, self.b, 1.0)
            return out
        uf, vf = u.ravel(), np.ascontiguousarray(v.T).ravel()
        out = uf.take(self.ba) * vf.take(self.ab)
        out += uf.take(self.bb) * vf.take(self.aa)
        out += uf.take(self.aa) * vf.take(self.bb)
        out += uf.take(self.ab) * vf.take(self.ba)
        return out

    def add_kron(self, out: np.ndarray, u: np.ndarray, v: np.ndarray, weight: float) -> None:
        """``out += weight * kron(u, v)`` (``out`` C-contiguous, (m, m)), the same sums in
        the same order either way: the results do not depend on Numba being there."""
        if self._compiled is not None:
            self._compiled(out, np.ascontiguousarray(u), np.ascontiguousarray(v), self.a,
                           self.b, float(weight))  # fmt: skip
        else:
            out += weight * self.kron(u, v)


@dataclass
class StructuredFeasibility(Feasibility):
    """:class:`~stochmix.analysis.certificates.lmi.Feasibility` of one system without mixing
    inputs, solved by the structured interior-point method of the module docstring (the
    cvxpy problem is still built: its data are the check's). ``steps`` counts Newton
    steps over every solve."""

    steps: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not structured_applies(self.systems, self.sigma):
            raise ValueError("StructuredFeasibility takes one system without mixing inputs")
        e, f, stack, _, _ = self._parts[0][2]
        r, size = e.shape
        self._r = r
        self._a, self._b = np.triu_indices(r)
        forms = stack.reshape(-1, size, size)
        k = forms.shape[0]
        # the dense variables: the multipliers, then t
        lmi_dense = np.concatenate([forms, -np.eye(size)[None]])
        lam_dense = np.zeros((k + 1, k, k))
        lam_dense[np.arange(k), np.arange(k), np.arange(k)] = -1.0
        floor_dense = np.zeros((k + 1, 1, 1))
        floor_dense[k] = -1.0
        self._blocks = [
            _Block(np.zeros((size, size)), [(e, 1.0), (f, None)], lmi_dense),
            _Block(-np.eye(r), [(np.eye(r), -1.0)], np.zeros((k + 1, r, r))),
            _Block(np.zeros((k, k)), [], lam_dense),
            _Block(np.ones((1, 1)), [], floor_dense),
        ]
        self._k = k
        self._mp = self._a.size
        self._gather = _Gather(r, self._a, self._b)
        self._obj = np.zeros(self._mp + k + 1)
        self._obj[-1] = -1.0  # maximise -t
        self._value: tuple[float, float] | None = None
        self._waypoint: tuple | None = None
        self._warm_mu: float | None = None

    # ------------------------------------------------------------------ operators
    def _p_of(self, y: np.ndarray) -> np.ndarray:
        p = np.zeros((self._r, self._r))
        p[self._a, self._b] = y[: self._mp]
        return p + p.T

    def _scales(self, rho: float) -> list:
        return [[(g, -rho * rho if s is None else s) for g, s in blk.terms] for blk in self._blocks]

    def _adjoint(self, y: np.ndarray, scales) -> list:
        """``sum_i y_i A_i`` block by block."""
        p = self._p_of(y)
        out = []
        for blk, terms in zip(self._blocks, scales, strict=True):
            value = np.tensordot(y[self._mp :], blk.dense, axes=1)
            for g, s in terms:
                value = value + s * (g.T @ p @ g)
            out.append(value)
        return out

    def _apply(self, mats: list, scales) -> np.ndarray:
        """``(tr(A_i Y))_i`` for block matrices ``mats`` (symmetrised)."""
        out = np.zeros(self._obj.size)
        for blk, terms, y in zip(self._blocks, scales, mats, strict=True):
            ys = (y + y.T) / 2
            for g, s in terms:
                out[: self._mp] += s * _sympick(g @ ys @ g.T, self._a, self._b)
            out[self._mp :] += np.einsum("kij,ij->k", blk.dense, ys)
        return out

    def _schur(self, xs: list, zinv: list, scales) -> np.ndarray:
        """``M_ij = sum_blocks tr(A_i X A_j Z^{-1})``."""
        m = self._obj.size
        mp = self._mp
        out = np.zeros((m, m))
        pp = np.zeros((mp, mp))  # the P part, contiguous for the compiled accumulation
        a, b = self._a, self._b
        for blk, terms, x, zi in zip(self._blocks, scales, xs, zinv, strict=True):
            for i, (gk, sk) in enumerate(terms):
                for gl, sl in terms[i:]:  # (l, k) is (k, l) transposed: symmetrised below
                    u, v = gk @ x @ gl.T, gl @ zi @ gk.T
                    weight = sk * sl * (1.0 if gl is gk else 2.0)
                    self._gather.add_kron(pp, u, v, weight)
            if not np.any(blk.dense):
                continue
            xdz = x @ blk.dense @ zi  # (k, N, N): X D_j Z^{-1}
            out[mp:, mp:] += np.einsum("iab,jba->ij", blk.dense, xdz)
            for g, s in terms:
                cross = s * _sympick(g @ xdz @ g.T, a, b)  # (k, mp)
                out[:mp, mp:] += cross.T
                out[mp:, :mp] += cross
        out[:mp, :mp] += pp
        return (out + out.T) / 2

    # ------------------------------------------------------------------ the method
    def solve(self, rho: float) -> Solution | None:
        """The certificate at rate ``rho``, or None when none is found (from the cold
        start: the answer does not depend on earlier solves)."""
        return self.probe(rho, value=False, warm=False)[0]

    def probe(
        self, rho: float, value: bool = True, warm: bool = True, limit: int | None = None
    ) -> tuple[Solution | None, tuple | None]:
        """:meth:`solve` at ``rho``, and where it finds none because the primal iterate
        proves the optimum ``t*(rho)`` positive (weak duality), with ``value`` that optimum
        and its derivative, ``(t, dt/drho)``: the steps go on until the dual iterate's t
        settles (to 1e-5 of itself, at most :data:`VALUE_STEPS` more steps), and the
        derivative is the envelope theorem's, ``dt*/drho = -2 rho <F X F^T, P>`` (X the
        LMI block's primal iterate, ``tr X = 1``). ``(None, None)`` where nothing is
        certified and nothing proved. What :func:`~stochmix.analysis.certificates.rate.find_rate`
        searches on.

        ``warm``: start from the earlier solve's iterate where its duality measure first
        fell under :data:`WARM_MU` times the cold start's (the central path of a nearby
        rate), its t raised to keep the LMI's slack it had there (every iterate stays
        dual feasible); about a third of the steps of a cold start. Only the path
        changes: a certificate is still only an iterate the full-LMI check accepts.

        ``limit``: at most this many Newton steps (default :data:`MAX_STEPS`): a solve the
        search expects to certify nothing (just below its estimate of the rate) is cut
        short; finding nothing only ever moves the search's lower end, never what it
        returns."""
        start = time.perf_counter()
        self._value = None
        try:
            with _one_thread():
                found = self._solve(rho, value, warm, limit or MAX_STEPS)
        finally:
            self.solves += 1
            self.seconds += time.perf_counter() - start
        return found, self._value

    def _start(self, scales, warm: bool) -> tuple[np.ndarray, list]:
        """The first iterate ``(y, X)``: the earlier solve's waypoint when ``warm`` (and
        there is one), else P = 2 I, every multiplier 1, t one above the LMI's top
        eigenvalue, X = I."""
        if warm and self._waypoint is not None:
            y, xs, slack = self._waypoint
            y = y.copy()
            top = float(np.linalg.eigvalsh(self._adjoint(y, scales)[0])[-1]) + y[-1]
            y[-1] = max(y[-1], top + slack)  # the LMI's top eigenvalue at this rho, + slack
            return y, [x.copy() for x in xs]
        y = np.zeros(self._obj.size)
        y[: self._mp][self._a == self._b] = 1.0  # P = 2 I
        y[self._mp : -1] = 1.0
        y[-1] = 0.0
        lmi = self._adjoint(y, scales)[0]  # the LMI at t = 0
        y[-1] = max(float(np.linalg.eigvalsh(lmi)[-1]), -0.5) + 1.0
        return y, [np.eye(blk.c.shape[0]) for blk in self._blocks]

    def _direction(self, state, rc: list):
        """The HKM step for the complementarity residual ``rc`` (``sigma mu I - X Z``,
        less the predictor's second-order term): ``M dy = r_p - A(R_c Z^{-1})`` (every
        iterate is dual feasible), ``dZ = -A^*(dy)``, ``dX = (R_c - X dZ) Z^{-1}``
        symmetrised."""
        rp, xs, zinv, factor, scales = state
        rhs = rp - self._apply([r @ zi for r, zi in zip(rc, zinv, strict=True)], scales)
        dy = cho_solve(factor, rhs)
        dz = [-a for a in self._adjoint(dy, scales)]
        dx = [(r - x @ d) @ zi for r, x, d, zi in zip(rc, xs, dz, zinv, strict=True)]
        return dy, dz, [(d + d.T) / 2 for d in dx]

    def _solve(
        self, rho: float, value: bool = False, warm: bool = False, limit: int = MAX_STEPS
    ) -> Solution | None:
        scales = self._scales(rho)
        proved, previous, waypoint = -1, np.inf, False
        cs = [blk.c for blk in self._blocks]
        y, xs = self._start(scales, warm)
        zs = [c - a for c, a in zip(cs, self._adjoint(y, scales), strict=True)]
        nu = sum(c.shape[0] for c in cs)
        for _ in range(limit):
            self.steps += 1
            t = y[-1]
            if t < 0:
                found = self._check(rho, "optimal", y[self._mp : -1], [(self._p_of(y), None)])
                if found is not None:
                    return found
            zinv = [np.linalg.inv(z) for z in zs]
            zinv = [(w + w.T) / 2 for w in zinv]
            gap = sum(float(np.sum(x * z)) for x, z in zip(xs, zs, strict=True))
            mu = gap / nu
            if self._warm_mu is None:
                self._warm_mu = WARM_MU * mu
            if not waypoint and mu <= self._warm_mu:  # where the next warm start begins
                slack = float(np.linalg.eigvalsh(zs[0])[0])  # t less the LMI's top
                self._waypoint, waypoint = (y.copy(), [x.copy() for x in xs], slack), True
            rp = self._obj - self._apply(xs, scales)
            primal = -sum(float(np.sum(c * x)) for c, x in zip(cs, xs, strict=True))
            # weak duality: every t >= the primal bound once the primal residual is small
            if proved < 0 and np.abs(rp).max() < 1e-7 * (1 + np.abs(xs[0]).max()):
                proved = self.steps if primal > 1e-9 else -1
                if proved >= 0 and not value:
                    return None
            if proved >= 0 and (
                abs(previous - t) <= 1e-5 * t
                or t - primal <= 1e-5 * t
                or self.steps - proved >= VALUE_STEPS
            ):
                self._value = (t, self._slope(rho, xs[0], y))
                return None
            previous = t
            if mu < 1e-13 * max(1.0, abs(t)) and t >= 0:
                if proved >= 0:
                    self._value = (t, self._slope(rho, xs[0], y))
                return None
            mat = self._schur(xs, zinv, scales)
            factor = _factor(mat)
            if factor is None:
                break

            xz = [x @ z for x, z in zip(xs, zs, strict=True)]
            state = (rp, xs, zinv, factor, scales)
            dy, dz, dx = self._direction(state, [-w for w in xz])
            ap, ad = min(1.0, _step(xs, dx)), min(1.0, _step(zs, dz))
            gap_aff = sum(
                float(np.sum((x + ap * a) * (z + ad * b)))
                for x, a, z, b in zip(xs, dx, zs, dz, strict=True)
            )
            sigma = min(1.0, (gap_aff / max(gap, 1e-300)) ** 3)
            rc = [
                sigma * mu * np.eye(w.shape[0]) - w - a @ b
                for w, a, b in zip(xz, dx, dz, strict=True)
            ]
            dy, dz, dx = self._direction(state, rc)
            ap, ad = 0.95 * _step(xs, dx), 0.95 * _step(zs, dz)
            ap, ad = min(1.0, ap), min(1.0, ad)
            x_new = [x + ap * d for x, d in zip(xs, dx, strict=True)]
            while not all(_positive(x) for x in x_new) and ap > 1e-12:
                ap /= 2
                x_new = [x + ap * d for x, d in zip(xs, dx, strict=True)]
            xs = x_new if ap > 1e-12 else xs
            while True:  # Z from y afresh: every iterate exactly dual feasible
                y_new = y + ad * dy
                z_new = [c - a for c, a in zip(cs, self._adjoint(y_new, scales), strict=True)]
                if all(_positive(z) for z in z_new):
                    break
                ad /= 2
                if ad < 1e-12:
                    return None
            y, zs = y_new, z_new
        if y[-1] < 0:
            return self._check(rho, "inaccurate", y[self._mp : -1], [(self._p_of(y), None)])
        return None

    def _slope(self, rho: float, x: np.ndarray, y: np.ndarray) -> float:
        """``dt*/drho = -2 rho <F X F^T, P>`` at the iterate (X the LMI block's, scaled to
        trace 1: the multiplier of ``t``'s own row)."""
        f = self._parts[0][2][1]
        x = x / max(float(np.trace(x)), 1e-300)
        return -2.0 * rho * float(np.sum((f @ x @ f.T) * self._p_of(y)))


def _factor(mat: np.ndarray):
    """Cholesky factor of the Schur complement, with a ridge of 1e-13 to 1e-9 of its
    largest diagonal entry where rounding made it indefinite (late steps); None if even
    that fails."""
    for ridge in (0.0, 1e-13, 1e-11, 1e-9):
        try:
            return cho_factor(mat + ridge * float(np.diag(mat).max()) * np.eye(mat.shape[0]))
        except np.linalg.LinAlgError:
            continue
    return None


def _one_thread():
    """BLAS on one thread where threadpoolctl is installed: the Newton steps' matrices are
    small (a few hundred to two thousand rows), and OpenBLAS's threads, on a shared machine,
    made a Cholesky factorisation of 466 rows 60 times slower (0.14 s against 2 ms)."""
    try:
        from threadpoolctl import threadpool_limits  # type: ignore[import-untyped]
    except ImportError:  # pragma: no cover - an optional speed-up
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def _positive(z: np.ndarray) -> bool:
    try:
        np.linalg.cholesky((z + z.T) / 2)
    except np.linalg.LinAlgError:
        return False
    return True


def _step(xs: list, ds: list) -> float:
    """The largest alpha with every ``X + alpha dX`` positive semidefinite (inf-capped)."""
    alpha = np.inf
    for x, d in zip(xs, ds, strict=True):
        try:
            chol = np.linalg.cholesky((x + x.T) / 2)
        except np.linalg.LinAlgError:
            return 0.0
        inv = np.linalg.inv(chol)
        top = float(np.linalg.eigvalsh(-(inv @ d @ inv.T + (inv @ d @ inv.T).T) / 2)[-1])
        if top > 0:
            alpha = min(alpha, 1.0 / top)
    return float(alpha)

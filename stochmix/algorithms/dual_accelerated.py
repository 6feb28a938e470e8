r"""Dual accelerated decentralized methods: SSDA and MSDA (Scaman, Bach, Bubeck, Lee and
Massoulié 2017), optimal for L-smooth, mu-strongly convex local functions over a gossip
network.

Both run Nesterov's accelerated gradient ascent on the dual of
``min sum_i f_i(theta_i) s.t. Theta sqrt(G) = 0``, written in the variable ``x = lambda
sqrt(G)`` so that a node only needs its neighbours' values: with the *gossip matrix*
G = I - W (W the symmetric doubly stochastic mixing of the library's graph under ``rule``;
G is then symmetric positive semidefinite with kernel span(1), as the paper asks), one
iteration is (rows are nodes)

.. math::

    \theta_i^k = \nabla f_i^*(x_i^k),\qquad
    y^{k+1} = x^k - \eta\, P\, \theta^k,\qquad
    x^{k+1} = (1 + \mu)\, y^{k+1} - \mu\, y^k,

with x^0 = y^0 = 0 and P = G for SSDA (Algorithm 1 of the paper) or the Chebyshev
polynomial P_K(G) = I - T_K(c_2 (I - c_3 G)) / T_K(c_2) for MSDA (Algorithm 2 and its
procedure ACCELERATED_GOSSIP, K gossip steps). The conjugate gradient of a quadratic
f_i(theta) = 1/2 theta^T H_i theta - c_i^T theta (grad f_i(theta) = H_i theta - c_i) is
``grad f_i^*(x) = H_i^{-1} (x + c_i)``: the methods run on problems with affine gradients
(:class:`~stochmix.problems.Quadratic`, :class:`~stochmix.problems.LeastSquares`) whose
every local Hessian is positive definite, and refuse any other problem in
``check_problem``. The conjugate step is a row map (:class:`~stochmix.engine.RowMap`;
it is affine in x, but with a d x d matrix per node, which the engine's scalar-weighted
phases cannot express), so the linear analysis does not cover these methods: started
outside a run (by :func:`~stochmix.analysis.certificates.certify` or the exact operators of
:mod:`stochmix.analysis.linear`) they raise :class:`~stochmix.engine.NonlinearPhaseError`
saying so.

Constants (read off the problem and the graph when the run starts): alpha = min_i
lambda_min(H_i), beta = max_i lambda_max(H_i), kappa_l = beta / alpha; lambda_1 =
lambda_max(G) = 1 - lambda_min(W), lambda_{n-1}(G) = 1 - lambda_2(W) and the eigengap
gamma = lambda_{n-1}(G) / lambda_1(G).

Both need a fixed graph (the dual variables are tied to one G: a
:class:`~stochmix.mixing.StaticSequence`, or any sequence of period 1) and every node in
every iteration (``participation.Full(n)``); other sequences and participation processes
are refused before any work.
"""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

from .._validate import as_float, as_int, choice, show
from ..engine import Block, NonlinearPhaseError, RunContext
from ..mixing.sequences import RULES, GraphSequence
from .decentralized_base import DecentralizedMethod, require_everyone
from .fedprox import affine_gradients, has_exact_prox

__all__ = ["MSDA", "SSDA", "accelerated_gossip_matrix", "gossip_spectrum"]


def gossip_spectrum(w) -> tuple[float, float]:
    """``(lambda_1, lambda_{n-1})`` of the gossip matrix G = I - W: its largest and its
    smallest nonzero eigenvalue, 1 - lambda_min(W) and 1 - lambda_2(W), for a symmetric
    W (dense or sparse, shape (n, n)) whose eigenvalue 1 is simple. The gap gamma of the
    paper is their ratio lambda_{n-1} / lambda_1. Dense eigenvalues (O(n^3)).

    Raises:
        ValueError: W is not symmetric, or has n < 2 rows."""
    dense = w.toarray() if sp.issparse(w) else np.asarray(w, dtype=np.float64)
    n = dense.shape[0]
    if n < 2:
        raise ValueError(f"the gossip matrix needs at least 2 nodes, got {n}")
    asym = float(np.abs(dense - dense.T).max())
    if asym > 1e-12 * max(1.0, float(np.abs(dense).max())):
        raise ValueError(
            f"W must be symmetric for a dual method (the gossip matrix I - W is), got "
            f"|W - W^T| up to {asym:.3g}"
        )
    eig = np.linalg.eigvalsh(0.5 * (dense + dense.T))  # ascending
    return float(1.0 - eig[0]), float(1.0 - eig[-2])


def _chebyshev_ratios(c1: float, k: int) -> tuple[float, float]:
    """``(2 c_2 a_k / a_{k+1}, a_{k-1} / a_{k+1})`` for ACCELERATED_GOSSIP's a_k = T_k(c_2),
    from T_k(c_2) = (c_1^{-k} + c_1^k) / 2 and 2 c_2 c_1 = 1 + c_1^2, finite at c_1 = 0
    (gamma = 1)."""
    lift = (1.0 + c1**2) * (1.0 + c1 ** (2 * k)) / (1.0 + c1 ** (2 * k + 2))
    back = c1**2 * (1.0 + c1 ** (2 * k - 2)) / (1.0 + c1 ** (2 * k + 2))
    return lift, back


def accelerated_gossip_matrix(w, steps: int, gap: float, top: float):
    """Q_K(W) = T_K(c_2 S) / T_K(c_2) with S = I - c_3 (I - W), c_2 = (1 + gamma) / (1 -
    gamma), c_3 = 2 / ((1 + gamma) lambda_1): the mixing matrix that MSDA's K gossip steps
    apply (the paper's P_K(G) = I - Q_K(W)), as a dense (n, n) array built by the
    three-term recurrence. ``gap`` is gamma, ``top`` lambda_1 (:func:`gossip_spectrum`).

    To be replaced by ``stochmix.mixing.polynomial.chebyshev(W, K, lower=lambda_min(W),
    upper=lambda_2(W))`` once it exists (the same polynomial: the Chebyshev polynomial of
    the interval [lambda_min(W), lambda_2(W)], normalised to 1 at 1)."""
    dense = w.toarray() if sp.issparse(w) else np.asarray(w, dtype=np.float64)
    n = dense.shape[0]
    c1 = (1.0 - math.sqrt(gap)) / (1.0 + math.sqrt(gap))
    c3 = 2.0 / ((1.0 + gap) * top)
    s = (1.0 - c3) * np.eye(n) + c3 * dense
    previous, current = np.eye(n), s
    for k in range(1, steps):
        lift, back = _chebyshev_ratios(c1, k)
        previous, current = current, lift * (s @ current) - back * previous
    return current


class _Conjugate:
    """The row function x -> grad f_i^*(x) = H_i^{-1} (x + c_i) for the nodes ``info.rows``
    (every node's inverse Hessian and H_i^{-1} c_i computed once per run)."""

    name = "conjugate gradient"

    def __init__(self, inverse: np.ndarray, shift: np.ndarray):
        self.inverse, self.shift = inverse, shift  # (n, d) diagonals or (n, d, d); (n, d)

    def row_affine(self, problem, rows: np.ndarray):
        """``(H^{-1}, H^{-1} c, True)`` at the nodes ``rows``: the map sends node k's row
        x to ``M_k x + b_k`` (see :func:`stochmix.engine.runner.slot_form.
        _affine_triplets`: the compiled batches apply it themselves)."""
        return self.inverse[rows], self.shift[rows], True

    def __call__(self, x, *, info):
        rows = np.asarray(info.rows)
        h, b = self.inverse[rows], self.shift[rows]
        if h.ndim == 2:
            return h * x + b
        return np.einsum("kij,kj->ki", h, x) + b


def _local_constants(problem) -> tuple[np.ndarray, np.ndarray, float, float]:
    """``(H^{-1}, H^{-1} c, alpha, beta)`` of a problem with affine gradients grad f_i =
    H_i x - c_i: the inverse Hessians ((n, d) diagonals or (n, d, d)), the local minimisers
    H_i^{-1} c_i (n, d), alpha = min_i lambda_min(H_i) and beta = max_i lambda_max(H_i).
    Raises a ValueError naming the problem when some H_i is singular."""
    h, c = affine_gradients(problem)
    h = np.asarray(h, dtype=np.float64)
    c = np.asarray(c, dtype=np.float64)
    if h.ndim == 2:
        low, high = h.min(axis=1), h.max(axis=1)
    else:
        eig = np.linalg.eigvalsh(h)
        low, high = eig[:, 0], eig[:, -1]
    alpha, beta = float(low.min()), float(high.max())
    if not alpha > 1e-12 * max(beta, np.finfo(float).tiny):
        i = int(np.argmin(low))
        raise ValueError(
            f"problem: every local function must be strongly convex for a dual method "
            f"(grad f_i^* = H_i^(-1)(x + c_i)), but client {i}'s Hessian has smallest "
            f"eigenvalue {float(low[i]):.3g}: {show(problem)}"
        )
    if h.ndim == 2:
        inverse = 1.0 / h
        return inverse, inverse * c, alpha, beta
    inverse = np.linalg.inv(h)
    return inverse, np.einsum("kij,kj->ki", inverse, c), alpha, beta


class _DualAccelerated(DecentralizedMethod):
    """Shared parts: the static graph, the problem's local constants, the conjugate map and
    the accelerated dual step."""

    needs = {"rule": "doubly"}
    rounds_repeat = True
    model_block = "theta"
    _run_state = DecentralizedMethod._run_state | {"_local", "_conjugate", "constants"}
    graph_tuned = frozenset({"constants"})  # from W's spectrum (certificates keep them)

    def __init__(self, lr, graphs: GraphSequence, rule="metropolis", momentum=None,
                 check_mixing=True):  # fmt: skip
        super().__init__(1.0, graphs, check_mixing=check_mixing)
        if graphs.period != 1:
            raise ValueError(
                f"graphs must be a fixed graph (a StaticSequence, period 1) for {self.name}: "
                f"its dual variables live on one gossip matrix; got {show(graphs)} with "
                f"period {graphs.period}"
            )
        self.rule = choice(rule, "rule", RULES)
        self.lr = None if lr is None else as_float(lr, "lr", positive=True)  # type: ignore[assignment]
        self.momentum = None if momentum is None else as_float(momentum, "momentum",
                                                               nonnegative=True)  # fmt: skip
        if self.momentum is not None and self.momentum >= 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {self.momentum!r}")
        self._local: tuple | None = None
        self._conjugate: _Conjugate | None = None
        #: the run's constants (alpha, beta, kappa_l, lambda_1, gamma, eta, mu, ...), set
        #: when a run starts
        self.constants: dict = {}

    def check_problem(self, problem) -> None:
        super().check_problem(problem)
        if not has_exact_prox(problem):
            raise ValueError(
                f"problem must have affine gradients (a Quadratic or a LeastSquares) for "
                f"{self.name}, which needs the conjugate gradients grad f_i^* in closed form; "
                f"got {type(problem).__name__}: {show(problem)}"
            )
        self._local = (problem, *_local_constants(problem))

    def check_participation(self, participation) -> None:
        reason = "a synchronous dual method: every node takes every accelerated dual step"
        require_everyone(participation, self.name, reason)
        # (records that every node takes part: plans reused by phase_key, and a small
        # graph's iterations in compiled batches)
        super().check_participation(participation)

    def blocks(self, n_clients: int) -> list[Block]:
        return [Block("theta", n_clients, "model"), Block("x", n_clients),
                Block("y", n_clients)]  # fmt: skip

    def start(self, ctx: RunContext) -> None:
        super().start(ctx)
        counted = ctx.map_problem
        problem = counted.__dict__["problem"] if counted is not None else None
        if problem is None:  # not a run: a certificate or the exact linear operators
            raise NonlinearPhaseError(
                f"{self.name} has no linear form to analyse: every iteration applies the "
                f"conjugate gradient grad f_i^*(x) = H_i^(-1) (x + c_i), a row map "
                f"(RowMap {_Conjugate.name!r}) with a d x d matrix per node read from the "
                f"problem's Hessians when a run starts, and the linear analysis (certify, "
                f"the exact operators) takes phases with one scalar weight per pair of rows "
                f"and the gradients as their only nonlinearity, not row maps; measure its "
                f"rate with stochmix.run on a Quadratic or a LeastSquares problem instead"
            )
        if self._local is None or self._local[0] is not problem:
            self.check_problem(problem)
        _, inverse, shift, alpha, beta = self._local  # type: ignore[misc]
        self._conjugate = _Conjugate(inverse, shift)
        self._whole(0, self.rule)  # W checked (doubly stochastic, connected) once
        top, low = gossip_spectrum(self.graphs.matrix(0, self.rule, copy=False))
        self.constants = self._parameters(alpha, beta, top, low / top)

    def _parameters(self, alpha, beta, top, gap) -> dict:
        raise NotImplementedError

    def _conjugate_phase(self, ctx: RunContext, r: int):
        everyone = np.arange(ctx.n_clients)
        return ctx.map("theta", everyone, self._conjugate, "x", round=r, label="conjugate")

    def _dual_step(self, eq, gossip) -> None:
        """y <- x - eta gossip; x <- (1 + mu) (x - eta gossip) - mu y (gossip: an expression
        of P theta)."""
        x, y = eq.blocks("x", "y")
        eta, mu = self.constants["eta"], self.constants["mu"]
        y[:] = x - eta * gossip
        x[:] = (1.0 + mu) * x - (1.0 + mu) * eta * gossip - mu * y


class SSDA(_DualAccelerated):
    r"""The single-step dual accelerated method (Algorithm 1 of Scaman et al. 2017):

    .. math::

        \theta_i^k = \nabla f_i^*(x_i^k),\quad
        y^{k+1} = x^k - \eta\,(I - W)\,\theta^k,\quad
        x^{k+1} = (1 + \mu)\, y^{k+1} - \mu\, y^k,\qquad x^0 = y^0 = 0,

    Nesterov's method on the dual, which is (lambda_1 / alpha)-smooth and (lambda_{n-1} /
    beta)-strongly convex on the orthogonal of the kernel; its condition number is
    kappa_l / gamma. Defaults (the paper's): ``lr`` eta = alpha / lambda_1(I - W),
    ``momentum`` mu = (sqrt(kappa_l) - sqrt(gamma)) / (sqrt(kappa_l) + sqrt(gamma)), with
    alpha, beta, kappa_l, lambda_1 and gamma as in the module docstring (computed when the
    run starts; :attr:`constants` keeps them). Error to precision epsilon in
    O(sqrt(kappa_l / gamma) ln(1/epsilon)) iterations (the paper's Theorem 3).

    State: blocks ``theta`` (the primal points theta^k = grad f^*(x^k), reported; the
    network average is the output), ``x`` and ``y`` (the dual sequences), each (n, d); x and
    y start at 0 and theta at grad f^*(0) (each node's own minimiser). One iteration (round
    k) is one whole-block phase "dual step" (one communication round: theta mixed by W
    once) and the conjugate map (one conjugate gradient per node), the first round opening
    with the conjugate at x^0; after round k, theta holds theta^{k+1}. The Result's
    ``gradients`` column counts no gradient evaluations: the method calls grad f_i^* instead.

    Args:
        lr: eta (the dual step, first as for every method), or None for the paper's
            alpha / lambda_1.
        graphs: a fixed graph (period 1), undirected (W symmetric).
        rule: the weight rule of W (doubly stochastic and symmetric: ``"metropolis"``).
        momentum: mu in [0, 1), or None for the paper's value.
        check_mixing: check W (doubly stochastic, connected).

    References:
        - K. Scaman, F. Bach, S. Bubeck, Y. T. Lee and L. Massoulié, "Optimal algorithms
          for smooth and strongly convex distributed optimization in networks", ICML 2017
          (arXiv:1702.08704), Section 4.1, Algorithm 1 and Theorem 3.
    """

    name = "SSDA"

    def _parameters(self, alpha, beta, top, gap) -> dict:
        kappa = beta / alpha
        eta = alpha / top if self.lr is None else self.lr
        root = math.sqrt(gap)
        mu = (math.sqrt(kappa) - root) / (math.sqrt(kappa) + root)
        mu = mu if self.momentum is None else self.momentum
        return {"alpha": alpha, "beta": beta, "kappa": kappa, "lambda_1": top, "gamma": gap,
                "eta": eta, "mu": mu}  # fmt: skip

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        eq = self.round_equations(participants, ctx)
        first = [self._conjugate_phase(ctx, r)] if r == 0 else []
        (theta,) = eq.blocks("theta")
        w = self.mixing(r, self.rule)
        self._dual_step(eq, theta - w @ theta)
        return [*first, eq.build("dual step"), self._conjugate_phase(ctx, r)]


class MSDA(_DualAccelerated):
    r"""The multi-step dual accelerated method (Algorithm 2 of Scaman et al. 2017): SSDA on
    the gossip matrix P_K(G) = I - T_K(c_2 (I - c_3 G)) / T_K(c_2), G = I - W, applied by K
    gossip steps (the procedure ACCELERATED_GOSSIP):

    .. math::

        &p^0 = \theta^k,\quad p^1 = S \theta^k,\quad
        p^{j+1} = \frac{2 c_2 a_j}{a_{j+1}} S p^j - \frac{a_{j-1}}{a_{j+1}} p^{j-1},\quad
        S = I - c_3 G,\ a_j = T_j(c_2),\\
        &y^{k+1} = x^k - \eta\,(\theta^k - p^K),\quad
        x^{k+1} = (1 + \mu)\, y^{k+1} - \mu\, y^k,\quad \theta^{k+1} = \nabla f^*(x^{k+1}),

    (p^j = x_j / a_j in the paper's unnormalised variables x_j), c_1 = (1 - sqrt(gamma)) /
    (1 + sqrt(gamma)), c_2 = (1 + gamma) / (1 - gamma), c_3 = 2 / ((1 + gamma) lambda_1).
    Defaults (the paper's): ``gossip_steps`` K = floor(1 / sqrt(gamma)), ``lr`` eta =
    alpha (1 + c_1^{2K}) / (1 + c_1^K)^2 (alpha over the bound (1 + c_1^K)^2 / (1 +
    c_1^{2K}) on lambda_1(P_K)), ``momentum`` mu =
    ((1 + c_1^K) sqrt(kappa_l) - 1 + c_1^K) / ((1 + c_1^K) sqrt(kappa_l) + 1 - c_1^K).
    P_K's eigengap is at least ((1 - c_1^K) / (1 + c_1^K))^2, a constant (>= 0.18 at the
    default K), and mu is SSDA's momentum for that eigengap,
    so MSDA needs O(sqrt(kappa_l) ln(1/epsilon)) iterations, each with one conjugate
    gradient per node and K = O(1/sqrt(gamma)) communication rounds: time O(sqrt(kappa_l) (1
    + tau / sqrt(gamma)) ln(1/epsilon)), optimal (the paper's Theorem 4 and Theorem 2; see
    :mod:`stochmix.analysis.lower_bounds`).

    State: blocks ``theta``, ``x``, ``y`` as in :class:`SSDA` and ``p``, ``q`` (the gossip
    recurrence's last two terms), each (n, d). One iteration (round k) is K whole-block
    gossip phases (each one communication round: a block mixed by W once), the node-local
    "dual step" and the conjugate map; the first round opens with the conjugate at x^0.
    :func:`accelerated_gossip_matrix` gives the polynomial Q_K(W) = I - P_K(G) as a matrix.

    Args:
        lr: eta (the dual step), or None for the paper's value.
        graphs: a fixed graph (period 1), undirected (W symmetric).
        rule: the weight rule of W (doubly stochastic and symmetric: ``"metropolis"``).
        gossip_steps: K >= 1, or None for floor(1 / sqrt(gamma)).
        momentum: mu in [0, 1), or None for the paper's value.
        check_mixing: check W (doubly stochastic, connected).

    References:
        - K. Scaman, F. Bach, S. Bubeck, Y. T. Lee and L. Massoulié, "Optimal algorithms
          for smooth and strongly convex distributed optimization in networks", ICML 2017
          (arXiv:1702.08704), Section 4.2, Algorithm 2 and Theorem 4.
    """

    name = "MSDA"

    def __init__(self, lr, graphs: GraphSequence, rule="metropolis", gossip_steps=None,
                 momentum=None, check_mixing=True):  # fmt: skip
        super().__init__(lr, graphs, rule, momentum, check_mixing)
        self.gossip_steps = None if gossip_steps is None else as_int(
            gossip_steps, "gossip_steps", minimum=1
        )  # fmt: skip

    def blocks(self, n_clients: int) -> list[Block]:
        return [*super().blocks(n_clients), Block("p", n_clients), Block("q", n_clients)]

    def _parameters(self, alpha, beta, top, gap) -> dict:
        kappa = beta / alpha
        root = math.sqrt(gap)
        steps = self.gossip_steps or max(1, math.floor(1.0 / root))
        c1 = (1.0 - root) / (1.0 + root)
        power = c1**steps
        eta = alpha * (1.0 + power**2) / (1.0 + power) ** 2 if self.lr is None else self.lr
        num = (1.0 + power) * math.sqrt(kappa) - 1.0 + power
        mu = num / ((1.0 + power) * math.sqrt(kappa) + 1.0 - power)
        mu = mu if self.momentum is None else self.momentum
        return {"alpha": alpha, "beta": beta, "kappa": kappa, "lambda_1": top, "gamma": gap,
                "steps": steps, "c1": c1, "c3": 2.0 / ((1.0 + gap) * top), "eta": eta,
                "mu": mu}  # fmt: skip

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        eq = self.round_equations(participants, ctx)
        first = [self._conjugate_phase(ctx, r)] if r == 0 else []
        theta, p, q = eq.blocks("theta", "p", "q")
        w = self.mixing(r, self.rule)
        c1, c3, steps = self.constants["c1"], self.constants["c3"], self.constants["steps"]
        p[:] = (1.0 - c3) * theta + c3 * (w @ theta)  # p^1 = S theta
        q[:] = theta  # p^0
        gossip = [eq.build("gossip")]
        for j in range(1, steps):
            lift, back = _chebyshev_ratios(c1, j)
            p[:] = lift * (1.0 - c3) * p + lift * c3 * (w @ p) - back * q
            q[:] = p
            gossip.append(eq.build(f"gossip {j + 1}"))
        self._dual_step(eq, theta - p)
        return [*first, *gossip, eq.build("dual step"), self._conjugate_phase(ctx, r)]

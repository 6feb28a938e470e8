r"""Optimal primal decentralized methods: APAPC and OPAPC (Kovalev, Salim & Richtárik,
NeurIPS 2020), accelerated forward-backward (proximal alternating predictor-corrector)
methods on the consensus-constrained problem, for L-smooth, mu-strongly convex local
functions over a fixed network, with primal gradients only (no conjugate gradients, unlike
:class:`~stochmix.algorithms.dual_accelerated.SSDA` and MSDA).

**The gossip matrix.** The paper communicates with a *gossip matrix* G: symmetric,
positive semidefinite, ``G_ij = 0`` off the graph's edges, ``ker G = span(1)``. Here
``G = I - W`` with W the library's symmetric doubly stochastic mixing of the graph under
``rule`` (``"metropolis"`` by default): W's eigenvalues lie in [-1, 1], so G's lie in [0, 2],
and the eigenvalue 1 of W is simple on a connected graph, so ``ker G = span(1)``. The
spectrum the tuning reads:

.. math::

    \lambda_{\max}(G) = 1 - \lambda_{\min}(W),\qquad
    \lambda_{\min}^+(G) = 1 - \lambda_2(W),\qquad
    \chi = \lambda_{\max}(G) / \lambda_{\min}^+(G).

**The iteration** (the paper's Algorithm 1, APAPC; rows are nodes, F(x) = sum_i f_i(x_i))
with a communication operator P (P = G for APAPC; for OPAPC, Algorithm 2, P = P_T(G) the
Chebyshev polynomial below, applied with T gossip rounds):

.. math::

    x_g^k &= \tau x^k + (1 - \tau) x_f^k,\\
    x^{k+1/2} &= (1 + \eta\alpha)^{-1}\big(x^k - \eta(\nabla F(x_g^k) - \alpha x_g^k
        + y^k)\big),\\
    y^{k+1} &= y^k + \theta P x^{k+1/2},\\
    x^{k+1} &= (1 + \eta\alpha)^{-1}\big(x^k - \eta(\nabla F(x_g^k) - \alpha x_g^k
        + y^{k+1})\big),\\
    x_f^{k+1} &= x_g^k + \tfrac{2\tau}{2 - \tau}(x^{k+1} - x^k),

started at x^0 = x_f^0 = x0 (each node its row) and y^0 = 0 (in range(P), as the paper
asks).

**OPAPC's polynomial.** With c_1 = (sqrt(chi) - 1) / (sqrt(chi) + 1), c_2 = (chi + 1) /
(chi - 1), c_3 = 2 chi / ((1 + chi) lambda_max(G)) and T gossip steps, the paper's
AcceleratedGossip returns ``P_T(G) x = x - T_T(c_2 (I - c_3 G)) x / T_T(c_2)``. Since
``I - c_3 G = (1 - c_3) I + c_3 W`` and ``c_2 c_3 = 2 / (lambda_2(W) - lambda_min(W))``,
``T_T(c_2 (I - c_3 G)) / T_T(c_2)`` is the Chebyshev polynomial of W on the interval
``[lambda_min(W), lambda_2(W)]`` normalised to 1 at 1, which is
:func:`stochmix.mixing.polynomial.chebyshev` ``(W, T)`` with its default bounds: so
``P_T(G) = I - chebyshev(W, T)``, and a Result's ``messages`` count T rounds of W's messages
per iteration. On range(G) its eigenvalues lie in ``[(1 - c_1^T)^2, (1 + c_1^T)^2] / (1 +
c_1^{2T})``.

Both methods need a fixed graph (a :class:`~stochmix.mixing.StaticSequence`, or any
sequence of period 1: the tuning reads one gossip matrix's spectrum) and every node in
every iteration (``participation.Full(n)``); other sequences and participation processes
are refused before any work.
"""

from __future__ import annotations

import math

import numpy as np

from .._validate import as_float, as_int, choice, show
from ..engine import Block, RunContext, grad
from ..mixing.polynomial import chebyshev
from ..mixing.sequences import RULES, GraphSequence
from .decentralized_base import DecentralizedMethod, require_everyone
from .dual_accelerated import gossip_spectrum
from .fedprox import affine_gradients, has_exact_prox

__all__ = ["APAPC", "OPAPC", "local_constants"]


def local_constants(problem) -> tuple[float, float | None]:
    """``(L, mu)`` of a problem's local functions, as the paper's assumptions read them:
    ``L = problem.smoothness`` (an upper bound on every grad f_i's Lipschitz constant) and,
    for a problem with affine gradients grad f_i(x) = H_i x - c_i
    (:class:`~stochmix.problems.Quadratic`, :class:`~stochmix.problems.LeastSquares`),
    ``mu = min_i lambda_min(H_i)``, the largest constant every f_i is strongly convex
    with; None for other problems (their ``strong_convexity`` is the average's, not each
    f_i's). Dense eigenvalues: O(n d^3) for full Hessians, O(n d) for diagonal ones."""
    smooth = problem.smoothness
    smooth = None if smooth is None else float(smooth)
    if smooth is None or not has_exact_prox(problem):
        return smooth, None  # type: ignore[return-value]
    h = np.asarray(affine_gradients(problem)[0], dtype=np.float64)
    low = h.min(axis=1) if h.ndim == 2 else np.linalg.eigvalsh(h)[:, 0]
    return smooth, float(low.min())


class APAPC(DecentralizedMethod):
    r"""APAPC, the accelerated proximal alternating predictor-corrector method (Algorithm 1
    of Kovalev, Salim & Richtárik 2020) with P = G = I - W: the recursion of the module
    docstring, one gossip round (``x^{k+1/2}`` mixed by W once) per iteration.

    **Tuning** (the paper's Theorem 1, the defaults; ``lr`` first, as every method's,
    None for the paper's eta): alpha = mu, tau = min(1, sqrt(chi /
    kappa) / 2) with kappa = L / mu, eta = 1 / (4 tau L), theta = 1 / (eta lambda_max(G)).
    Then a Lyapunov function of x^k, y^k and x_f^k falls by the factor (1 + min(1 /
    sqrt(kappa chi), 1 / chi) / 4)^{-1} per iteration: O((sqrt(kappa chi) + chi)
    ln(1/epsilon)) iterations, each one gradient per node and one communication round, so
    at a fixed graph the gradient steps to a fixed accuracy grow like sqrt(kappa), not
    kappa. ``L`` and ``mu`` are the local functions' constants (each f_i L-smooth and
    mu-strongly convex): by default :func:`local_constants` of the run's problem
    (``problem.smoothness`` and min_i lambda_min(H_i)); give ``mu`` for a problem without
    affine gradients. :attr:`constants` keeps what a run used.

    State: blocks ``xg`` (x_g^k, the model block: gradients are taken there), ``x``
    (x^k, reported: the output is its network average), ``xf`` (x_f^k), each starting at
    x0; ``y`` (the dual variable, starting at 0), ``h`` (x^{k+1/2}) and ``g`` (grad F(x_g^k)),
    each (n, d), row i node i's. One iteration (round k) is four phases: "predictor"
    (h and g, node-local, one gradient per node), "gossip" (y <- y + theta (h - W h): one
    whole-block product, one communication round), "corrector" (x^{k+1} and x_f^{k+1},
    node-local) and "couple" (x_g^{k+1} = tau x^{k+1} + (1 - tau) x_f^{k+1}, node-local).
    Every iteration builds the same phases (``rounds_repeat``).

    Args:
        lr: the primal step eta, or None for the paper's 1 / (4 tau L) (theta = 1 / (eta
            lambda_max) follows it either way).
        graphs: a fixed graph (period 1), undirected (W symmetric).
        rule: the weight rule of W (symmetric doubly stochastic: ``"metropolis"``).
        L: the local functions' smoothness constant, or None (the problem's).
        mu: their strong-convexity constant (``0 < mu <= L``), or None (the problem's,
            for problems with affine gradients).
        tau: the coupling in (0, 1], or None for the paper's value; the default eta and
            theta follow it (eta = 1 / (4 tau L), theta = 1 / (eta lambda_max)).
        check_mixing: check W (doubly stochastic, connected).

    Raises:
        ValueError: a graph sequence of period other than 1, a bad ``lr``, ``L``, ``mu``
            or ``tau`` (at construction); ``mu`` None on a problem without affine gradients,
            ``mu > L``, participation other than Full(n), a non-symmetric W (at
            :func:`stochmix.run`, before any work).

    References:
        - D. Kovalev, A. Salim and P. Richtárik, "Optimal and practical algorithms for
          smooth and strongly convex decentralized optimization", NeurIPS 2020
          (arXiv:2006.11773): Algorithm 1 (APAPC) and Theorem 1.
        - Y. Drori, S. Sabach and M. Teboulle, "A simple algorithm for a class of
          nonsmooth convex-concave saddle-point problems", Operations Research Letters
          43(2):209-214, 2015 (PAPC, the predictor-corrector step).
    """

    name = "APAPC"
    needs = {"rule": "doubly"}
    rounds_repeat = True
    #: gradients are taken at x_g; nodes report x (:meth:`node_models`)
    model_block = "xg"
    reported_block = "x"  # what each node reports (node_models)
    _run_state = DecentralizedMethod._run_state | {"constants", "_local"}
    graph_tuned = frozenset({"constants"})  # from W's spectrum (certificates keep them)

    def __init__(self, lr, graphs: GraphSequence, rule="metropolis", L=None, mu=None,
                 tau=None, check_mixing=True):  # fmt: skip
        super().__init__(1.0, graphs, check_mixing=check_mixing)
        self.lr = None if lr is None else as_float(lr, "lr", positive=True)  # type: ignore[assignment]
        if graphs.period != 1:
            raise ValueError(
                f"graphs must be a fixed graph (a StaticSequence, period 1) for {self.name}: "
                f"its tuning reads one gossip matrix's spectrum; got {show(graphs)} with "
                f"period {graphs.period}"
            )
        self.rule = choice(rule, "rule", RULES)
        self.L = None if L is None else as_float(L, "L", positive=True)
        self.mu = None if mu is None else as_float(mu, "mu", positive=True)
        if self.L is not None and self.mu is not None and self.mu > self.L:
            raise ValueError(f"mu must be <= L = {self.L!r}, got {self.mu!r}")
        self.tau = None if tau is None else as_float(tau, "tau", positive=True, maximum=1.0)
        self._local: tuple | None = None  # (problem, L, mu)
        #: the run's constants (L, mu, kappa, lambda_max, lambda_min_plus, chi, tau, eta,
        #: theta, alpha, ...), set when a run starts
        self.constants: dict = {}

    # ------------------------------------------------------------------ checks and tuning
    def check_participation(self, participation) -> None:
        reason = (
            "a synchronous primal-dual recursion: every node takes every predictor, gossip "
            "and corrector step"
        )
        require_everyone(participation, self.name, reason)
        super().check_participation(participation)

    def check_problem(self, problem) -> None:
        super().check_problem(problem)
        smooth, strong = (self.L, self.mu)
        if smooth is None or strong is None:
            found_l, found_mu = local_constants(problem)
            smooth = found_l if smooth is None else smooth
            strong = found_mu if strong is None else strong
        if smooth is None:
            raise ValueError(
                f"problem: {self.name} needs the local smoothness L (give L=): "
                f"{type(problem).__name__} does not state it: {show(problem)}"
            )
        if strong is None:
            raise ValueError(
                f"problem: {self.name} needs the local strong-convexity constant mu of every "
                f"f_i (give mu=); it is read only from problems with affine gradients, got "
                f"{type(problem).__name__}: {show(problem)}"
            )
        if not strong > 0:
            raise ValueError(
                f"problem: every local function must be strongly convex for {self.name}, but "
                f"min_i lambda_min(H_i) = {strong!r} (give mu=): {show(problem)}"
            )
        if strong > smooth:
            raise ValueError(f"mu must be <= L = {smooth!r}, got {strong!r}")
        self._local = (problem, smooth, strong)

    def start(self, ctx: RunContext) -> None:
        super().start(ctx)
        counted = ctx.map_problem
        problem = counted.__dict__.get("problem") if counted is not None else None
        if self._local is None or (problem is not None and self._local[0] is not problem):
            if problem is not None:
                self.check_problem(problem)
            elif self.L is not None and self.mu is not None:  # no run (a certificate)
                if self.mu > self.L:
                    raise ValueError(f"mu must be <= L = {self.L!r}, got {self.mu!r}")
                self._local = (None, float(self.L), float(self.mu))
            else:
                raise ValueError(
                    f"{self.name} reads the problem's constants when a run starts; outside a "
                    "run (a certificate, the exact operators) give L= and mu="
                )
        _, smooth, strong = self._local  # type: ignore[misc]
        self._whole(0, self.rule)  # W checked (doubly stochastic, connected) once
        top, low = gossip_spectrum(self.graphs.matrix(0, self.rule, copy=False))
        self.constants = self._parameters(smooth, strong, top, low)

    def _spectrum(self, top: float, low: float) -> tuple[float, float, dict]:
        """``(lambda_max(P), lambda_min^+(P), extras)`` of the communication operator P."""
        return top, low, {}

    def _parameters(self, smooth: float, strong: float, top: float, low: float) -> dict:
        p_top, p_low, extras = self._spectrum(top, low)
        kappa = smooth / strong
        chi = p_top / p_low
        tau = min(1.0, 0.5 * math.sqrt(chi / kappa)) if self.tau is None else self.tau
        eta = 1.0 / (4.0 * tau * smooth) if self.lr is None else self.lr
        theta = 1.0 / (eta * p_top)
        return {"L": smooth, "mu": strong, "kappa": kappa, "lambda_max": top,
                "lambda_min_plus": low, "chi": top / low, "P_max": p_top, "P_min_plus": p_low,
                "tau": tau, "eta": eta, "theta": theta, "alpha": strong,
                **extras}  # fmt: skip

    # ------------------------------------------------------------------------- phases
    def blocks(self, n_clients: int) -> list[Block]:
        return [
            Block("xg", n_clients, "model"),
            Block("x", n_clients, "model"),
            Block("xf", n_clients, "model"),
            Block("y", n_clients),
            Block("h", n_clients),
            Block("g", n_clients),
        ]

    def _communicate(self, r: int, h):
        """P h as an expression of the block ``h``: h - W h."""
        return h - self.mixing(r, self.rule) @ h

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        eq = self.round_equations(participants, ctx)
        xg, x, xf, y, h, g = eq.blocks("xg", "x", "xf", "y", "h", "g")
        c = self.constants
        eta, theta, alpha, tau = c["eta"], c["theta"], c["alpha"], c["tau"]
        shrink = 1.0 / (1.0 + eta * alpha)
        h[:] = shrink * (x - eta * grad() + eta * alpha * xg - eta * y)
        g[:] = grad()
        predictor = eq.build("predictor")
        y[:] = y + theta * self._communicate(r, h)
        gossip = eq.build("gossip")
        step = 2.0 * tau / (2.0 - tau)
        # x^{k+1} = shrink (x - eta (g - alpha xg + y^{k+1})); x_f from the same old rows
        x[:] = shrink * (x - eta * g + eta * alpha * xg - eta * y)
        xf[:] = xg + step * (shrink * (x - eta * g + eta * alpha * xg - eta * y) - x)
        corrector = eq.build("corrector")
        xg[:] = tau * x + (1.0 - tau) * xf
        return [predictor, gossip, corrector, eq.build("couple")]



class OPAPC(APAPC):
    r"""OPAPC, the optimal proximal alternating predictor-corrector method (Algorithm 2 of
    Kovalev, Salim & Richtárik 2020): APAPC with the communication operator P = P_T(G) =
    I - chebyshev(W, T) (the paper's AcceleratedGossip, T Chebyshev-accelerated gossip
    rounds; see the module docstring), so ``y^{k+1} = y^k + theta (x^{k+1/2} - Q_T
    x^{k+1/2})`` with ``Q_T`` = :func:`~stochmix.mixing.polynomial.chebyshev` ``(W, T)``.

    **Tuning** (the paper's Corollary for Algorithm 2, the defaults): T =
    floor(sqrt(chi)) (``gossip_steps``), c_1 = (sqrt(chi) - 1) / (sqrt(chi) + 1), alpha =
    mu, tau = min(1, (1 + c_1^T) / (2 sqrt(kappa) (1 - c_1^T))), eta = 1 / (4 tau L),
    theta = (1 + c_1^{2T}) / (eta (1 + c_1^T)^2): APAPC's rule with P_T(G)'s spectrum,
    lambda_max(P_T) = (1 + c_1^T)^2 / (1 + c_1^{2T}) and chi(P_T) = ((1 + c_1^T) / (1 -
    c_1^T))^2, a constant (at most about 4 at the default T). So O(sqrt(kappa)
    ln(1/epsilon)) iterations, each one gradient per node and T communication rounds:
    O(sqrt(kappa) ln(1/epsilon)) gradients and O(sqrt(kappa chi) ln(1/epsilon))
    communications, both optimal (the lower bounds of Scaman et al. 2017).

    State and phases: as :class:`APAPC`'s; the "gossip" phase applies Q_T (formed once per
    run by T sparse products; its Result ``messages`` count T rounds of W's messages).

    Args:
        lr: the primal step eta, or None for the paper's 1 / (4 tau L) (theta = 1 / (eta
            lambda_max(P_T)) follows it either way).
        graphs: a fixed graph (period 1), undirected (W symmetric).
        rule: the weight rule of W (symmetric doubly stochastic: ``"metropolis"``).
        L: the local functions' smoothness constant, or None (the problem's).
        mu: their strong-convexity constant, or None (the problem's, for problems with
            affine gradients).
        tau: the coupling in (0, 1], or None for the paper's value.
        gossip_steps: T >= 1, or None for floor(sqrt(chi)).
        check_mixing: check W (doubly stochastic, connected).

    References:
        - D. Kovalev, A. Salim and P. Richtárik, "Optimal and practical algorithms for
          smooth and strongly convex decentralized optimization", NeurIPS 2020
          (arXiv:2006.11773): Algorithm 2 (OPAPC) with its procedure AcceleratedGossip,
          and its corollary.
        - K. Scaman, F. Bach, S. Bubeck, Y. T. Lee and L. Massoulié, "Optimal algorithms
          for smooth and strongly convex distributed optimization in networks", ICML 2017
          (the accelerated gossip and the lower bounds).
    """

    name = "OPAPC"

    def __init__(self, lr, graphs: GraphSequence, rule="metropolis", L=None, mu=None,
                 tau=None, gossip_steps=None, check_mixing=True):  # fmt: skip
        super().__init__(lr, graphs, rule, L, mu, tau, check_mixing)
        self.gossip_steps = None if gossip_steps is None else as_int(
            gossip_steps, "gossip_steps", minimum=1
        )  # fmt: skip

    def _spectrum(self, top: float, low: float) -> tuple[float, float, dict]:
        chi = top / low
        root = math.sqrt(chi)
        steps = self.gossip_steps or max(1, math.floor(root))
        c1 = (root - 1.0) / (root + 1.0)
        power = c1**steps
        p_top = (1.0 + power) ** 2 / (1.0 + power**2)
        p_low = (1.0 - power) ** 2 / (1.0 + power**2)
        return p_top, p_low, {"steps": steps, "c1": c1}

    def _communicate(self, r: int, h):
        """P_T(G) h = h - Q_T h, Q_T = chebyshev(W, T) formed once per run."""
        steps = self.constants["steps"]

        def build():
            q = chebyshev(self.graphs.matrix(r, self.rule, copy=False), steps)
            q.mixes = self.direction(self.rule)
            return q

        return h - self.operators(r, f"chebyshev {steps}", build) @ h

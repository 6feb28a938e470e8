"""Mudag, multi-consensus decentralized accelerated gradient descent (Ye, Luo, Zhou &
Zhang), in :class:`Mudag`: Nesterov's constant momentum on top of a gradient tracker,
every exchange being K rounds of FastMix, the accelerated gossip of
:func:`stochmix.mixing.fastmix`.

It shares :class:`~stochmix.algorithms.DecentralizedMethod` (graph sequence, checked
mixing, network-average output). FastMix over W_k is a polynomial of W_k
(:class:`~stochmix.mixing.PolynomialMixing`), formed once per distinct W_k and applied to
a whole block as one sparse product; the run's messages and floats count K rounds of
W_k's edges for it (:mod:`stochmix.engine.model.traffic`).
"""

from __future__ import annotations

import math

import numpy as np

from .._validate import as_float, as_int, choice, show
from ..engine import Block, RunContext, grad
from ..mixing.polynomial import fastmix
from ..mixing.sequences import RULES, GraphSequence
from .decentralized_base import DecentralizedMethod, require_everyone

__all__ = ["Mudag"]


class Mudag(DecentralizedMethod):
    r"""Mudag (Ye, Luo, Zhou & Zhang, Algorithm 1 with its FastMix procedure) for a
    strongly convex average f = (1/n) sum_i F_i, with step eta (``lr``), momentum beta
    and K FastMix rounds per exchange. Iteration t, with T_k the FastMix operator of
    W_k (k = t):

    .. math::

        x^{t+1} &= T_k\,(y^t - \eta s^t),\\
        y^{t+1} &= x^{t+1} + \beta\,(x^{t+1} - x^t),\\
        s^{t+1} &= T_k\, s^t + \nabla F(y^{t+1}) - \nabla F(y^t),

    started at x^0 = y^0 = x0 (each node its row of ``x0``; the paper starts every node
    at the same point) and s^0 = grad F(y^0). FastMix is K rounds of the momentum gossip
    ``z^{j+1} = (1 + eta_w) W_k z^j - eta_w z^{j-1}``, ``z^{-1} = z^0``, so ``T_k =
    p_K(W_k)`` with p_K(1) = 1: the node average of s equals that of grad F(y^t) at every
    t (gradient tracking), and the averages follow Nesterov's scheme x-bar^{t+1} = y-bar^t
    - eta s-bar^t. Nodes report x (the paper's output); the run's output is their average.

    **Parameters and the paper's tuning.** ``lr`` is eta > 0, the paper's 1/L with L the
    smoothness of f (not of the F_i). The momentum is ``momentum`` = beta in [0, 1), or,
    given ``mu`` (a strong-convexity constant of f) instead, the paper's beta = (1 -
    alpha) / (1 + alpha) with alpha = sqrt(mu eta), i.e. (sqrt(kappa) - 1) / (sqrt(kappa)
    + 1) for eta = 1/L, kappa = L/mu (mu eta <= 1 is required). Give exactly one of them.
    ``mix_rounds`` is K >= 1; the paper's theorem takes K of order sqrt(1 / (1 -
    lambda_2(W))) log(kappa M / L) (M the largest smoothness of the F_i), which
    :meth:`paper_rounds` computes with a constant ``c`` (1 by default). ``mix_momentum``
    is FastMix's eta_w in [0, 1); by default the paper's (1 - sqrt(1 - lambda^2)) / (1 +
    sqrt(1 - lambda^2)) from each W_k's spectrum (:func:`~stochmix.mixing.fastmix`: lambda
    the second-largest eigenvalue modulus, computed densely, so symmetric W_k). The
    defaults: ``rule="metropolis"`` (doubly stochastic W), ``check_mixing=True``. Then
    gradient computations to accuracy epsilon are O(sqrt(kappa) log(1/epsilon)) per node
    and communication rounds O(sqrt(kappa / (1 - lambda_2)) log(kappa M / L)
    log(1/epsilon)) (the paper's main theorem for strongly convex f).

    State: blocks ``y`` (the model block: gradients are taken there), ``x`` (reported),
    ``s`` (the tracker) and ``g`` (grad F(y^t), the tracker's memory), each (n, d), row i
    node i's. One iteration is four phases: "descend" (y <- y - eta s, node-local),
    "fastmix" (y <- T_k y and s <- T_k s: whole-block products), "extrapolate" (y <- (1 +
    beta) y - beta x and x <- y, node-local) and "track" (s <- s + grad F(y) - g, g <-
    grad F(y), node-local, with the n gradients at y^{t+1}); round 0 first takes "initial
    gradients" (s = g = grad F(y^0)). So one iteration costs one gradient per node (n in
    all, plus n at the start) and K communication rounds over W_k's edges, each message
    carrying two vectors (y - eta s and s).

    Participation: every node in every iteration (``participation.Full(n)``); any other
    process is refused before the run (FastMix needs every node in each of its K rounds,
    and the momentum a synchronous recursion). ``needs``: ``rule`` doubly stochastic. The
    paper states a fixed W; a time-varying sequence runs FastMix over W_k at step k.

    Args:
        lr: eta > 0, the step.
        graphs: the :class:`~stochmix.mixing.GraphSequence` of W_k.
        mix_rounds: K >= 1, FastMix rounds per exchange.
        mu: a strong-convexity constant of f (> 0): beta from alpha = sqrt(mu * lr). Or None.
        momentum: beta in [0, 1). Or None.
        mix_momentum: FastMix's eta_w in [0, 1), or None for the paper's value from W_k.
        rule: weight rule of W_k (doubly stochastic).
        check_mixing: check every W_k (``False`` runs broken mixing anyway).

    Raises:
        ValueError: neither or both of ``mu`` and ``momentum``, a value out of range, or
            ``mu * lr > 1``; participation other than Full(n) (at :func:`stochmix.run`).

    References:
        - H. Ye, L. Luo, Z. Zhou and T. Zhang, "Multi-consensus decentralized accelerated
          gradient descent", Journal of Machine Learning Research 24(306):1-50, 2023
          (arXiv:2005.00797): Algorithm 1 (Mudag), the FastMix procedure, the strongly
          convex complexity theorem.
        - J. Liu and A. S. Morse, "Accelerated linear iterations for distributed
          averaging", Annual Reviews in Control 35(2):160-165, 2011 (FastMix's momentum).
    """

    name = "Mudag"
    rounds_repeat = True
    needs = {"rule": "doubly"}
    #: gradients are taken at the extrapolated points y; nodes report x (:meth:`node_models`)
    model_block = "y"
    reported_block = "x"  # what each node reports (node_models)

    def __init__(
        self,
        lr,
        graphs: GraphSequence,
        mix_rounds,
        mu=None,
        momentum=None,
        mix_momentum=None,
        rule="metropolis",
        check_mixing=True,
    ):
        super().__init__(lr, graphs, check_mixing=check_mixing)
        self.mix_rounds = as_int(mix_rounds, "mix_rounds", minimum=1)
        if (mu is None) == (momentum is None):
            raise ValueError(
                f"{self.name} needs exactly one of mu (momentum = (1 - a) / (1 + a), a = sqrt(mu * "
                f"lr)) and momentum, got mu={show(mu)} and momentum={show(momentum)}"
            )
        self.mu = None if mu is None else as_float(mu, "mu", positive=True)
        if self.mu is not None:
            if self.mu * self.lr > 1.0:
                raise ValueError(
                    f"mu * lr must be <= 1 (alpha = sqrt(mu * lr) <= 1), got mu={self.mu!r} "
                    f"and lr={self.lr!r}"
                )
            alpha = math.sqrt(self.mu * self.lr)
            momentum = (1.0 - alpha) / (1.0 + alpha)
        self.momentum = as_float(momentum, "momentum", nonnegative=True)
        if not self.momentum < 1.0:
            raise ValueError(f"momentum must be < 1, got {self.momentum}")
        if mix_momentum is not None:
            mix_momentum = as_float(mix_momentum, "mix_momentum", nonnegative=True)
            if not mix_momentum < 1.0:
                raise ValueError(f"mix_momentum must be < 1, got {mix_momentum}")
        self.mix_momentum = mix_momentum
        self.rule = choice(rule, "rule", RULES)

    @staticmethod
    def paper_rounds(lambda2, kappa, local_ratio=1.0, c=1.0) -> int:
        """The paper's K: ``max(1, ceil(c log(kappa * local_ratio) / sqrt(1 - lambda2)))``.

        Args:
            lambda2: the second-largest eigenvalue of W, in [0, 1) (or the
                second-largest modulus, ``1 - stochmix.mixing.spectral_gap(W)``, which
                bounds it).
            kappa: L / mu, the condition number of f (>= 1).
            local_ratio: M / L >= 1, the largest smoothness of the F_i over f's.
            c: the constant (> 0) in front; the theorem's is larger than 1, which
                convergence rarely needs.

        Returns:
            K, an int >= 1.
        """
        lam = as_float(lambda2, "lambda2", nonnegative=True)
        if not lam < 1.0:
            raise ValueError(f"lambda2 must be < 1 (a connected graph), got {lam}")
        kappa = as_float(kappa, "kappa", positive=True)
        if kappa < 1.0:
            raise ValueError(f"kappa must be >= 1, got {kappa}")
        ratio = as_float(local_ratio, "local_ratio", positive=True)
        if ratio < 1.0:
            raise ValueError(f"local_ratio must be >= 1, got {ratio}")
        c = as_float(c, "c", positive=True)
        return max(1, math.ceil(c * math.log(kappa * ratio) / math.sqrt(1.0 - lam)))

    def check_participation(self, participation) -> None:
        reason = (
            "FastMix needs every node in each of its rounds, and the momentum a synchronous "
            "recursion"
        )
        require_everyone(participation, self.name, reason)
        super().check_participation(participation)

    def blocks(self, n_clients: int) -> list[Block]:
        return [
            Block("y", n_clients, "model"),
            Block("x", n_clients, "model"),
            Block("s", n_clients),
            Block("g", n_clients),
        ]

    def fastmix_operator(self, k: int):
        """T_k, FastMix over W_k (:func:`~stochmix.mixing.fastmix` with ``mix_rounds``
        and ``mix_momentum``), formed once per distinct W_k (:meth:`operators`)."""
        w = self.mixing(k, self.rule)
        return self.operators(
            k, f"fastmix:{self.rule}", lambda: fastmix(w, self.mix_rounds, self.mix_momentum)
        )

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        eq = self.round_equations(participants, ctx)
        y, x, s, g = eq.blocks("y", "x", "s", "g")
        eta, beta, t = self.lr, self.momentum, self.fastmix_operator(r)
        first = []
        if r == 0:  # s^0 = grad F(y^0), kept in g for the tracker's difference
            s[:] = grad()
            g[:] = grad()
            first.append(eq.build("initial gradients"))
        y[:] -= eta * s
        descend = eq.build("descend")
        y[:] = t @ y  # x^{t+1}, held in y until x^t is no longer needed
        s[:] = t @ s
        mix = eq.build("fastmix")
        y[:] = (1.0 + beta) * y - beta * x
        x[:] = y
        extrapolate = eq.build("extrapolate")
        s[:] += grad() - g
        g[:] = grad()
        return [*first, descend, mix, extrapolate, eq.build("track")]


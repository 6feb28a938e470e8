r"""Decentralized accelerated proximal gradient descent: DAPG (Ye, Zhou, Luo & Zhang 2020),
Nesterov's momentum, gradient tracking and multi-consensus (FastMix) gossip for composite
problems (1/n) sum_i f_i + r, in :class:`DAPG`.

It shares :class:`~stochmix.algorithms.DecentralizedMethod` (graph sequence, checked
mixing, network-average output). Its gossip is the FastMix polynomial of W_k
(:func:`stochmix.mixing.fastmix`: K rounds of communication over W_k's edges, counted as
K rounds in a Result's ``messages``), applied to whole blocks as one sparse product; the
prox of r is a row map (:class:`~stochmix.engine.RowMap`) over every node, as in
:mod:`stochmix.algorithms.proximal`.
"""

from __future__ import annotations

import numpy as np

from ..engine import Block, RunContext, grad
from ..mixing.polynomial import PolynomialMixing
from .mudag import Mudag
from .proximal import prox_phase

__all__ = ["DAPG"]


class DAPG(Mudag):
    r"""DAPG, decentralized accelerated proximal gradient descent (Ye, Zhou, Luo & Zhang,
    Algorithm 1), for min_x (1/n) sum_i f_i(x) + r(x) with r the same at every node (a
    :class:`~stochmix.problems.Composite` problem; on a smooth problem r = 0 and the prox
    is left out). Iteration t, with ``P_t = FastMix(W_t, K)`` the FastMix polynomial of
    W_t (:func:`~stochmix.mixing.fastmix`) and beta the momentum:

    .. math::

        v^{t} &= \operatorname{prox}_{\eta r}\big(y^t - \eta s^t\big)
                 \quad\text{(row by row: each node its own prox)},\\
        x^{t+1} &= P_t v^t,\\
        y^{t+1} &= x^{t+1} + \beta\,(x^{t+1} - x^t),\\
        s^{t+1} &= P_t s^t + \nabla F(y^{t+1}) - \nabla F(y^t),

    row i of each (n, d) matrix node i's vector, grad F the smooth parts' gradients. It is
    :class:`~stochmix.algorithms.Mudag` (its arguments, checks and FastMix operators) with
    each node's prox before the gossip, and equal to it on a smooth problem.
    Started at x^0 = y^0 = x0 (each node its row of ``x0``) and s^0 = grad F(y^0): y is
    the extrapolated point where gradients are taken, x the mixed proximal point, s the
    gradient tracker (P_t's columns sum to one, so the node average of s^t equals that of
    grad F(y^t) at every t). The composite minimiser x* is a fixed point: x = y = 1 x*^T,
    s = 1 grad f(x*)^T, prox_{eta r}(x* - eta grad f(x*)) = x*. Nodes report x (the
    paper's theorem bounds the average of x^t); the output is their network average. On a
    smooth problem v = y - eta s and the recursion is Mudag's (Ye, Luo, Zhou & Zhang).

    **Parameters** (named as :class:`~stochmix.algorithms.mudag.Mudag`'s). ``lr`` is
    the step eta > 0 (the gradient step and the prox step). The momentum is ``momentum``
    = beta in [0, 1) (0: no momentum, proximal gradient tracking with multi-consensus),
    or, given ``mu`` (a strong-convexity constant of f = (1/n) sum_i f_i) instead, the
    paper's beta = (1 - alpha) / (1 + alpha) with alpha = sqrt(mu eta) (mu eta <= 1
    required). Give exactly one of ``mu`` and ``momentum``. ``mix_rounds`` is K >= 1,
    the FastMix rounds per gossip, and ``mix_momentum`` FastMix's momentum in [0, 1)
    (default: the paper's, from each W_t's spectrum, as :func:`~stochmix.mixing.fastmix`
    computes it densely: symmetric W_t). ``rule="metropolis"`` (W_t doubly stochastic),
    ``check_mixing=True``.

    **The paper's tuning.** eta = 1/L (L the smoothness of f), alpha = sqrt(mu/L) (mu
    the strong convexity of f; the f_i need not be convex), and K of order
    log(L/mu) / sqrt(1 - lambda_2(W)) FastMix rounds
    (:meth:`Mudag.paper_rounds <stochmix.algorithms.mudag.Mudag.paper_rounds>` computes
    that order): then the average of x^t converges linearly to x* at a rate 1 - c
    sqrt(mu/L), so O(sqrt(L/mu) log(1/eps)) iterations (gradients, optimal) and
    O(sqrt(L/mu) log(1/eps) K) communication rounds (optimal up to the log factor in K)
    reach accuracy eps.

    State: blocks ``y`` (the model block: gradients are taken there), ``x``, ``v`` (the
    proximal point, mixed in place), ``s`` (the tracker) and ``g`` (grad F(y^t), the
    tracker's memory), each (n, d); x and y start at ``x0``, the others at zero. One
    iteration is "descend" (v <- y - eta s, node-local), the prox (a row map over every
    node; left out on a smooth problem), "mix" (v <- P_t v and s <- P_t s: whole-block
    products), "extrapolate" (y <- (1 + beta) v - beta x and x <- v, node-local) and
    "track" (s <- s + grad F(y) - g and g <- grad F(y), node-local, with the n gradients
    at the new y); round 0 first takes "initial
    gradients" (s = g = grad F(y^0)). So one iteration costs one gradient per node (n in
    all, plus n at the start) and one FastMix gossip of K rounds over W_t's edges, each
    message carrying two vectors (v and s), as Mudag's.

    Participation: every node in every iteration (``participation.Full(n)``); any other
    process is refused before the run (FastMix needs every node in each of its K rounds,
    and a node that skips an iteration leaves its momentum out of step). ``needs``:
    ``rule`` doubly stochastic (the paper takes W symmetric, doubly stochastic, with
    lambda_2 < 1; the default ``mix_momentum`` needs W symmetric). The paper states a fixed
    W; a time-varying sequence runs FastMix(W_t, K) at step t.

    Args:
        lr: eta > 0, the step.
        graphs: the :class:`~stochmix.mixing.GraphSequence` of W_t.
        mix_rounds: K >= 1, FastMix rounds per gossip.
        mu: a strong-convexity constant of f (> 0): beta from alpha = sqrt(mu * lr). Or
            None.
        momentum: beta in [0, 1). Or None.
        mix_momentum: FastMix's momentum in [0, 1), or None (the paper's, from W_t).
        rule: weight rule of W_t (doubly stochastic).
        check_mixing: check every W_t (``False`` runs broken mixing anyway).

    Raises:
        ValueError: neither or both of ``mu`` and ``momentum``, a value out of range, or
            ``mu * lr > 1``; participation other than Full(n) (at :func:`stochmix.run`).

    References:
        - H. Ye, Z. Zhou, L. Luo and T. Zhang, "Decentralized accelerated proximal
          gradient descent", NeurIPS 2020 (Algorithm 1, DAPG, and its FastMix).
        - H. Ye, L. Luo, Z. Zhou and T. Zhang, "Multi-consensus decentralized accelerated
          gradient descent", JMLR 24(306):1-50, 2023 (Mudag: the smooth case).
    """

    name = "DAPG"
    proximal = True

    def gossip(self, k: int) -> PolynomialMixing:
        """P_k = FastMix(W_k, K), the operator of step k (Mudag's
        :meth:`~stochmix.algorithms.mudag.Mudag.fastmix_operator`)."""
        return self.fastmix_operator(k)

    def blocks(self, n_clients: int) -> list[Block]:
        return [
            Block("y", n_clients, "model"),
            Block("x", n_clients, "model"),
            Block("v", n_clients),
            Block("s", n_clients),
            Block("g", n_clients),
        ]

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        eq = self.round_equations(participants, ctx)
        y, x, v, s, g = eq.blocks("y", "x", "v", "s", "g")
        eta, beta, p = self.lr, self.momentum, self.gossip(r)
        first = []
        if r == 0:  # s^0 = grad F(y^0), kept in g for the tracker's difference
            s[:] = grad()
            g[:] = grad()
            first.append(eq.build("initial gradients"))
        v[:] = y - eta * s
        descend = [eq.build("descend")]
        if ctx.regularizer is not None:
            descend.append(prox_phase(ctx, eq, "v", "v", eta, r))
        v[:] = p @ v  # x^{t+1}, until x^t is no longer needed
        s[:] = p @ s  # sent with v: one gossip of two vectors
        mix = eq.build("mix")
        y[:] = (1.0 + beta) * v - beta * x
        x[:] = v
        extrapolate = eq.build("extrapolate")
        s[:] += grad() - g
        g[:] = grad()
        return [*first, *descend, mix, extrapolate, eq.build("track")]

"""Exact first-order decentralized methods beyond gradient tracking: EXTRA, NIDS, Exact
Diffusion, D² and Push-DIGing / ADD-OPT (the method zoo of issue 15).

They share :class:`~stochmix.algorithms.decentralized.DecentralizedMethod` (graph
sequence, checked mixing, per-period phase reuse, network-average output). Every mixing
phase rewrites whole blocks, so the engine applies W_k to a block as one sparse product.
On a time-varying sequence, iteration k (round k, computing x^{k+1}) uses W_k wherever
the paper writes W.
"""

from __future__ import annotations

import numpy as np

from .._validate import as_float, choice
from ..engine import Block, RunContext, grad
from ..mixing.sequences import RULES, GraphSequence
from .decentralized import PushSumModels, _Tracking
from .decentralized_base import DecentralizedMethod

__all__ = [
    "D2",
    "EXTRA",
    "ExactDiffusion",
    "NIDS",
    "PushDIGing",
]


class EXTRA(DecentralizedMethod):
    r"""EXTRA, the exact first-order algorithm, with W~ = (I + W)/2:

    .. math::

        x^{1} = W_0 x^0 - \alpha \nabla F(x^0),\qquad
        x^{k+1} = (I + W_k) x^k - \tilde W_k x^{k-1}
                  - \alpha \big(\nabla F(x^k) - \nabla F(x^{k-1})\big),\quad
        \tilde W_k = \tfrac12 (I + W_k).

    Converges linearly to x_star with a fixed step on strongly convex problems (symmetric
    doubly stochastic W; ``needs``: ``rule`` doubly stochastic). State: blocks x (the
    iterate), ``xp`` (the previous iterate) and ``g`` (grad F at the previous iterate),
    each (n, d); a round is one whole-block phase that rewrites all three from the old
    state with the n gradients at x.

    Activation (:mod:`stochmix.engine.model.activated`): every W_k pulls; the first step
    (round 0), which starts the memory ``xp`` and ``g``, is taken by every node with W_0
    whatever the activation. Edge gossip
    (:class:`~stochmix.participation.RandomEdge`, ``RandomMatching``,
    ``OnePeerPermutation``) keeps the doubly stochastic mixing it needs; node activation
    (``D W + I - D``, row-stochastic only) breaks it and is refused unless
    ``check_mixing=False``.

    References:
        - W. Shi, Q. Ling, G. Wu and W. Yin, "EXTRA: An exact first-order algorithm for
          decentralized consensus optimization", SIAM Journal on Optimization 25(2):944-966,
          2015.
    """

    name = "EXTRA"
    needs = {"rule": "doubly"}
    rounds_repeat = True

    def __init__(self, lr, graphs: GraphSequence, rule="metropolis", check_mixing=True):
        super().__init__(lr, graphs, check_mixing=check_mixing)
        self.rule = choice(rule, "rule", RULES)

    def blocks(self, n_clients: int) -> list[Block]:
        return [Block("x", n_clients, "model"), Block("xp", n_clients), Block("g", n_clients)]

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        eq = self.round_equations(participants, ctx)
        if r == 0:  # the first step starts the two-step memory: every node takes it
            eq.active, self._edges = None, None
        x, xp, g = eq.blocks("x", "xp", "g")
        a, w = self.lr, self.mixing(r, self.rule)
        if r == 0:
            x[:] = w @ x - a * grad()
        else:
            x[:] = w @ x + x - 0.5 * (w @ xp + xp) - a * (grad() - g)
        xp[:] = x
        g[:] = grad()
        return [eq.build("first step" if r == 0 else "extra step")]


class _CorrectedDiffusion(DecentralizedMethod):
    r"""x^{k+1} = M_k (2 x^k - x^{k-1} - a grad F(x^k) + a grad F(x^{k-1})) with
    M_k = (1 - theta) I + theta W_k, written in Exact Diffusion's variables: psi^{k+1} =
    x^k - a grad F(x^k), phi = psi^{k+1} + x^k - psi^k, x^{k+1} = M_k phi (psi^0 = x^0).
    Blocks x and psi (n, d each); a round is "adapt" (node-local, psi and phi into x)
    and "combine" (x <- M_k x, one sparse product)."""

    needs = {"rule": "doubly"}
    rounds_repeat = True
    #: whether the first iteration is x^1 = x^0 - a grad F(x^0), without combining (NIDS)
    first_combines = True

    def __init__(self, lr, graphs: GraphSequence, rule="metropolis", check_mixing=True):
        super().__init__(lr, graphs, check_mixing=check_mixing)
        self.rule = choice(rule, "rule", RULES)

    theta = 0.5  # M = (1 - theta) I + theta W

    def blocks(self, n_clients: int) -> list[Block]:
        return [Block("x", n_clients, "model"), Block("psi", n_clients, "model")]

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        eq = self.round_equations(participants, ctx)
        x, psi = eq.blocks("x", "psi")
        a, theta = self.lr, self.theta
        psi[:] = x - a * grad()
        x[:] = 2.0 * x - psi - a * grad()  # phi = psi^{k+1} + x^k - psi^k
        phases = [eq.build("adapt")]
        if r > 0 or self.first_combines:
            w = self.mixing(r, self.rule)
            if theta == 1.0:
                x[:] = w @ x
            else:
                x[:] = theta * (w @ x) + (1.0 - theta) * x
            phases.append(eq.build("combine"))
        return phases


class ExactDiffusion(_CorrectedDiffusion):
    r"""Exact Diffusion (adapt, correct, combine) with W-bar = (I + W)/2:

    .. math::

        \psi^{k+1} = x^k - \alpha \nabla F(x^k),\quad
        \phi^{k+1} = \psi^{k+1} + x^k - \psi^k,\quad
        x^{k+1} = \bar W_k \phi^{k+1},\qquad \bar W_k = \tfrac12 (I + W_k),\ \psi^0 = x^0.

    Equivalently x^1 = W-bar (x^0 - a grad F(x^0)) and x^{k+1} = W-bar (2 x^k - x^{k-1} -
    a grad F(x^k) + a grad F(x^{k-1})). Converges linearly to x_star with a fixed step
    (symmetric doubly stochastic W: ``needs`` ``rule`` doubly stochastic). State: blocks x
    and psi, each (n, d); a round is "adapt" (node-local) and "combine" (one product).

    Activation (:mod:`stochmix.engine.model.activated`): every W_k pulls. Edge gossip
    (:class:`~stochmix.participation.RandomEdge`, ``RandomMatching``,
    ``OnePeerPermutation``) keeps the doubly stochastic mixing it needs; node activation
    (``D W + I - D``, row-stochastic only) breaks it and is refused unless
    ``check_mixing=False``.

    References:
        - K. Yuan, B. Ying, X. Zhao and A. H. Sayed, "Exact diffusion for distributed
          optimization and learning — Part I: Algorithm development", IEEE Transactions on
          Signal Processing 67(3):708-723, 2019.
    """

    name = "ExactDiffusion"


class NIDS(_CorrectedDiffusion):
    r"""NIDS, the network-independent step-size algorithm, with W~ = I - c a (I - W):

    .. math::

        x^{1} = x^0 - \alpha \nabla F(x^0),\qquad
        x^{k+1} = \tilde W_k \big(2 x^k - x^{k-1} - \alpha \nabla F(x^k)
                  + \alpha \nabla F(x^{k-1})\big),

    ``c`` defaults to 1/(2 a), which gives W~ = (I + W)/2 (then NIDS differs from Exact
    Diffusion only in its first iteration, which does not combine). The paper allows
    c a up to 1 / (1 - lambda_min(W)); steps up to about 2/L whatever the network. State:
    blocks x and psi (psi^k = x^{k-1} - a grad F(x^{k-1})), each (n, d); a round is
    "adapt" (node-local) and, from round 1, "combine" (x <- W~_k x, one product).
    ``needs``: ``rule`` doubly stochastic (symmetric W in the paper).

    Activation (:mod:`stochmix.engine.model.activated`): every W_k pulls. Edge gossip
    (:class:`~stochmix.participation.RandomEdge`, ``RandomMatching``,
    ``OnePeerPermutation``) keeps the doubly stochastic mixing it needs; node activation
    (``D W + I - D``, row-stochastic only) breaks it and is refused unless
    ``check_mixing=False``.

    References:
        - Z. Li, W. Shi and M. Yan, "A decentralized proximal-gradient method with network
          independent step-sizes and separated convergence rates", IEEE Transactions on Signal
          Processing 67(17):4494-4506, 2019.
    """

    name = "NIDS"
    first_combines = False

    def __init__(self, lr, graphs: GraphSequence, rule="metropolis", c=None, check_mixing=True):
        super().__init__(lr, graphs, rule, check_mixing)
        self.c = None if c is None else as_float(c, "c", positive=True)
        self.theta = 0.5 if self.c is None else self.c * self.lr


class D2(_CorrectedDiffusion):
    r"""D² (decentralized training over decentralized data):

    .. math::

        x^{1} = W_0 \big(x^0 - \alpha \nabla F(x^0)\big),\qquad
        x^{k+1} = W_k \big(2 x^k - x^{k-1} - \alpha \nabla F(x^k)
                  + \alpha \nabla F(x^{k-1})\big).

    The paper asks for symmetric doubly stochastic W with lambda_min(W) > -1/3 (not
    checked; metropolis weights on a graph with self-loops of weight at least 1/3, or
    the lazy (I + W)/2, satisfy it). With exact gradients it converges to x_star with a
    fixed step; its point is that stochastic gradients' variance, not the spread of the
    local objectives, limits it. State: blocks x and psi, each (n, d); "adapt"
    (node-local) and "combine" (x <- W_k x, one product).

    Activation (:mod:`stochmix.engine.model.activated`): every W_k pulls. Edge gossip
    (:class:`~stochmix.participation.RandomEdge`, ``RandomMatching``,
    ``OnePeerPermutation``) keeps the doubly stochastic mixing it needs; node activation
    (``D W + I - D``, row-stochastic only) breaks it and is refused unless
    ``check_mixing=False``.

    References:
        - H. Tang, X. Lian, M. Yan, C. Zhang and J. Liu, "D²: Decentralized training over
          decentralized data", International Conference on Machine Learning (ICML), PMLR
          80:4848-4856, 2018.
    """

    name = "D2"
    theta = 1.0


class PushDIGing(PushSumModels, _Tracking):
    r"""Push-DIGing / ADD-OPT: push-sum gradient tracking with C_k column-stochastic only
    (directed, time-varying graphs), with a weight block v (ones at the start) and
    de-biased points x = u / v:

    .. math::

        \text{push-diging:}\quad u^{k+1} = C_k (u^k - \alpha y^k),\qquad
        \text{add-opt:}\quad u^{k+1} = C_k u^k - \alpha y^k,

        v^{k+1} = C_k v^k,\quad x^{k+1} = u^{k+1} / v^{k+1},\quad
        y^{k+1} = C_k y^k + \nabla F(x^{k+1}) - \nabla F(x^k),

    u^0 = x^0, y^0 = grad F(x^0). Converges linearly to x_star with a fixed step on
    strongly convex problems. ``form="push-diging"`` (default) is Nedić, Olshevsky & Shi's
    Push-DIGing (time-varying graphs), ``"add-opt"`` the ADD-OPT of Xi, Xin & Khan.
    State: blocks x (the numerator u), w (the weights v, every column of a row the same),
    y and g (grad F at the last points), each (n, d); nodes report u / v. A round is
    "push" (u and v, whole-block products) and "track" (y <- C_k y + grad F - g, g <-
    grad F, whole-block). ``needs``: ``rule`` column-stochastic.

    Activation (:mod:`stochmix.engine.model.activated`): C_k pushes (``C D + I - D`` stays
    column-stochastic), so it runs under node activation.

    References:
        - A. Nedić, A. Olshevsky and W. Shi, "Achieving geometric convergence for distributed
          optimization over time-varying graphs", SIAM Journal on Optimization
          27(4):2597-2633, 2017 (Push-DIGing).
        - C. Xi, R. Xin and U. A. Khan, "ADD-OPT: Accelerated distributed directed
          optimization", IEEE Transactions on Automatic Control 63(5):1329-1339, 2018.
    """

    name = "PushDIGing"
    needs = {"rule": "column"}
    rounds_repeat = True

    def __init__(
        self, lr, graphs: GraphSequence, rule="column", check_mixing=True, form="push-diging"
    ):
        super().__init__(lr, graphs, check_mixing=check_mixing)
        self.rule = choice(rule, "rule", RULES)
        self.form = choice(form, "form", ("push-diging", "add-opt"))

    def blocks(self, n_clients: int) -> list[Block]:
        return [*super().blocks(n_clients), Block("w", n_clients, "ones")]

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        eq = self.round_equations(participants, ctx)
        first = self.start_tracking(eq, r)
        x, w, y, g = eq.blocks("x", "w", "y", "g")
        c = self.mixing(r, self.rule)
        if self.form == "push-diging":
            x[:] = c @ (x - self.lr * y)
        else:
            x[:] = c @ x - self.lr * y
        w[:] = c @ w
        push = eq.build("push")
        y[:] = c @ y + grad() - g
        g[:] = grad()
        return [*first, push, eq.build("track")]

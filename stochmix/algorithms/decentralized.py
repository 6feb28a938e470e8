"""Decentralized methods: no server, peers 0..n-1 mixing over a time-varying graph:
decentralized gradient descent, gradient tracking, push-pull and push-sum.

Their shared parts (the graph sequence, checked and activated mixing, the network-average
output) are :class:`~stochmix.algorithms.DecentralizedMethod`'s (in
:mod:`stochmix.algorithms.decentralized_base`).
"""

from __future__ import annotations

import numpy as np

from .._hooks import call_hook
from .._validate import choice
from ..engine import Block, Equations, RunContext, grad
from ..mixing.sequences import RULES, GraphSequence
from .decentralized_base import DecentralizedMethod, PushSumModels, _step_size

__all__ = [
    "DGD",
    "DecentralizedMethod",
    "GradientTracking",
    "PushPull",
    "PushSum",
    "PushSumModels",
]


class DGD(DecentralizedMethod):
    r"""Decentralized gradient descent, a_k = lr / (k+1)^decay, in one of two forms:

    .. math::

        \text{atc:}\quad x^{k+1} = W_k \big(x^k - a_k \nabla F(x^k)\big),\qquad
        \text{cta:}\quad x^{k+1} = W_k x^k - a_k \nabla F(x^k).

    ``form="cta"`` (combine then adapt) is the recursion of Nedić & Ozdaglar (2009);
    ``form="atc"`` (adapt then combine) is the diffusion form of Chen & Sayed (2012).
    **The default is "atc"**: it is what this class has always computed (changing it would
    change the numbers of every existing configuration and result), and its fixed points
    and stability do not depend on the spectrum of W_k the way CTA's do (CTA needs a step
    below (1 + λ_min(W)) / L). Both stall in an O(lr) neighbourhood of x_star with a fixed
    step; ``decay`` > 0 gives diminishing steps. State: one block x of shape (n, d), row i
    is node i's model. ATC is two phases, the local step (node-local) and the combine
    ``x <- W_k x`` (one sparse product); CTA is one whole-block phase.

    Activation (:mod:`stochmix.engine.model.activated`): W_k pulls, and node activation keeps
    it row-stochastic (``D W + I - D``): DGD runs under any participation process.

    References:
        - A. Nedić and A. Ozdaglar, "Distributed subgradient methods for multi-agent
          optimization", IEEE Transactions on Automatic Control 54(1):48-61, 2009 (CTA).
        - J. Chen and A. H. Sayed, "Diffusion adaptation strategies for distributed optimization
          and learning over networks", IEEE Transactions on Signal Processing 60(8):4289-4305,
          2012 (ATC).
    """

    name = "DGD"
    rounds_repeat = True
    #: row-stochastic W keeps a consensus a fixed point; doubly stochastic W (metropolis)
    #: is needed for the *unweighted* average's optimum
    needs = {"rule": "row"}

    def __init__(
        self,
        lr,
        graphs: GraphSequence,
        rule="metropolis",
        decay=0.0,
        check_mixing=True,
        form="atc",
    ):
        super().__init__(lr, graphs, decay, check_mixing)
        self.rule = choice(rule, "rule", RULES)
        self.form = choice(form, "form", ("atc", "cta"))

    def blocks(self, n_clients: int) -> list[Block]:
        return [Block("x", n_clients, "model")]

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        eq = self.round_equations(participants, ctx)
        (x,) = eq.blocks("x")
        a, w = _step_size(self.lr, self.decay, r), self.mixing(r, self.rule)
        if self.form == "cta":
            x[:] = w @ x - a * grad()
            return [eq.build("combine and descend")]
        x[:] -= a * grad()
        adapt = eq.build("local step")
        x[:] = w @ x
        return [adapt, eq.build("combine")]


class _Tracking(DecentralizedMethod):
    """Blocks x, tracker y and gradient memory g; y and g start at grad F(x0)."""

    def blocks(self, n_clients: int) -> list[Block]:
        return [Block("x", n_clients, "model"), Block("y", n_clients), Block("g", n_clients)]

    @staticmethod
    def refresh(eq: Equations) -> None:
        """The tracker's update without mixing: y <- y + grad F(x) - g, g <- grad F(x)
        (the phase's equations; the caller builds it)."""
        y, g = eq.blocks("y", "g")
        y[:] += grad() - g
        g[:] = grad()

    def start_tracking(self, eq: Equations, r: int) -> list:
        """Round 0's first phase: y^0 = grad F(x^0) and g = grad F(x^0) (y and g start
        at zero) at every node, whatever the activation: the initialisation is not an
        iteration."""
        if r > 0:
            return []
        active, eq.active = eq.active, None
        self.refresh(eq)
        phase = eq.build("initial gradients")
        eq.active = active
        return [phase]


class GradientTracking(_Tracking):
    r"""Gradient tracking on a time-varying graph, W_k doubly stochastic, in one of two
    forms (y^0 = grad F(x^0) in both):

    .. math::

        \text{cta (DIGing):}\quad x^{k+1} = W_k x^k - \alpha y^k,\qquad
        y^{k+1} = W_k y^k + \nabla F(x^{k+1}) - \nabla F(x^k);

        \text{atc (ATC-GT / AugDGM):}\quad x^{k+1} = W_k (x^k - \alpha y^k),\qquad
        y^{k+1} = W_k \big(y^k + \nabla F(x^{k+1}) - \nabla F(x^k)\big).

    **The default is "cta"**, DIGing as Nedić, Olshevsky & Shi (2017) state it on
    time-varying graphs (and what this class has always computed); ``form="atc"`` is Xu et
    al.'s (2015) adapt-then-combine variant, which tolerates larger steps. Both converge
    linearly to x_star with a fixed step. State: blocks x, y and g, each (n, d) (g keeps
    grad F(x^k)). CTA is two whole-block phases, "mix and descend" (x) and "track" (y and
    g, with the n gradients); ATC is "mix and descend" (x from x and y with W_k), "track"
    (node-local) and "mix tracker" (y with W_k).

    Activation (:mod:`stochmix.engine.model.activated`): every W_k pulls. Edge gossip
    (:class:`~stochmix.participation.RandomEdge`, ``RandomMatching``,
    ``OnePeerPermutation``) keeps the doubly stochastic mixing it needs; node activation
    (``D W + I - D``, row-stochastic only) breaks it and is refused unless
    ``check_mixing=False``.

    Under node activation with ``check_mixing=False`` the sum of y no longer tracks the
    sum of the gradients (the pulled y loses mass); :class:`PushPull` with both rules
    doubly stochastic (x pulls, y pushes) keeps it.

    References:
        - A. Nedić, A. Olshevsky and W. Shi, "Achieving geometric convergence for distributed
          optimization over time-varying graphs", SIAM Journal on Optimization
          27(4):2597-2633, 2017 (CTA).
        - J. Xu, S. Zhu, Y. C. Soh and L. Xie, "Augmented distributed gradient methods for
          multi-agent optimization under uncoordinated constant stepsizes", IEEE Conference on
          Decision and Control (CDC), 2055-2060, 2015 (ATC).
    """

    name = "GradientTracking"
    rounds_repeat = True
    needs = {"rule": "doubly"}

    def __init__(self, lr, graphs: GraphSequence, rule="metropolis", check_mixing=True, form="cta"):
        super().__init__(lr, graphs, check_mixing=check_mixing)
        self.rule = choice(rule, "rule", RULES)
        self.form = choice(form, "form", ("atc", "cta"))

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        eq = self.round_equations(participants, ctx)
        first = self.start_tracking(eq, r)
        w = self.mixing(r, self.rule)
        if self.form == "atc":
            return [*first, *_pull_track_push(eq, self.lr, w, w)]
        return [*first, *_descend_then_track(eq, self.lr, w, w, "mix and descend")]


def _pull_track_push(eq: Equations, lr: float, row, column) -> list:
    """x <- R_k (x - lr y); y <- C_k (y + grad F(x) - g), g <- grad F(x): three phases,
    "pull" and "push" whole-block products, "track" node-local."""
    x, y = eq.blocks("x", "y")
    x[:] = row @ (x - lr * y)
    pull = eq.build("pull")
    _Tracking.refresh(eq)
    track = eq.build("track")
    y[:] = column @ y
    return [pull, track, eq.build("push")]


class PushPull(_Tracking):
    r"""Push-pull on a directed time-varying graph (R_k row-, C_k column-stochastic), in
    one of two forms (y^0 = grad F(x^0) in both):

    .. math::

        \text{atc:}\quad x^{k+1} = R_k (x^k - \alpha y^k),\qquad
        y^{k+1} = C_k \big(y^k + \nabla F(x^{k+1}) - \nabla F(x^k)\big);

        \text{ab:}\quad x^{k+1} = R_k x^k - \alpha y^k,\qquad
        y^{k+1} = C_k y^k + \nabla F(x^{k+1}) - \nabla F(x^k).

    **The default is "atc"**, the push-pull form of Pu et al. as the FOCUS paper writes it
    (what this class has always computed); ``form="ab"`` is the AB algorithm of Xin & Khan
    (2018), mixing before the step and tracking after the push. In both the sum of y
    tracks the sum of the gradients, and the iterates reach x_star at a linear rate with a
    fixed step. State: blocks x, y and g, each (n, d). ATC is "pull" (x from x and y with
    R_k, whole blocks), "track" (node-local) and "push" (y with C_k, whole block); AB is
    "pull" (x <- R_k x - lr y) and "track" (y <- C_k y + grad F(x) - g, g <- grad F(x)),
    both whole-block.

    Activation (:mod:`stochmix.engine.model.activated`): x pulls with R_k (``D R + I - D``,
    row-stochastic) and y pushes with C_k (``C D + I - D``, column-stochastic), so node
    activation keeps both: the sum of y stays the sum of the latest gradients, and with
    every node active with positive probability the iterates reach x_star (the
    asynchronous push-pull of Tian, Sun and Scutari, 2020; FOCUS on a star graph).

    References:
        - S. Pu, W. Shi, J. Xu and A. Nedić, "Push-pull gradient methods for distributed
          optimization in networks", IEEE Transactions on Automatic Control 66(1):1-16, 2021
          (published online 2020).
        - R. Xin and U. A. Khan, "A linear algorithm for optimization over directed graphs with
          geometric convergence", IEEE Control Systems Letters 2(3):315-320, 2018 (AB).
    """

    name = "PushPull"
    rounds_repeat = True
    needs = {"row_rule": "row", "column_rule": "column"}

    def __init__(
        self,
        lr,
        graphs: GraphSequence,
        row_rule="row",
        column_rule="column",
        check_mixing=True,
        form="atc",
    ):
        super().__init__(lr, graphs, check_mixing=check_mixing)
        self.row_rule = choice(row_rule, "row_rule", RULES)
        self.column_rule = choice(column_rule, "column_rule", RULES)
        self.form = choice(form, "form", ("atc", "ab"))

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        eq = self.round_equations(participants, ctx)
        first = self.start_tracking(eq, r)
        new_form = "mixing(self, k, rule, direction=None)"
        row = call_hook(self, "mixing", (r, self.row_rule), ("pull",), "0.1.0", new_form)
        column = call_hook(self, "mixing", (r, self.column_rule), ("push",), "0.1.0", new_form)
        if self.form == "atc":
            return [*first, *_pull_track_push(eq, self.lr, row, column)]
        return [*first, *_descend_then_track(eq, self.lr, row, column, "pull")]


def _descend_then_track(eq: Equations, lr: float, row, column, label: str) -> list:
    """x <- R_k x - lr y; then y <- C_k y + grad F(x) - g, g <- grad F(x) (at the new x):
    two whole-block phases."""
    x, y, g = eq.blocks("x", "y", "g")
    x[:] = row @ x - lr * y
    move = eq.build(label)
    y[:] = column @ y + grad() - g
    g[:] = grad()
    return [move, eq.build("track")]


class PushSum(PushSumModels, DecentralizedMethod):
    r"""Subgradient-push (Nedić & Olshevsky 2015) with a weight block ``w`` (ones at the
    start; every column of a row holds the same weight). Iteration k, with C_k
    column-stochastic and a_k = lr / (k+1)^decay:

    .. math::

        u = C_k x,\quad w \leftarrow C_k w,\quad z = u / w,\quad
        x \leftarrow u - a_k \nabla F(z)

    Nodes report the de-biased z. The state keeps the pushed numerator u, so round k
    is "descend with a_{k-1} at z = u / w (from round 1 on), then push with C_k", and z
    after round k is read off the state. A fixed step leaves an O(lr) error. State:
    blocks x and w, each (n, d); "push" mixes both with C_k (whole blocks).

    Activation (:mod:`stochmix.engine.model.activated`): C_k pushes (``C D + I - D`` stays
    column-stochastic): under node activation or Poisson clocks this is asynchronous
    gradient push (Assran and Rabbat, 2021); with lr small, push-sum gossip (Kempe,
    Dobra and Gehrke, 2003).

    References:
        - A. Nedić and A. Olshevsky, "Distributed optimization over time-varying directed
          graphs", IEEE Transactions on Automatic Control 60(3):601-615, 2015.
    """

    name = "PushSum"
    needs = {"rule": "column"}
    rounds_repeat = True

    def __init__(self, lr, graphs: GraphSequence, decay=0.0, rule="column", check_mixing=True):
        super().__init__(lr, graphs, decay, check_mixing)
        self.rule = choice(rule, "rule", RULES)

    def blocks(self, n_clients: int) -> list[Block]:
        return [Block("x", n_clients, "model"), Block("w", n_clients, "ones")]

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        eq = self.round_equations(participants, ctx)
        x, w = eq.blocks("x", "w")
        phases = []
        if r > 0:
            x[:] -= _step_size(self.lr, self.decay, r - 1) * grad()  # at z = x / w
            phases.append(eq.build("descend"))
        c = self.mixing(r, self.rule)
        x[:] = c @ x
        w[:] = c @ w
        return [*phases, eq.build("push")]

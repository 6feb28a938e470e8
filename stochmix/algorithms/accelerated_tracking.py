"""Accelerated gradient tracking: Acc-DNGD-SC, Nesterov's momentum for strongly convex
objectives on top of a gradient tracker (Qu & Li 2020), in :class:`AccDNGD`.

It shares :class:`~stochmix.algorithms.DecentralizedMethod` (graph sequence, checked
mixing, network-average output). Its mixing phases rewrite whole blocks, so the engine
applies W_k to a block as one sparse product; iteration k (round k, computing the
iterates of step k + 1) uses W_k wherever the paper writes W.
"""

from __future__ import annotations

import math

import numpy as np

from .._validate import as_float, choice, show
from ..engine import Block, RunContext, grad
from ..mixing.sequences import RULES, GraphSequence
from .decentralized_base import DecentralizedMethod, require_everyone

__all__ = ["AccDNGD"]


class AccDNGD(DecentralizedMethod):
    r"""Acc-DNGD-SC, the accelerated distributed Nesterov gradient descent of Qu & Li for
    a strongly convex average f = (1/n) sum_i F_i, with a constant step eta (``lr``) and
    momentum alpha. Iteration k, with W_k doubly stochastic:

    .. math::

        x^{k+1} &= W_k y^k - \eta s^k,\\
        v^{k+1} &= (1 - \alpha) W_k v^k + \alpha W_k y^k - \tfrac{\eta}{\alpha} s^k,\\
        y^{k+1} &= \frac{x^{k+1} + \alpha v^{k+1}}{1 + \alpha},\\
        s^{k+1} &= W_k s^k + \nabla F(y^{k+1}) - \nabla F(y^k),

    started at x^0 = v^0 = y^0 = x0 (each node its row of ``x0``) and s^0 = grad F(y^0):
    x is the gradient step from the mixed extrapolated point, v the momentum ("estimate
    sequence") iterate, y the point where gradients are taken, and s tracks the average
    gradient (its node average equals that of grad F(y^k) at every k). With ``W_k = I``
    and one node it is Nesterov's constant-momentum method for strongly convex f (the
    paper's starting point). Nodes report x (the paper's theorem bounds f(x-bar(k)) - f*);
    the output is their average.

    **Parameters.** ``lr`` is eta > 0. The momentum is ``alpha`` in (0, 1], or, given
    ``mu`` (a strong-convexity constant of f) instead, the paper's alpha = sqrt(mu eta)
    (then mu eta <= 1 is required). Give exactly one of ``mu`` and ``alpha``.

    **The paper's tuning.** alpha = sqrt(mu eta) and a constant eta = Theta((mu/L)^(3/7)
    / L), small enough for the network: its bound on eta carries a power of the spectral
    gap 1 - sigma of W (sigma = ||W - 11^T/n||_2 < 1). Then f(x-bar(k)) - f* falls at the
    linear rate 1 - C (mu/L)^(5/7), C > 0 independent of L/mu, so iterations to a fixed
    accuracy grow like (L/mu)^(5/7): faster than gradient tracking's L/mu, not the
    optimal sqrt(L/mu). (With eta of order 1/L, outside the theorem, the growth measured
    on quadratics is about sqrt(L/mu): tests/algorithms/test_acc_dngd.py.)
    The defaults: ``rule="metropolis"`` (doubly stochastic W), ``check_mixing=True``.

    State: blocks ``y`` (the model block: gradients are taken there), ``x``, ``v``,
    ``s`` (the tracker) and ``g`` (grad F(y^k), the tracker's memory), each (n, d), row i
    node i's. One iteration is three whole-block phases: "mix" (x and v from W_k y, W_k v
    and s: one sparse product per mixed block), "extrapolate" (y from x and v, no
    communication) and "track" (s <- W_k s + grad F(y) - g and g <- grad F(y), with the n
    gradients at the new y); round 0 first takes "initial gradients" (s = g = grad F(y^0)
    at every node). So one iteration costs one gradient per node (n in all, plus n at the
    start) and one exchange of three vectors per node (y, v and s, each mixed by W_k;
    W_k y serves both x and v).

    Participation: every node in every iteration (``participation.Full(n)``); any other
    process is refused before the run (the paper's recursion is synchronous: a node
    that skips an iteration leaves its momentum and extrapolated point out of step).
    ``needs``: ``rule`` doubly stochastic (the paper takes W symmetric and doubly
    stochastic with sigma < 1; symmetry is not checked). The paper states a fixed W;
    a time-varying sequence runs W_k at step k.

    Args:
        lr: eta > 0, the step.
        graphs: the :class:`~stochmix.mixing.GraphSequence` of W_k.
        mu: a strong-convexity constant of f (> 0): alpha = sqrt(mu * lr). Or None.
        alpha: the momentum in (0, 1]. Or None.
        rule: weight rule of W_k (doubly stochastic).
        check_mixing: check every W_k (``False`` runs broken mixing anyway).

    Raises:
        ValueError: neither or both of ``mu`` and ``alpha``, a value out of range, or
            ``mu * lr > 1``; participation other than Full(n) (at :func:`stochmix.run`).

    References:
        - G. Qu and N. Li, "Accelerated distributed Nesterov gradient descent", IEEE
          Transactions on Automatic Control 65(6):2566-2581, 2020 (arXiv:1705.07176):
          the Acc-DNGD-SC recursion and its strongly convex rate theorem.
    """

    name = "AccDNGD"
    rounds_repeat = True
    needs = {"rule": "doubly"}
    #: gradients are taken at the extrapolated points y; nodes report x (:meth:`node_models`)
    model_block = "y"
    reported_block = "x"  # what each node reports (node_models)

    def __init__(
        self,
        lr,
        graphs: GraphSequence,
        mu=None,
        alpha=None,
        rule="metropolis",
        check_mixing=True,
    ):
        super().__init__(lr, graphs, check_mixing=check_mixing)
        if (mu is None) == (alpha is None):
            raise ValueError(
                "AccDNGD needs exactly one of mu (alpha = sqrt(mu * lr)) and alpha, got "
                f"mu={show(mu)} and alpha={show(alpha)}"
            )
        self.mu = None if mu is None else as_float(mu, "mu", positive=True)
        if self.mu is not None:
            if self.mu * self.lr > 1.0:
                raise ValueError(
                    f"mu * lr must be <= 1 (alpha = sqrt(mu * lr) <= 1), got mu={self.mu!r} "
                    f"and lr={self.lr!r}"
                )
            alpha = math.sqrt(self.mu * self.lr)
        self.alpha = as_float(alpha, "alpha", positive=True, maximum=1.0)
        self.rule = choice(rule, "rule", RULES)

    def check_participation(self, participation) -> None:
        reason = (
            "a synchronous recursion: every node moves its momentum v and extrapolated "
            "point y in every iteration"
        )
        require_everyone(participation, self.name, reason)
        super().check_participation(participation)

    def blocks(self, n_clients: int) -> list[Block]:
        return [
            Block("y", n_clients, "model"),
            Block("x", n_clients, "model"),
            Block("v", n_clients, "model"),
            Block("s", n_clients),
            Block("g", n_clients),
        ]

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        eq = self.round_equations(participants, ctx)
        y, x, v, s, g = eq.blocks("y", "x", "v", "s", "g")
        eta, a, w = self.lr, self.alpha, self.mixing(r, self.rule)
        first = []
        if r == 0:  # s^0 = grad F(y^0), kept in g for the tracker's difference
            s[:] = grad()
            g[:] = grad()
            first.append(eq.build("initial gradients"))
        x[:] = w @ y - eta * s
        v[:] = (1.0 - a) * (w @ v) + a * (w @ y) - (eta / a) * s
        mix = eq.build("mix")
        y[:] = (x + a * v) / (1.0 + a)
        extrapolate = eq.build("extrapolate")
        s[:] = w @ s + grad() - g
        g[:] = grad()
        return [*first, mix, extrapolate, eq.build("track")]


"""Gradient tracking with local steps: K-GT."""

from __future__ import annotations

import numpy as np

from .._validate import as_float, as_int, choice
from ..engine import Block, RunContext, grad
from ..mixing.sequences import RULES, GraphSequence
from .decentralized_base import DecentralizedMethod

__all__ = [
    "KGT",
]


class KGT(DecentralizedMethod):
    r"""K-GT: K local steps between communications, with a correction c_i that tracks
    the gap between node i's gradient and the network's, held fixed during the local steps.

    Round t (one communication), z_i^{t,0} = x_i^t:

    .. math::

        z_i^{t,\tau+1} = z_i^{t,\tau} - \eta_c \big(\nabla f_i(z_i^{t,\tau}) + c_i^t\big),
            \quad \tau = 0..K-1;\qquad
        \Delta^t = x^t - z^{t,K},

        c^{t+1} = c^t + \tfrac{1}{K \eta_c} (W_t - I) \Delta^t,\qquad
        x^{t+1} = W_t \big(x^t - \eta_s \Delta^t\big).

    With W doubly stochastic, sum_i c_i stays 0 (c^0 = 0 here), and at a fixed point every
    node's local steps stop moving: c_i = -grad f_i(x_star), so the iterates reach the exact
    optimum with fixed steps despite the local steps (where local DGD keeps a bias that
    grows with K and the heterogeneity). With K = 1 and eta_s = 1 it is gradient tracking
    written in the correction c = y - grad F(x).

    State: blocks ``x`` (the iterates, reported), ``z`` (the local iterates, where the
    gradients are taken) and ``c`` (the corrections), each (n, d). A round is "start"
    (z <- x), K node-local steps and one whole-block "communicate" phase.

    Args:
        lr: eta_c, the local step size. local_steps: K. server_lr: eta_s (1 by default).
        graphs: the graph sequence; rule: its weight rule (doubly stochastic needed).

    Activation (:mod:`stochmix.engine.model.activated`): every W_k pulls. Edge gossip
    (:class:`~stochmix.participation.RandomEdge`, ``RandomMatching``,
    ``OnePeerPermutation``) keeps the doubly stochastic mixing it needs; node activation
    (``D W + I - D``, row-stochastic only) breaks it and is refused unless
    ``check_mixing=False``.

    References:
        - Y. Liu, T. Lin, A. Koloskova and S. U. Stich, "Decentralized gradient tracking with
          local steps", Optimization Methods and Software, 2024 (arXiv:2301.01313, 2023).
    """

    name = "K-GT"
    rounds_repeat = True
    needs = {"rule": "doubly"}
    model_block = "z"  # gradients are taken at the local iterates
    reported_block = "x"  # what each node reports (node_models)

    def __init__(
        self,
        lr,
        graphs: GraphSequence,
        local_steps=1,
        server_lr=1.0,
        rule="metropolis",
        check_mixing=True,
    ):
        super().__init__(lr, graphs, check_mixing=check_mixing)
        self.local_steps = as_int(local_steps, "local_steps", minimum=1)
        self.server_lr = as_float(server_lr, "server_lr", positive=True)
        self.rule = choice(rule, "rule", RULES)

    def blocks(self, n_clients: int) -> list[Block]:
        return [
            Block("x", n_clients, "model"),
            Block("z", n_clients, "model"),
            Block("c", n_clients),
        ]

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        eq = self.round_equations(participants, ctx)
        x, z, c = eq.blocks("x", "z", "c")
        lr, s, eta = self.lr, 1.0 / (self.local_steps * self.lr), self.server_lr
        z[:] = x
        phases = [eq.build("start")]
        for _ in range(self.local_steps):
            z[:] -= lr * (grad() + c)  # gradients at the local iterates z
            phases.append(eq.build("local step"))
        w = self.mixing(r, self.rule)
        c[:] += s * (w @ x - w @ z - x + z)  # c + s (W - I)(x - z)
        if eta == 1.0:
            x[:] = w @ z
        else:
            x[:] = w @ ((1.0 - eta) * x + eta * z)  # W ((1 - eta) x + eta z)
        return [*phases, eq.build("communicate")]

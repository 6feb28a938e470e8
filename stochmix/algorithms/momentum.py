"""FedAvgM: FedAvg whose server keeps a momentum of the pseudo-gradients (Hsu et al. 2019)."""

from __future__ import annotations

import numpy as np

from .._validate import as_bool, as_float
from ..engine import Block, RunContext
from ..engine.model.equations import Equations, dot
from .aggregation import round_weights
from .fedavg import FedAvg
from .local_training import pull_and_train

__all__ = [
    "FedAvgM",
]


class FedAvgM(FedAvg):
    r"""FedAvg with server momentum over blocks ``x`` (row 0 server, row i+1 client i)
    and ``v`` (one row: the server's momentum, zero at the start).

    One round with participants S and weights q (after the FedAvg pull and K local
    steps), the pseudo-gradient being :math:`\Delta = \sum_{i\in S} q_i (x_0 - x_i)`:

    .. math::

        v &\leftarrow \beta\, v + \textstyle\sum_{i\in S} q_i\,(x_0 - x_i)\\
        x_0 &\leftarrow x_0 - \eta\, v

    (two phases: the second reads the new v). beta = 0 is FedAvg with server step eta;
    the effective server step of a steady pseudo-gradient is eta / (1 - beta).

    A round nobody joins has no pseudo-gradient. With ``skip_empty_rounds=True`` (the
    default, as in the server optimizers of the paper's setting, where a round always
    has participants and the optimizer steps only on an aggregate) it changes nothing;
    with False the momentum carries on: v <- beta v, x_0 <- x_0 - eta v.

    Args:
        lr: local step size gamma.
        local_steps: K, the local steps each participant takes in a round.
        beta: server momentum, in [0, 1).
        server_lr: eta.
        weights: "uniform" (``q_i = 1/|S|``, the paper's equal-size clients), "unbiased"
            (1/(N p_i)) or "fedau", as in :class:`FedAvg`.
        probabilities: p_i for "unbiased".
        cutoff: FedAU's cutoff ("fedau" only).
        timing: FedAU's timing ("fedau" only), as in :class:`FedAvg`.
        skip_empty_rounds: whether a round nobody joins leaves the whole state as it was.

    Shapes: ``x`` (N + 1, d), ``v`` (1, d).

    References:
        - T.-M. H. Hsu, H. Qi and M. Brown (2019), "Measuring the effects of non-identical data
          distribution for federated visual classification", arXiv:1909.06335 (FedAvgM).
    """

    name = "FedAvgM"

    def __init__(
        self,
        lr,
        local_steps=1,
        beta=0.9,
        server_lr=1.0,
        weights="uniform",
        probabilities=None,
        cutoff=100_000,
        skip_empty_rounds=True,
        timing="authors",
    ):
        super().__init__(lr, local_steps, server_lr, weights, probabilities, cutoff, timing)
        self.name = "FedAvgM"
        self.beta = as_float(beta, "beta", nonnegative=True)
        if self.beta >= 1.0:
            raise ValueError(f"beta must be in [0, 1), got {self.beta!r}")
        self.skip_empty_rounds = as_bool(skip_empty_rounds, "skip_empty_rounds")

    def blocks(self, n_clients: int) -> list[Block]:
        return [Block("x", n_clients + 1, "model"), Block("v", 1)]

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        S = participants
        if S.size == 0 and self.skip_empty_rounds:
            return []
        phases = pull_and_train(S, ctx, self.lr, self.round_steps(r, S, ctx)) if S.size else []
        S, _ = self.uploads(S, ctx)  # the server sees the uploads that arrived
        if S.size == 0 and self.skip_empty_rounds:  # as a round nobody joined
            return phases
        phases += self.sent(S, ctx)
        q = round_weights(self.weights, r, S, ctx, self._inverse)
        eq = Equations(ctx)
        x, v = eq.blocks("x", "v")
        if S.size:
            v.server = self.beta * v.server + dot(q, x.server - x[S])  # the pseudo-gradient
        else:
            v.server = self.beta * v.server
        momentum = eq.build("server momentum")
        x.server -= self.server_lr * v.server
        return phases + [momentum, eq.build("server step")]

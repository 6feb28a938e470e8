"""Generalized FedAvg with amplified updates (Wang & Ji 2022, Algorithm 1)."""

from __future__ import annotations

import numpy as np

from .._validate import as_float, as_int
from ..engine import Block, Equations, RunContext
from .fedavg import _SIZE_FREE, FedAvg

__all__ = [
    "AmplifiedFedAvg",
]


class AmplifiedFedAvg(FedAvg):
    r"""FedAvg whose accumulated update over every ``period`` rounds is amplified.

    Blocks: ``x`` as in FedAvg and an anchor ``a`` (one row, x_0 at the start of the
    current interval). Rounds are FedAvg rounds (server_lr 1); after rounds
    P-1, 2P-1, ... (counting from 0)

    .. math::

        \begin{bmatrix} x_0 \\ a \end{bmatrix} \leftarrow
        \begin{bmatrix} \eta & 1-\eta \\ \eta & 1-\eta \end{bmatrix}
        \begin{bmatrix} x_0 \\ a \end{bmatrix},

    i.e. x_0 <- a + eta (x_0 - a) and the next interval starts there. eta = 1 is plain
    FedAvg; eta < 1 damps instead of amplifying.

    Args:
        lr: local step size gamma.
        local_steps: K, the local steps each participant takes in a round.
        amplification: eta > 0.
        period: P, rounds per interval.
        weights: "uniform", "unbiased" or "fedau" (as in :class:`FedAvg`).
        probabilities: p_i for "unbiased".
        cutoff, timing: FedAU's, for "fedau" (as in :class:`FedAvg`).

    References:
        - S. Wang and M. Ji (2022), "A unified analysis of federated learning with arbitrary
          client participation", NeurIPS 2022 (Advances in Neural Information Processing
          Systems 35), Algorithm 1.
    """

    name = "AmplifiedFedAvg"

    def __init__(
        self,
        lr,
        local_steps=1,
        amplification=1.0,
        period=1,
        weights="uniform",
        probabilities=None,
        cutoff=100_000,
        timing="authors",
    ):
        super().__init__(lr, local_steps, 1.0, weights, probabilities, cutoff, timing)
        self.name = "AmplifiedFedAvg"
        self.amplification = as_float(amplification, "amplification", positive=True)
        self.period = as_int(period, "period", minimum=1)

    def blocks(self, n_clients: int) -> list[Block]:
        return super().blocks(n_clients) + [Block("a", 1, "model")]

    def phase_key(self, r: int, participants: np.ndarray):
        key = super().phase_key(r, participants)
        return None if key is None else (key, (r + 1) % self.period == 0)

    def template_key(self, r: int, participants: np.ndarray):
        key = super().template_key(r, participants)
        return None if key is None else (key, (r + 1) % self.period == 0)

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        phases = super().round_phases(r, participants, ctx)
        if (r + 1) % self.period == 0:
            eta = self.amplification
            eq = Equations(ctx)
            x, a = eq.blocks("x", "a")
            x.server = eta * x.server + (1.0 - eta) * a.server  # x_0 <- a + eta (x_0 - a)
            a.server = eta * x.server + (1.0 - eta) * a.server  # the next interval starts there
            phases.append(eq.build("amplify"))
        return phases


_SIZE_FREE.add(AmplifiedFedAvg)  # FedAvg's round and an amplification free of |S|

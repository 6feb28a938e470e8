"""FedNova: FedAvg whose aggregation normalizes each update by the client's local steps."""

from __future__ import annotations

import numpy as np

from ..engine import Equations, RunContext
from .aggregation import averaged, round_weights
from .fedavg import FedAvg

__all__ = [
    "FedNova",
]


class FedNova(FedAvg):
    r"""Normalized averaging over one model block ``x`` (row 0 server, row i+1 client i).

    One round with participants S, weights q (FedAvg's rules) and local steps K_i:

    .. math::

        x &\leftarrow A_S\,x, \qquad
        x \leftarrow x - \gamma\,D_{S_t}\,\nabla F(x) \quad (t = 0..K-1,\
            S_t = \{i \in S: K_i > t\})\\
        x_0 &\leftarrow x_0 + \eta\,\tau_{\mathrm{eff}} \sum_{i\in S} \frac{q_i}{K_i}\,
            (x_i - x_0), \qquad \tau_{\mathrm{eff}} = \sum_{i \in S} q_i K_i

    Each client's update is divided by its own number of steps (the normalized update
    d_i = (x_0 - x_i) / K_i: with plain local SGD, a_i = K_i in the paper's notation) and
    the server moves tau_eff times their weighted mean. FedAvg weighs client i's update by
    q_i alone, so under heterogeneous K_i it minimises the surrogate objective
    sum_i q_i K_i f_i / sum_i q_i K_i; FedNova's fixed point is that of the true objective
    sum_i q_i f_i (up to O(gamma)). With every K_i equal it is FedAvg (to rounding).

    Args: those of :class:`FedAvg` (``local_steps`` an int, an array of K_i or a
    :class:`~stochmix.algorithms.RandomSteps`).

    References:
        - J. Wang, Q. Liu, H. Liang, G. Joshi and H. V. Poor (2020), "Tackling the objective
          inconsistency problem in heterogeneous federated optimization", NeurIPS 2020
          (arXiv:2007.07481): FedNova with local SGD, a_i = K_i.
    """

    name = "FedNova"

    def __init__(self, lr, local_steps=1, server_lr=1.0, weights="uniform", probabilities=None,
                 cutoff=100_000, timing="authors"):  # fmt: skip
        super().__init__(lr, local_steps, server_lr, weights, probabilities, cutoff, timing)
        if weights == "fedau":
            self.name = "FedNova"

    def template_key(self, r: int, participants: np.ndarray):
        # with uneven steps its weights q_i / K_i differ per client: no template
        return None if self.uneven_steps else super().template_key(r, participants)

    def aggregate(self, r: int, participants: np.ndarray, ctx: RunContext, steps=None):
        """x_0 <- x_0 + eta tau_eff sum_S (q_i / K_i) (x_i - x_0)."""
        q = round_weights(self.weights, r, participants, ctx, self._inverse)
        if steps is None or isinstance(steps, (int, np.integer)):
            scaled = float(q.sum()) * q  # tau_eff / K = sum q
        else:
            k_i = np.asarray(steps, dtype=float)
            scaled = float(q @ k_i) * q / k_i
        eq = Equations(ctx)
        x = eq.block("x")
        if participants.size:  # else the server keeps its model
            x.server = averaged(x, participants, scaled, self.server_lr)
        return eq.build("average")

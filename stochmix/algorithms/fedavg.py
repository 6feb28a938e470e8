"""FedAvg with a server learning rate and a choice of aggregation weights."""

from __future__ import annotations

import numpy as np

from .._hooks import call_hook
from .._validate import as_float, choice
from ..engine import Block, Equations, Method, RunContext
from ..engine.model.round_scalars import RoundArray
from ..participation import uniform_weights
from .aggregation import WEIGHT_RULES, InverseProbabilities, averaged, round_weights
from .local_training import LocalTraining, pull_and_train

__all__ = [
    "FedAvg",
]


class FedAvg(LocalTraining, Method):
    r"""Federated averaging over one model block ``x`` (row 0 server, row i+1 client i).

    One round with participants S and weights q:

    .. math::

        x &\leftarrow A_S\,x \quad\text{(participants pull the server model)}\\
        x &\leftarrow x - \gamma\,D_{S_t}\,\nabla F(x) \quad\text{(step $t = 0..K-1$,
            $S_t = \{i \in S: K_i > t\}$)}\\
        x_0 &\leftarrow x_0 + \eta \sum_{i\in S} q_i\,(x_i - x_0)

    Weights: ``"uniform"`` q_i = ``1/|S|``; ``"unbiased"`` q_i = 1/(N p_i) with p the given
    ``probabilities`` or else the participation process's marginals; ``"fedau"``
    q_i = omega_i / N with omega_i FedAU's online estimate of 1/p_i (the mean interval
    between participations, intervals capped at ``cutoff``). A round with no participant
    leaves the server as it was.

    FedAU's ``timing``: ``"authors"`` (default, the authors' code) weighs a participation
    with the intervals recorded before the round (1 until the first); ``"inclusive"``
    also counts the interval that this participation closes (see
    :class:`~stochmix.participation.FedAUEstimator`).

    Args:
        lr: local step size gamma.
        local_steps: K, the local steps each participant takes in a round: an int, an
            array of one int per client (K_i) or a
            :class:`~stochmix.algorithms.RandomSteps` (drawn per round); see
            :mod:`stochmix.algorithms.local_steps`.
        server_lr: eta.
        weights: aggregation rule.
        probabilities: p_i for ``"unbiased"`` (optional).
        cutoff: FedAU's longest recorded interval (``"fedau"`` only); the default
            100 000 is the authors' code default.
        timing: ``"authors"`` or ``"inclusive"`` (``"fedau"`` only).

    References:
        - H. B. McMahan, E. Moore, D. Ramage, S. Hampson and B. Agüera y Arcas (2017),
          "Communication-efficient learning of deep networks from decentralized data",
          AISTATS 2017, PMLR 54.
        - S. Wang and M. Ji (2024), "A lightweight method for tackling unknown participation
          statistics in federated averaging", ICLR 2024 (arXiv:2306.03401): the FedAU weights.
    """

    name = "FedAvg"

    def __init__(
        self,
        lr,
        local_steps=1,
        server_lr=1.0,
        weights="uniform",
        probabilities=None,
        cutoff=100_000,
        timing="authors",
    ):
        self.lr = as_float(lr, "lr", positive=True)
        self._set_local_steps(local_steps)
        self.server_lr = as_float(server_lr, "server_lr", positive=True)
        self.weights = choice(weights, "weights", WEIGHT_RULES)
        self.probabilities = probabilities
        self._inverse = InverseProbabilities(probabilities, cutoff, timing=timing)  # checks
        if weights == "fedau":
            self._inverse = InverseProbabilities("fedau", cutoff, timing=timing)
            self.name = "FedAU"

    def blocks(self, n_clients: int) -> list[Block]:
        return [Block("x", n_clients + 1, "model")]

    def phase_key(self, r: int, participants: np.ndarray):
        return None if self.weights == "fedau" else self.steps_key(participants.tobytes())

    def template_key(self, r: int, participants: np.ndarray):
        # uniform weights: one template for rounds of every size (the average's
        # coefficients are round scalars that read the participants); a subclass keeps
        # the key by |S| (any of its hooks, round_steps, uploads, sent, aggregate, may read
        # |S| without a rule)
        # FedAvg's unbiased weights 1 / (N p_i) (FedAU: omega_i / N, its estimates): a
        # RoundArray whose rule reads the participants, the server's coefficient a round
        # scalar: one template too (a subclass's aggregation may weigh without rules)
        if self.weights != "uniform" and type(self) is FedAvg:
            return self.weights
        if self.weights != "uniform":
            return None
        return "uniform" if type(self) in _SIZE_FREE else participants.size

    def start(self, ctx: RunContext) -> None:
        if self.weights != "uniform":
            self._inverse.start(ctx, self.name)

    def aggregate(self, r: int, participants: np.ndarray, ctx: RunContext, steps=None):
        """The averaging phase of round r: x_0 <- x_0 + eta sum_S q_i (x_i - x_0)
        (``steps``: the round's local steps, which FedAvg's weights do not read)."""
        q = round_weights(self.weights, r, participants, ctx, self._inverse)
        eq = Equations(ctx)
        x = eq.block("x")
        if participants.size:  # else the server keeps its model
            rule = uniform_weights if self.weights == "uniform" else None
            if self.weights != "uniform":  # 1 / (N p_i), or FedAU's omega_i / N
                inverse, n = self._inverse, ctx.n_clients
                q = RoundArray(q, lambda k, clients: inverse.of(k, clients, ctx) / n)
            x.server = averaged(x, participants, q, self.server_lr, rule)
        return eq.build("average")

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        if participants.size == 0:
            return []
        steps = self.round_steps(r, participants, ctx)
        received, sent = self.uploads(participants, ctx, steps)
        return [
            *pull_and_train(participants, ctx, self.lr, steps),
            *self.sent(received, ctx),
            call_hook(
                self, "aggregate", (r, received, ctx), (sent,), "0.1.0",
                "aggregate(self, r, participants, ctx, steps=None)",
            ),
        ]  # fmt: skip


#: The classes whose rounds write every coefficient that depends on |S| as a round scalar
#: (one template for rounds of every size); built-in subclasses that keep it add
#: themselves. A user's subclass is not in it: its hooks may read |S| without a rule.
_SIZE_FREE: set = {FedAvg}

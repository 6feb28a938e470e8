"""Methods that keep every client's latest update: FedStale, FedVARP and MIFA."""

from __future__ import annotations

import numpy as np

from .._validate import as_bool, as_float
from ..engine import Block, Method, RunContext
from ..engine.model.equations import Equations, dot, total
from ..engine.model.round_scalars import RoundArray, RoundScalar
from .aggregation import InverseProbabilities
from .local_training import LocalTraining, pull_and_train

__all__ = [
    "FedStale",
    "FedVARP",
    "MIFA",
]


class FedStale(LocalTraining, Method):
    r"""FedAvg mixing fresh and stale client updates (Rodio & Neglia 2024, Algorithm 2).

    Blocks: ``x`` (server + clients), ``h`` (N rows: the last update Delta_i the server
    received from client i, zero at the start) and ``hsum`` (one row: sum_i h_i, kept so
    that a round costs ``O(|S|)``). After the FedAvg pull and K local steps, with
    Delta_i = x_0 - x_i, one simultaneous block map:

    .. math::

        x_0 &\leftarrow x_0 - \eta\Big[\tfrac{\beta}{N}\textstyle\sum_i h_i
              + \tfrac1N \sum_{i\in S} (\Delta_i - \beta h_i)/p_i\Big]\\
        h_i &\leftarrow \Delta_i \quad (i \in S), \qquad
        \textstyle\sum h \leftarrow \sum h + \sum_{i\in S}(\Delta_i - h_i)

    that is ``[x; h] <- [[Mxx, Mxh], [Mhx, Mhh]] [x; h]`` with Mxx rows summing to one
    and Mhx rows summing to zero. beta = 0 is unbiased FedAvg (q_i = 1/(N p_i)),
    beta = 1 is FedVARP.

    A round nobody joins: the map above would still move the server along the stale
    updates (x_0 <- x_0 - eta beta/N sum_i h_i); the FedStale authors' aggregator skips
    such a round instead, and so does this class by default (``skip_empty_rounds=True``:
    the whole state stays as it was). False applies the map.

    Args:
        lr: local step size. local_steps: K. beta: weight of the stale updates, in [0, 1].
        server_lr: eta.
        probabilities: p_i (array), None for the participation process's marginals, or
            "fedau" to learn 1/p_i online with FedAU's estimator (``cutoff``, ``timing``:
            see :class:`~stochmix.participation.FedAUEstimator`).
        skip_empty_rounds: whether a round nobody joins leaves the whole state as it was.

    References:
        - A. Rodio and G. Neglia (2024), "FedStale: leveraging stale updates in federated
          learning", ECAI 2024 (27th European Conference on Artificial Intelligence),
          Algorithm 2.
        - S. Wang and M. Ji (2024), "A lightweight method for tackling unknown participation
          statistics in federated averaging", ICLR 2024 (arXiv:2306.03401): the FedAU weights.
    """

    name = "FedStale"

    def __init__(
        self,
        lr,
        local_steps=1,
        beta=0.5,
        server_lr=1.0,
        probabilities=None,
        cutoff=100_000,
        skip_empty_rounds=True,
        timing="authors",
    ):
        self.lr = as_float(lr, "lr", positive=True)
        self._set_local_steps(local_steps)
        self.beta = as_float(beta, "beta", nonnegative=True, maximum=1.0)
        self.server_lr = as_float(server_lr, "server_lr", positive=True)
        self.probabilities = probabilities
        self.skip_empty_rounds = as_bool(skip_empty_rounds, "skip_empty_rounds")
        self._inverse = InverseProbabilities(probabilities, cutoff, timing=timing)

    def blocks(self, n_clients: int) -> list[Block]:
        return [
            Block("x", n_clients + 1, "model"),
            Block("h", n_clients, first_node=1),
            Block("hsum", 1),
        ]

    def phase_key(self, r: int, participants: np.ndarray):
        return None if self._inverse.learned else self.steps_key(participants.tobytes())

    def template_key(self, r: int, participants: np.ndarray):
        # the weights eta / (N p_i), the server's own coefficient and |S| are bound by
        # rules (a RoundArray and round scalars): one template for rounds of every size;
        # a subclass keeps the key by |S| (its hooks may read |S| without a rule); one with
        # its own 1/p_i (which may change with the round, or count what it is asked) gives
        # none: every round built in full
        if type(self).inverse_probabilities not in _RULED:
            return None
        return "stale" if type(self) in _SIZE_FREE else participants.size

    def start(self, ctx: RunContext) -> None:
        self._inverse.start(ctx, self.name)

    def inverse_probabilities(self, r: int, participants: np.ndarray, ctx: RunContext):
        """1/p_i of the participants of round r."""
        return self._inverse.of(r, participants, ctx)

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        n, S = ctx.n_clients, participants
        if S.size == 0 and self.skip_empty_rounds:
            return []
        eta, beta = self.server_lr, self.beta
        phases = pull_and_train(S, ctx, self.lr, self.round_steps(r, S, ctx)) if S.size else []
        S, _ = self.uploads(S, ctx)  # the server sees the uploads that arrived
        if S.size == 0 and self.skip_empty_rounds:  # as a round nobody joined
            return phases
        phases += self.sent(S, ctx)

        def weights(k: int, clients: np.ndarray) -> np.ndarray:  # eta / (N p_i)
            return eta / n * self.inverse_probabilities(k, clients, ctx)

        w = weights(r, S)
        if type(self).inverse_probabilities in _RULED:  # (FedAU's: the estimates of round r)
            w = RoundArray(w, weights)  # (a subclass's own 1/p_i may change when read)
        size = RoundScalar(float(S.size), lambda k, clients: float(clients.size), True)
        own = 1.0 - w.sum()  # (a round scalar for a RoundArray w)
        eq = Equations(ctx, "stale update")
        x, h, hsum = eq.blocks("x", "h", "hsum")
        # with Delta_i = x_0 - x_i, every line reading the state before the phase:
        # x_0 <- x_0 - eta [beta/N sum_i h_i + 1/N sum_S (Delta_i - beta h_i) / p_i]
        #      = (1 - sum_S w_i) x_0 + sum_S w_i (x_i + beta h_i) - eta beta / N sum_i h_i
        x.server = own * x.server + dot(w, x[S] + beta * h[S]) - eta * beta / n * hsum.server
        # h_i <- Delta_i for i in S, and the running sum of h follows
        h[S] = x.server - x[S]
        hsum.server += size * x.server - total(x[S] + h[S])
        return phases + [eq.build()]


class FedVARP(FedStale):
    """FedStale with beta = 1: every stale update counts in full (unbiased FedVARP).

    This is the unbiased form that Rodio & Neglia state and run, so it takes their
    default: a round nobody joins changes nothing (``skip_empty_rounds=True``; in
    FedVARP's own paper a fixed number of clients is sampled, so no round is empty).

    References:
        - D. Jhunjhunwala, P. Sharma, A. Nagarkatti and G. Joshi (2022), "FedVARP: tackling the
          variance due to partial client participation in federated learning", UAI 2022
          (38th Conference on Uncertainty in Artificial Intelligence), PMLR 180.
        - A. Rodio and G. Neglia (2024), "FedStale: leveraging stale updates in federated
          learning", ECAI 2024: the unbiased form U-FedVARP, eq. (7).
    """

    name = "FedVARP"

    def __init__(
        self,
        lr,
        local_steps=1,
        server_lr=1.0,
        probabilities=None,
        cutoff=100_000,
        skip_empty_rounds=True,
        timing="authors",
    ):
        super().__init__(
            lr, local_steps, 1.0, server_lr, probabilities, cutoff, skip_empty_rounds, timing
        )


class MIFA(FedStale):
    r"""MIFA (Gu et al. 2021): the server steps along the plain average of the latest
    update of every client, x_0 <- x_0 - eta (1/N) sum_i h_i, after refreshing h_i for the
    participants. This is FedStale with beta = 1 and every p_i read as 1.

    Gu et al.'s server updates in every round with the stored updates, whoever is
    available, so by default a round nobody joins still moves the server
    (``skip_empty_rounds=False``); True leaves the state as it was.

    References:
        - X. Gu, K. Huang, J. Zhang and L. Huang (2021), "Fast federated learning in the presence
          of arbitrary device unavailability", NeurIPS 2021 (Advances in Neural Information
          Processing Systems 34).
    """

    name = "MIFA"

    def __init__(self, lr, local_steps=1, server_lr=1.0, skip_empty_rounds=False):
        super().__init__(lr, local_steps, 1.0, server_lr, None, skip_empty_rounds=skip_empty_rounds)

    def start(self, ctx: RunContext) -> None:
        pass

    def inverse_probabilities(self, r, participants, ctx):
        return np.ones(participants.size)


#: The classes whose rounds bind every coefficient that depends on who participates, or
#: on how many, by a rule (one template for rounds of every size); a user's subclass is
#: not in it: its hooks may read |S| without a rule.
_SIZE_FREE: set = {FedStale, FedVARP, MIFA}

#: the ``inverse_probabilities`` whose values a round template may ask again (a subclass's
#: own may count what it is asked: its rounds are built in full when its weights differ)
_RULED = {FedStale.inverse_probabilities, MIFA.inverse_probabilities}

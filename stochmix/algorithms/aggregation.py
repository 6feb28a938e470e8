"""Aggregation weights and participation probabilities of a round, by rule name."""

from __future__ import annotations

import numpy as np

from .._validate import as_int, as_nonnegative, as_probabilities, choice
from ..engine import RunContext
from ..engine.model.equations import BlockRows, Expression, dot, total
from ..engine.model.round_scalars import RoundArray, RoundScalar
from ..participation import FedAUEstimator, uniform_weights
from ..participation.estimators import FEDAU_TIMINGS

__all__ = [
    "InverseProbabilities",
    "WEIGHT_RULES",
    "averaged",
    "round_weights",
]

WEIGHT_RULES = ("uniform", "unbiased", "fedau")


def resolve_probabilities(probabilities, ctx: RunContext, who: str) -> np.ndarray:
    """The p_i a method was given, else the participation process's known marginals."""
    if probabilities is not None:
        return as_probabilities(probabilities, "probabilities", ctx.n_clients)
    if ctx.probabilities is None:
        raise ValueError(
            f"{who} needs participation probabilities: the participation process does not "
            "know its marginals, so pass probabilities= (an array, or 'fedau' to learn them)"
        )
    return as_probabilities(ctx.probabilities, "participation.probabilities", ctx.n_clients)


class InverseProbabilities:
    """Where a method's 1/p_i come from: fixed p_i (given or the process's marginals) or
    FedAU's online estimate omega_i (``probabilities="fedau"``, with ``cutoff`` and
    ``timing`` as in :class:`~stochmix.participation.FedAUEstimator`: by default the
    authors' timing, intervals recorded before the round and 1 until the first, and
    their cutoff 100 000; ``timing="inclusive"`` also counts the interval the
    participation closes).

    :meth:`start` prepares one run in ``ctx.memory``; :meth:`of` gives 1/p_i for the
    participants of round r.

    References:
        - S. Wang and M. Ji (2024), "A lightweight method for tackling unknown participation
          statistics in federated averaging", ICLR 2024 (arXiv:2306.03401): the FedAU weights.
    """

    def __init__(
        self,
        probabilities,
        cutoff: int = 100_000,
        key: str = "inverse_p",
        timing: str = "authors",
    ):
        if isinstance(probabilities, str):
            choice(probabilities, "probabilities", ("fedau",))
        elif probabilities is not None:  # p_i: their number is checked against N at the run
            probabilities = as_probabilities(probabilities, "probabilities")
        self.probabilities = probabilities
        self.cutoff = as_int(cutoff, "cutoff", minimum=1)
        self.timing = choice(timing, "timing", FEDAU_TIMINGS)
        self.key = key

    @property
    def learned(self) -> bool:
        return isinstance(self.probabilities, str)

    def start(self, ctx: RunContext, who: str) -> None:
        if self.learned:
            ctx.memory[self.key] = FedAUEstimator(ctx.n_clients, self.cutoff, self.timing)
        else:
            ctx.memory[self.key] = 1.0 / resolve_probabilities(self.probabilities, ctx, who)

    def of(self, r: int, participants: np.ndarray, ctx: RunContext) -> np.ndarray:
        source = ctx.memory[self.key]
        if self.learned:
            return source.update(r, participants)
        return source[participants]


def round_weights(
    rule: str,
    r: int,
    participants: np.ndarray,
    ctx: RunContext,
    inverse: InverseProbabilities | None = None,
) -> np.ndarray:
    """q_i of each participant: ``uniform`` 1/|S|; ``unbiased`` 1/(N p_i); ``fedau``
    omega_i / N with omega_i FedAU's estimate of 1/p_i."""
    if rule == "uniform":
        return uniform_weights(participants)
    if inverse is None:
        raise ValueError(f"weights={rule!r} needs the inverse probabilities (inverse=...)")
    return inverse.of(r, participants, ctx) / ctx.n_clients


def averaged(
    x: BlockRows, participants: np.ndarray, weights, server_lr: float, rule=None
) -> Expression:
    r"""The server's row after averaging, for an equation ``x.server = averaged(x, S, q,
    eta)``:

    .. math::

        x_0 + \eta \textstyle\sum_{i\in S} q_i\,(x_i - x_0)
            = (1 - \eta \textstyle\sum_{i\in S} q_i)\, x_0
              + \eta \textstyle\sum_{i\in S} q_i\, x_i,

    written as the right-hand side (the coefficient of x_0 computed once, as
    :func:`~stochmix.mixing.average_rows` does, so that the numbers are its numbers).
    Equal weights are one number for every client (``q_0 * total(x[S])``), as in
    ``average_rows``. ``weights``: the participants' q_i (aligned with ``participants``,
    nonnegative); ``participants`` must not be empty. ``rule``: the function of the
    participants that gave the weights (``uniform_weights``), if any: the two coefficients
    then carry it (round scalars that read the participants), so that a round template
    binds each round's values and rounds of any size share one template.
    """
    q = as_nonnegative(weights, "weights", participants.size)
    if q.size == 0:
        raise ValueError("averaged() needs at least one participant")
    own = _own(q, server_lr)
    if isinstance(weights, RoundArray) and weights.rule is not None:
        # weights bound by a rule (a round template binds each round's): the sum always,
        # whether this round's weights happen to be equal or not
        ruled = weights
        own = RoundScalar(own, lambda r, s: _own(ruled.at(r, s), server_lr), participants=True)
        return own * x.server + dot(server_lr * ruled, x[participants])
    if bool((q == q[0]).all()):
        each = server_lr * float(q[0])
        if rule is not None:
            own = RoundScalar(own, lambda r, s: _own(rule(s), server_lr), participants=True)
            each = RoundScalar(each, lambda r, s: server_lr * float(rule(s)[0]), True)
        clients = each * total(x[participants])
    else:
        clients = dot(server_lr * q, x[participants])
    return own * x.server + clients


def _own(q: np.ndarray, server_lr: float) -> float:
    """The server's own coefficient after averaging, ``1 - eta sum_S q_i``."""
    return 1.0 - server_lr * float(q.sum())

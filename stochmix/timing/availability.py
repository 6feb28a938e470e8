r"""Availability in continuous time: each client switches between on (available) and off
by its own clock, independently of the others.

:class:`OnOff` is the two-state Markov process in continuous time with mean on period
``mean_on`` and mean off period ``mean_off`` (rates b = 1/mean_on, a = 1/mean_off),
started in its stationary law (on with probability pi = mean_on / (mean_on + mean_off)).
A :class:`~stochmix.timing.Clock` with ``availability=OnOff(...)`` keeps, of each round's
cohort, the clients that are on when the round starts.

Only the cohort's clients are looked at, each from the last time it was looked at:
given its state s at time t0, a client is on at t1 > t0 with probability

.. math::

    P(\text{on at } t_1) = \pi + (\mathbb{1}[s = \text{on}] - \pi)\, e^{-(a + b)(t_1 - t_0)},

which is exact for this process, so a round costs O(|cohort|), whatever N.
"""

from __future__ import annotations

import numpy as np

from .._validate import as_float

__all__ = [
    "OnOff",
]


class OnOff:
    """On/off periods in continuous time (see the module docstring).

    Args:
        mean_on: the mean length of an on period, seconds (> 0).
        mean_off: the mean length of an off period, seconds (> 0).
    """

    def __init__(self, mean_on: float, mean_off: float):
        self.mean_on = as_float(mean_on, "mean_on", positive=True)
        self.mean_off = as_float(mean_off, "mean_off", positive=True)
        tiny = float(np.finfo(float).tiny)
        for name, value in (("mean_on", self.mean_on), ("mean_off", self.mean_off)):
            if value < tiny:  # subnormal: its rate 1 / value overflows
                raise ValueError(
                    f"{name} must be at least {tiny!r} s (a normal float), got {value!r}"
                )
        if not self.stationary >= tiny:
            raise ValueError(
                f"mean_on={self.mean_on!r} with mean_off={self.mean_off!r} leaves no client "
                f"ever on (stationary fraction on {self.stationary!r})"
            )

    @property
    def stationary(self) -> float:
        """pi, the long-run fraction of time a client is on."""
        return self.mean_on / (self.mean_on + self.mean_off)

    def tracker(self, n_clients: int) -> _Tracker:
        """A fresh record of the N clients' states (none looked at yet)."""
        return _Tracker(self, n_clients)

    def __repr__(self) -> str:
        return f"OnOff(mean_on={self.mean_on!r}, mean_off={self.mean_off!r})"


class _Tracker:
    """The last state seen of each client and when (NaN: never looked at)."""

    def __init__(self, law: OnOff, n: int):
        self.law = law
        self.seen = np.full(n, np.nan)
        self.on = np.zeros(n, bool)

    def available(self, clients: np.ndarray, t: float, rng: np.random.Generator) -> np.ndarray:
        """Which of ``clients`` are on at time ``t`` (a boolean mask), their states
        updated."""
        pi = self.law.stationary
        rate = 1.0 / self.law.mean_on + 1.0 / self.law.mean_off
        seen = self.seen[clients]
        fresh = np.isnan(seen)
        decay = np.exp(-rate * np.where(fresh, 0.0, t - np.where(fresh, t, seen)))
        p_on = np.where(fresh, pi, pi + (self.on[clients] - pi) * decay)
        on = rng.random(clients.size) < p_on
        self.on[clients] = on
        self.seen[clients] = t
        return on

r"""How many local steps each participant takes in a round: one number, one per client, or
a seeded draw per round.

A federated method's ``local_steps`` argument takes

* an int K: every participant takes K steps every round (the methods' original form, the
  same phases and bits as always);
* an array of N ints: client i takes K_i steps whenever it participates
  (:class:`ClientSteps`);
* a :class:`RandomSteps`: each participant's count is drawn afresh every round, e.g.
  ``RandomSteps.uniform(1, 5)``.

In matrix form a round with counts K_i is the same recursion with one local-update
diagonal per step: step t (t = 0..max K_i - 1) updates the participants that still have
steps to take, ``S_t = {i in S : K_i > t}``,

.. math::

    x \leftarrow x - \gamma\,D_{S_t}\,\nabla F(x),

so a round costs sum_i K_i gradient evaluations, what its participants' steps cost. A
clock with a deadline (:mod:`stochmix.timing.clock`) may overrule the counts of a
round with the steps each client completed in time (the round record's ``steps``).

The draws of a :class:`RandomSteps` come from the run's seed and the round alone
(:func:`~stochmix.engine.model.rowmap.map_generator` with the label ``"local steps"``), so a
checkpointed run resumes with the same counts and the participation stream is untouched.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np
from jaxtyping import Int

from .._validate import as_int, as_int_array, as_probabilities, is_scalar, show
from ..engine.model.rowmap import map_generator

__all__ = [
    "ClientSteps",
    "LocalSteps",
    "RandomSteps",
    "as_local_steps",
]

#: the label of the local-step draws among a run's random streams
STEPS_LABEL = "local steps"


@runtime_checkable
class LocalSteps(Protocol):
    """The minimal contract of a local-step rule: the counts of one round's participants."""

    #: whether the counts change from round to round for the same participants
    random: bool

    def counts(self, r: int, participants: np.ndarray, seed) -> Int[np.ndarray, " k"]:
        """The local steps of each participant of round ``r`` (``participants``: sorted
        client indices; ``seed``: the run's seed), ints >= 1, shape ``(k,)``."""
        ...

    def check_clients(self, n_clients: int) -> None:
        """Raise a ValueError naming ``local_steps`` if the rule cannot serve N clients."""
        ...

    def mean(self) -> float:
        """The expected count of a participant (its average over clients, for an array)."""
        ...


class ClientSteps:
    """Client i takes ``K[i]`` local steps whenever it participates.

    Args:
        steps: N ints >= 1, one per client.
    """

    random = False

    def __init__(self, steps):
        arr = np.array(as_int_array(steps, "local_steps", ndim=1), dtype=np.int64)
        if arr.size == 0:
            raise ValueError("local_steps must hold one count per client, got an empty array")
        bad = np.flatnonzero(arr < 1)
        if bad.size:
            raise ValueError(
                f"local_steps must be >= 1 for every client, got local_steps[{bad[0]}] = "
                f"{arr[bad[0]]}"
            )
        arr.flags.writeable = False
        self.steps = arr

    def counts(self, r: int, participants: np.ndarray, seed) -> np.ndarray:
        return self.steps[participants]

    def check_clients(self, n_clients: int) -> None:
        if self.steps.size != n_clients:
            raise ValueError(
                f"local_steps must hold one count per client ({n_clients}), got an array of "
                f"{self.steps.size}"
            )

    def mean(self) -> float:
        return float(self.steps.mean())

    def __repr__(self) -> str:
        return f"ClientSteps({show(self.steps.tolist())})"


class RandomSteps:
    """Each participant draws its local steps afresh every round: value ``values[j]`` with
    probability ``probabilities[j]``, independently of the others.

    Args:
        values: the possible counts, ints >= 1.
        probabilities: their probabilities (uniform when None); they must sum to 1.

    Example:
        ``RandomSteps.uniform(1, 5)``: K_i uniform on {1, ..., 5}, mean 3.
    """

    random = True

    def __init__(self, values, probabilities=None):
        vals = np.array(as_int_array(values, "values", ndim=1), dtype=np.int64)
        if vals.size == 0 or (vals < 1).any():
            raise ValueError(f"values must be counts >= 1, got {show(vals.tolist())}")
        if probabilities is None:
            p = np.full(vals.size, 1.0 / vals.size)
        else:
            p = as_probabilities(probabilities, "probabilities", n=vals.size)
            if abs(p.sum() - 1.0) > 1e-9:
                raise ValueError(f"probabilities must sum to 1, got sum {p.sum():.12g}")
        self.values, self.probabilities = vals, p
        self._cdf = np.cumsum(p)
        self._cdf[-1] = 1.0
        self._uniform = bool((p == p[0]).all())

    @classmethod
    def uniform(cls, low: int, high: int) -> RandomSteps:
        """K_i uniform on ``{low, ..., high}``."""
        low = as_int(low, "low", minimum=1)
        high = as_int(high, "high", minimum=low)
        return cls(np.arange(low, high + 1))

    def counts(self, r: int, participants: np.ndarray, seed) -> np.ndarray:
        return self.draw(map_generator(seed, r, STEPS_LABEL), participants.size)

    def draw(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """``size`` independent counts from ``rng``, int64."""
        if self._uniform:
            return self.values[rng.integers(0, self.values.size, size)]
        u = rng.random(size)
        return self.values[
            np.searchsorted(self._cdf, u, side="right").clip(0, self.values.size - 1)
        ]

    def check_clients(self, n_clients: int) -> None:
        return None

    def mean(self) -> float:
        return float(self.values @ self.probabilities)

    def __repr__(self) -> str:
        values, p = show(self.values.tolist()), show(self.probabilities.tolist())
        return f"RandomSteps(values={values}, probabilities={p})"


def as_local_steps(value, name: str = "local_steps") -> int | LocalSteps:
    """``value`` as what a method keeps: an int >= 1 (the same K for everyone), or a
    :class:`LocalSteps` rule (an array becomes :class:`ClientSteps`); one error naming
    ``name`` otherwise."""
    if isinstance(value, LocalSteps) and not isinstance(value, type):
        return value
    if isinstance(value, (list, tuple)) or (isinstance(value, np.ndarray) and value.ndim > 0):
        return ClientSteps(value)
    if isinstance(value, dict):  # a configuration's table: {low, high} or {values, ...}
        table = dict(value)
        try:
            if set(table) == {"low", "high"}:
                return RandomSteps.uniform(table["low"], table["high"])
            if set(table) in ({"values"}, {"values", "probabilities"}):
                return RandomSteps(**table)
        except (TypeError, ValueError) as error:
            raise type(error)(f"{name}.{error}") from None
        raise ValueError(
            f"{name} as a table takes low and high, or values (and probabilities), got "
            f"keys {sorted(table)}"
        )
    if is_scalar(value) and not isinstance(value, str):
        return as_int(value, name, minimum=1)
    raise TypeError(
        f"{name} must be an int, an array of one int per client or a RandomSteps, got {show(value)}"
    )

"""Round scalars: coefficients that follow the round index.

Some methods use numbers that change from round to round by a rule known in advance:
FedDualAvg's prox thresholds grow with the round, ``eta gamma r K + gamma t``. Such a
number is a :class:`RoundScalar`: a float (its value in the round that built the phase;
every path of the engine and the analysis reads it as that float) that also carries its
rule, ``r -> value``. A round template (:mod:`stochmix.engine.plan.template`) keeps the
rule and binds each later round's value, instead of refusing a method whose coefficients
are not the same numbers in every round; the template is still checked against a full
build of the second round of its key.

A rule may also read the round's participants (``participants=True``: ``rule(r, S)``, S
the sorted participants): FedAvg's ``1/|S|`` weights and the server's own coefficient
``1 - eta sum_S q_i``, so that rounds of any size share one template instead of one per
``|S|``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["RoundScalar", "bound", "plain"]


class RoundScalar(float):
    """A coefficient's value in this round, and ``rule(r)``, its value in round ``r``.

    Args:
        value: the value in the round being built (``rule`` of that round).
        rule: a function of the round index (an int) giving the value in that round; with
            ``participants``, of the round index and the round's participants.
        participants: whether ``rule`` takes the participants too (``rule(r, S)``).

    It pickles as the plain float (the rule stays in the process that built it).
    """

    rule: Callable[..., float]
    participants: bool

    def __new__(
        cls, value: float, rule: Callable[..., float], participants: bool = False
    ) -> RoundScalar:
        out = super().__new__(cls, value)
        out.rule = rule
        out.participants = bool(participants)
        return out

    def at(self, r: int, participants: np.ndarray | None = None) -> float:
        """The value in round ``r`` (whose participants a rule that reads them is given)."""
        if self.participants:
            if participants is None:
                raise ValueError("this round scalar's rule needs the round's participants")
            return float(self.rule(r, participants))
        return float(self.rule(r))

    def __reduce__(self):
        return float, (float(self),)


def bound(value, r: int, participants: np.ndarray | None = None):
    """``value`` in round ``r`` (of ``participants``): a :class:`RoundScalar`'s rule there,
    else ``value``."""
    return value.at(r, participants) if isinstance(value, RoundScalar) else value


def plain(values: tuple) -> tuple:
    """``values`` with every :class:`RoundScalar` as the exact float it stands for (the
    same tuple when none is): what a program computes with. NumPy treats only an exact
    Python float as a weak scalar, so ``float32 array * RoundScalar`` would compute in
    float64 where ``float32 array * float`` stays float32: a round whose coefficients came
    from a template (bound to floats) and one built in full must compute alike."""
    if not any(type(v) is RoundScalar for v in values):
        return values
    return tuple(float(v) if type(v) is RoundScalar else v for v in values)

"""Round scalars: coefficients that follow the round index.

Some methods use numbers that change from round to round by a rule known in advance:
FedDualAvg's prox thresholds grow with the round, ``eta gamma r K + gamma t``. Such a
number is a :class:`RoundScalar`: a float (its value in the round that built the phase;
every path of the engine and the analysis reads it as that float) that also carries its
rule, ``r -> value``. A round template (:mod:`stochmix.engine.plan.template`) keeps the
rule and binds each later round's value, instead of refusing a method whose coefficients
are not the same numbers in every round; the template is still checked against a full
build of the second round of its key.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["RoundScalar", "bound"]


class RoundScalar(float):
    """A coefficient's value in this round, and ``rule(r)``, its value in round ``r``.

    Args:
        value: the value in the round being built (``rule`` of that round).
        rule: a function of the round index (an int) giving the value in that round.

    It pickles as the plain float (the rule stays in the process that built it).
    """

    rule: Callable[[int], float]

    def __new__(cls, value: float, rule: Callable[[int], float]) -> RoundScalar:
        out = super().__new__(cls, value)
        out.rule = rule
        return out

    def at(self, r: int) -> float:
        """The value in round ``r``."""
        return float(self.rule(r))

    def __reduce__(self):
        return float, (float(self),)


def bound(value, r: int):
    """``value`` in round ``r``: a :class:`RoundScalar`'s rule at ``r``, else ``value``."""
    return value.at(r) if isinstance(value, RoundScalar) else value

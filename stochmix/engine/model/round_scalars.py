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

A per-client coefficient array that follows the participants by a rule is a
:class:`RoundArray`: FedStale's weights ``eta / (N p_i)`` over the round's participants.
Scaling it by a number (``beta * w``, ``-w``, ``w / 2``) gives a round array whose rule
scales alike, with the same operation, so that a template binds the bits a full build
computes; any other operation gives a plain array.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

__all__ = ["RoundArray", "RoundScalar", "bound", "plain", "scaled"]


class RoundScalar(float):
    """A coefficient's value in this round, and ``rule(r)``, its value in round ``r``.

    Args:
        value: the value in the round being built (``rule`` of that round).
        rule: a function of the round index (an int) giving the value in that round; with
            ``participants``, of the round index and the round's participants.
        participants: whether ``rule`` takes the participants too (``rule(r, S)``).

    Arithmetic with numbers (``+``, ``-``, ``*``, ``/``, unary ``-``) gives a round scalar
    whose rule does the same with each round's values, so that a coefficient computed from
    one (``1 - eta * q``) still follows the round; ``float(s)`` is the plain number. A
    NumPy scalar on the left (``np.float64(2.0) * s``) computes first and gives a plain
    number: write Python numbers, or put the round scalar first. It pickles as the plain
    float (the rule stays in the process that built it).
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

    def __add__(self, other):
        return _combined(float.__add__, self, other)

    def __radd__(self, other):
        return _combined(float.__radd__, self, other)

    def __sub__(self, other):
        return _combined(float.__sub__, self, other)

    def __rsub__(self, other):
        return _combined(float.__rsub__, self, other)

    def __mul__(self, other):
        return _combined(float.__mul__, self, other)

    def __rmul__(self, other):
        return _combined(float.__rmul__, self, other)

    def __truediv__(self, other):
        return _combined(float.__truediv__, self, other)

    def __rtruediv__(self, other):
        return _combined(float.__rtruediv__, self, other)

    def __neg__(self):
        rule, reads = self.rule, self.participants
        return RoundScalar(-float(self), lambda *a: -rule(*a), reads)

    def __pos__(self):
        return self


def _value_at(x, r: int, participants):
    return x.at(r, participants) if isinstance(x, RoundScalar) else x


def _combined(op, a: RoundScalar, b):
    """``op(a, b)`` (a float method, a the round scalar) as a round scalar whose rule applies
    ``op`` to both values of each round; NotImplemented for operands that are not numbers
    (an array handles the product itself)."""
    if not isinstance(b, (int, float, np.integer, np.floating)):
        return NotImplemented
    if isinstance(b, np.floating | np.integer | bool):
        b = float(b)  # (a NumPy scalar: its value, as a Python float multiplies)
    value = op(float(a), b if not isinstance(b, RoundScalar) else float(b))
    if value is NotImplemented:
        return NotImplemented
    reads = a.participants or (isinstance(b, RoundScalar) and b.participants)

    def rule(r, participants=None):
        return op(float(a.at(r, participants)), float(_value_at(b, r, participants)))

    if reads:
        return RoundScalar(value, rule, participants=True)
    return RoundScalar(value, lambda r: rule(r))


class RoundArray(np.ndarray):
    """A per-client coefficient array of this round (float64, one entry per participant)
    and ``rule(r, S)``, the array of round ``r`` with participants ``S`` (sorted).

    Build one with ``RoundArray(values, rule)``. ``c * a``, ``a * c``, ``a / c`` and
    ``-a`` for a number ``c`` are round arrays whose rule applies the same operation to
    the rule's array (a :class:`RoundScalar` c with its value in that round; any other
    number c is a constant of the run), and ``a.sum()``, ``a.mean()`` and ufunc
    reductions are round scalars following the rule. Every other operation (in place
    ones included), and every view or slice, gives an array without a rule (:attr:`rule`
    None), which a template does not bind. A number taken out of the array any other way
    (``float(a.sum())``, a NumPy scalar) is a plain number: make it a round scalar if it
    scales the array."""

    rule: Callable[[int, np.ndarray], np.ndarray] | None

    def __new__(cls, values, rule: Callable[[int, np.ndarray], np.ndarray]) -> RoundArray:
        out = np.array(values, dtype=np.float64).view(cls)
        if out.ndim != 1:
            raise ValueError(f"a RoundArray is one coefficient per client, got shape {out.shape}")
        out.rule = rule
        return out

    def __array_finalize__(self, obj) -> None:
        self.rule = None  # views, slices and copies: not the participants' array any more

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        plain_inputs = [i.view(np.ndarray) if isinstance(i, RoundArray) else i for i in inputs]
        outs = kwargs.get("out")
        if outs is not None:  # in place: the values no longer follow the rule
            for o in outs:
                if isinstance(o, RoundArray):
                    o.rule = None
            kwargs["out"] = tuple(o.view(np.ndarray) if isinstance(o, RoundArray) else o
                                  for o in outs)  # fmt: skip
            getattr(ufunc, method)(*plain_inputs, **kwargs)
            return outs[0] if len(outs) == 1 else outs
        out = getattr(ufunc, method)(*plain_inputs, **kwargs)
        if method == "reduce":
            return _reduced(ufunc, inputs, kwargs, out)
        rule = _scaled_rule(ufunc, method, inputs, kwargs)
        if not isinstance(out, np.ndarray) or out.shape != self.shape or out.dtype.kind != "f":
            return out
        found = out.view(RoundArray)
        found.rule = rule  # None: the values follow no rule, and a template refuses them
        return found

    def __setitem__(self, key, value) -> None:
        self.rule = None  # written in place: its values no longer follow the rule
        super().__setitem__(key, value)

    def fill(self, value) -> None:
        self.rule = None
        super().fill(value)

    def sum(self, *args, **kwargs):  # type: ignore[override]
        """The sum, as a round scalar following the rule (with arguments: a plain sum)."""
        out = self.view(np.ndarray).sum(*args, **kwargs)
        if args or _given(kwargs) or self.rule is None:
            return out
        rule = self.rule
        return RoundScalar(float(out), lambda r, s: float(rule(r, s).sum()), True)

    def mean(self, *args, **kwargs):  # type: ignore[override]
        """The mean, as a round scalar following the rule (with arguments: a plain mean)."""
        out = self.view(np.ndarray).mean(*args, **kwargs)
        if args or _given(kwargs) or self.rule is None:
            return out
        rule = self.rule
        return RoundScalar(float(out), lambda r, s: float(rule(r, s).mean()), True)

    def at(self, r: int, participants: np.ndarray) -> np.ndarray:
        """The array of round ``r`` with ``participants`` (a plain float64 array)."""
        if self.rule is None:
            raise ValueError("this array has no rule: it is not bound per round")
        value = np.asarray(self.rule(r, participants), dtype=np.float64)
        if value.shape != participants.shape:
            raise ValueError(
                f"a RoundArray's rule gave shape {value.shape} for {participants.size} participants"
            )
        return value

    def __reduce__(self):
        return np.asarray, (self.view(np.ndarray),)


def _given(kwargs: dict) -> bool:
    """Whether any keyword of a reduction is not its default (``np.sum(a)`` passes them)."""
    return any(
        not (v is None or v is False or v is np._NoValue or (k == "where" and v is True))
        for k, v in kwargs.items()
    )


def _reduced(ufunc, inputs: tuple, kwargs: dict, out):
    """A reduction of a round array over its one axis (``a.sum()``, ``np.max(a)``) as a
    round scalar whose rule reduces each round's array alike; other reductions as they
    are."""
    (a,) = inputs
    defaults = {"axis": (None, 0), "dtype": (None, np.float64), "out": (None,),
                "keepdims": (False,), "initial": (np._NoValue,), "where": (True,)}  # fmt: skip
    simple = all(
        k in defaults and any(v is d or (type(v) is type(d) and v == d) for d in defaults[k])
        for k, v in kwargs.items()
    )
    if not isinstance(a, RoundArray) or a.rule is None or not simple or np.ndim(out) != 0:
        return out
    rule = a.rule
    return RoundScalar(float(out), lambda r, s: float(ufunc.reduce(rule(r, s))), True)


def _scaled_rule(ufunc, method: str, inputs: tuple, kwargs: dict):
    """The rule of ``ufunc(*inputs)`` when it scales one round array by a number (a round
    scalar included: its value in each round) with multiply, true_divide or negative (the
    same operation on the rule's array), else None."""
    if method != "__call__" or kwargs:
        return None
    if ufunc is np.negative and len(inputs) == 1:
        (a,) = inputs
        rule = a.rule
        return None if rule is None else (lambda r, s: np.negative(rule(r, s)))
    if ufunc not in (np.multiply, np.true_divide) or len(inputs) != 2:
        return None
    a, b = inputs
    if isinstance(a, RoundArray) and not isinstance(b, np.ndarray) and np.ndim(b) == 0:
        rule, c = a.rule, b
        if rule is None:
            return None
        return lambda r, s: ufunc(rule(r, s), _value_at(c, r, s))
    if ufunc is np.multiply and isinstance(b, RoundArray) and not isinstance(a, np.ndarray):
        rule, c = b.rule, a
        if rule is None or np.ndim(c) != 0:
            return None
        return lambda r, s: ufunc(_value_at(c, r, s), rule(r, s))
    return None


def scaled(value, factor, op=np.multiply):
    """``op(value, factor)`` (multiply or true_divide) keeping rules: numbers and round
    arrays compose with a round scalar ``factor``; a plain per-client array with one gives
    a round array without a rule (its values change with the round: a template refuses
    it, never freezes it)."""
    if isinstance(factor, RoundScalar) and isinstance(value, np.ndarray):
        if not isinstance(value, RoundArray):
            out = op(value, float(factor)).view(RoundArray)
            out.rule = None
            return out
    return value * factor if op is np.multiply else value / factor


def bound(value, r: int, participants: np.ndarray | None = None):
    """``value`` in round ``r`` (of ``participants``): a :class:`RoundScalar`'s or
    :class:`RoundArray`'s rule there, else ``value``."""
    if isinstance(value, RoundArray):
        if participants is None:
            raise ValueError("a round array's rule needs the round's participants")
        return value.at(r, participants)
    return value.at(r, participants) if isinstance(value, RoundScalar) else value


def plain(values: tuple) -> tuple:
    """``values`` with every :class:`RoundScalar` as the exact float it stands for and every
    :class:`RoundArray` as a plain array (the same tuple when there is neither): what a
    program computes with. NumPy treats only an exact Python float as a weak scalar, so
    ``float32 array * RoundScalar`` would compute in float64 where ``float32 array *
    float`` stays float32: a round whose coefficients came from a template (bound to
    floats) and one built in full must compute alike."""
    if not any(type(v) is RoundScalar or type(v) is RoundArray for v in values):
        return values
    return tuple(
        float(v) if type(v) is RoundScalar else v.view(np.ndarray) if type(v) is RoundArray else v
        for v in values
    )

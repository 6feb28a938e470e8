"""The parameter that minimises a certified rate: :func:`tune`."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import numpy as np

from ..._validate import _show, as_float, as_int
from ...engine import Method
from .certify import Certificate, certify, check_class

__all__ = ["Tuned", "rebuild", "tune"]


@dataclass
class Tuned:
    """The best value found, the certificate there, and every value tried with its rate."""

    parameter: str
    value: float
    certificate: Certificate
    tried: list = field(default_factory=list, repr=False)

    @property
    def rate(self) -> float:
        return self.certificate.rate

    def __str__(self) -> str:
        return f"{self.parameter} = {self.value:.6g}: {self.certificate}"


def rebuild(method: Method, **changes) -> Method:
    """A new ``method`` built by its class's constructor, every argument read back from the
    attribute of the same name (the library's methods store their arguments so; an argument
    not stored takes its default), with ``changes`` applied: attributes a method derives from
    its arguments at construction (NIDS's ``theta = c lr``, DLM's ``rho = 1 / lr``) are
    derived again, which setting an attribute on a copy would leave stale.

    Raises:
        ValueError: a change that is not an argument of the constructor, a method whose
            constructor does not give it back from its attributes (its
            :meth:`~stochmix.engine.Method.fingerprint` differs: an argument stored under
            another name, or an attribute set after construction), or a value the
            constructor refuses; each names the argument and the value.
    """
    cls = type(method)
    try:
        parameters = dict(inspect.signature(cls).parameters)
    except (TypeError, ValueError):  # no signature to read
        parameters = {}
    named = {
        name: p
        for name, p in parameters.items()
        if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
    }
    for name in changes:
        if name not in named:
            raise ValueError(
                f"parameter: {name!r} is not an argument of {cls.__name__}'s constructor "
                f"(its arguments: {', '.join(named) or 'none'})"
            )
    stored = {}
    for name, p in named.items():
        if name in vars(method):
            stored[name] = vars(method)[name]
        elif p.default is inspect.Parameter.empty:
            raise ValueError(
                f"method: {cls.__name__} does not store its argument {name!r} under that name, "
                "so it cannot be rebuilt with another value; pass a callable value -> Method"
            )
    try:
        same = cls(**stored)
    except Exception as error:  # noqa: BLE001 - any refusal is the same answer
        raise ValueError(
            f"method: {cls.__name__} cannot be rebuilt from its attributes ({error}); pass a "
            "callable value -> Method"
        ) from None
    if same.fingerprint() != method.fingerprint():
        raise ValueError(
            f"method: {cls.__name__} rebuilt from its constructor's arguments (read from its "
            "attributes of the same names) differs from the method given (an argument not "
            "stored under its name, or an attribute set after construction), so a rebuilt "
            "method would not be the one to tune; pass a callable value -> Method"
        )
    try:
        return cls(**{**stored, **changes})
    except (TypeError, ValueError) as error:
        shown = ", ".join(f"{k}={v!r}" for k, v in changes.items())
        raise ValueError(f"parameter: {cls.__name__}({shown}) is refused: {error}") from None


def _factory(method_or_factory, parameter: str):
    if isinstance(method_or_factory, Method):
        if not isinstance(parameter, str):
            raise TypeError(f"parameter must be an attribute name (str), got {_show(parameter)}")
        current = getattr(method_or_factory, parameter, None)
        if isinstance(current, bool) or not isinstance(current, (int, float)):
            raise ValueError(
                f"parameter: {method_or_factory.name} has no number named {parameter!r} to tune"
            )
        rebuild(method_or_factory)  # refuses, before any solve, a method it cannot rebuild

        def make(value: float) -> Method:
            return rebuild(method_or_factory, **{parameter: value})

        return make
    if callable(method_or_factory):
        return method_or_factory
    raise TypeError(
        "method must be a stochmix Method (its attribute `parameter` is varied) or a "
        f"callable value -> Method, got {_show(method_or_factory)}"
    )


def _bounds(bounds, L: float) -> tuple[float, float]:
    if bounds is None:
        return 1e-3 / L, 2.0 / L
    if isinstance(bounds, (str, bytes)) or not hasattr(bounds, "__len__") or len(bounds) != 2:
        raise ValueError(f"bounds must be a pair (low, high) with 0 < low < high, got {bounds!r}")
    low = as_float(bounds[0], "bounds", positive=True)
    high = as_float(bounds[1], "bounds", positive=True)
    if not low < high:
        raise ValueError(f"bounds must be (low, high) with 0 < low < high, got {bounds!r}")
    return low, high


def tune(
    method,
    *,
    L,
    mu,
    parameter: str = "lr",
    bounds=None,
    grid: int = 12,
    tol: float = 1e-4,
    **certify_args,
) -> Tuned:
    """The value of one scalar parameter that minimises the certified rate of a method.

    A coarse logarithmic grid of ``grid`` values over ``bounds``, then a bounded 1-D search
    (SciPy's ``minimize_scalar``, method "bounded") between the grid's neighbours of the
    best value, to relative tolerance ``tol``; each value is certified with
    :func:`certify` (``certify_args``: mixing, participation, n_clients, ...), values that
    certify nothing count as rate 1. The best value is certified again at full precision.

    Args:
        method: a method rebuilt for every value by its own constructor with ``parameter``
            changed (:func:`rebuild`: what it derives from the parameter is derived again),
            or a callable ``value -> Method``.
        L, mu: the function class.
        parameter: the constructor argument to tune (default the step, "lr"), a real
            number: an integer one (``local_steps``) is refused with the constructor's
            reason (certify each count instead).
        bounds: ``(low, high)``, both > 0; default ``(1e-3 / L, 2 / L)`` for a step.

    Raises:
        ValueError: bad ``L``, ``mu``, ``bounds``, ``tol``, a ``parameter`` that is not a
            number the constructor takes, or a method :func:`rebuild` cannot rebuild, each
            named, before any solve.

    Returns:
        Tuned: ``value``, ``certificate`` (its ``rate``), and ``tried``: (value, rate) pairs.
    """
    from scipy.optimize import minimize_scalar

    L, mu = check_class(L, mu)
    grid = as_int(grid, "grid", minimum=3)
    tol = as_float(tol, "tol", positive=True)
    if not tol < 1:
        raise ValueError(f"tol must be in (0, 1) (relative to the value), got tol={tol!r}")
    low, high = _bounds(bounds, L)
    make = _factory(method, parameter)
    for value in (low, float(np.sqrt(low * high)), high):  # a value the method refuses: now
        if isinstance(method, Method):
            make(value)
    tried: list[tuple[float, float]] = []
    coarse = {**certify_args, "tol": min(1e-6, tol / 10)}

    def rate(value: float) -> float:
        found = certify(make(float(value)), L=L, mu=mu, **coarse)
        value_rate = found.rate if found.certified else 1.0
        tried.append((float(value), value_rate))
        return value_rate

    values = np.geomspace(low, high, grid)
    rates = np.array([rate(v) for v in values])
    best = int(np.argmin(rates))
    if rates[best] < 1.0:
        left, right = values[max(best - 1, 0)], values[min(best + 1, grid - 1)]
        found = minimize_scalar(
            rate, bounds=(left, right), method="bounded", options={"xatol": tol * values[best]}
        )
        value = float(found.x) if found.fun <= rates[best] else float(values[best])
    else:
        value = float(values[best])
    final = certify(make(value), L=L, mu=mu, **certify_args)
    return Tuned(parameter, value, final, tried)

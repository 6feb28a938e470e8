"""The parameter that minimises a certified rate: :func:`tune`."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np

from ..._validate import _show, as_float, as_int
from ...engine import Method
from .certify import Certificate, certify

__all__ = ["Tuned", "tune"]


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


def _factory(method_or_factory, parameter: str):
    if isinstance(method_or_factory, Method):
        if not isinstance(getattr(method_or_factory, parameter, None), (int, float)):
            raise ValueError(
                f"parameter: {method_or_factory.name} has no number named {parameter!r} to tune"
            )

        def make(value: float) -> Method:
            out = copy.copy(method_or_factory)
            setattr(out, parameter, value)
            return out

        return make
    if callable(method_or_factory):
        return method_or_factory
    raise TypeError(
        "method must be a stochmix Method (its attribute `parameter` is varied) or a "
        f"callable value -> Method, got {_show(method_or_factory)}"
    )


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
        method: a method whose attribute ``parameter`` is varied (on copies), or a callable
            ``value -> Method``.
        L, mu: the function class.
        parameter: the attribute to tune (default the step, "lr").
        bounds: ``(low, high)``, both > 0; default ``(1e-3 / L, 2 / L)`` for a step.

    Returns:
        Tuned: ``value``, ``certificate`` (its ``rate``), and ``tried``: (value, rate) pairs.
    """
    from scipy.optimize import minimize_scalar

    make = _factory(method, parameter)
    L = as_float(L, "L", positive=True)
    mu = as_float(mu, "mu")
    grid = as_int(grid, "grid", minimum=3)
    tol = as_float(tol, "tol", positive=True)
    low, high = (1e-3 / L, 2.0 / L) if bounds is None else bounds
    low, high = as_float(low, "bounds", positive=True), as_float(high, "bounds", positive=True)
    if not low < high:
        raise ValueError(f"bounds must be (low, high) with 0 < low < high, got {bounds!r}")
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

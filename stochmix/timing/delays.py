"""Delays: the distributions of a time model's durations (seconds of simulated time).

Each delay draws nonnegative durations with ``draw(rng, size)``, vectorized, and knows
its smallest possible value (``lower``) and its mean (``mean``). A plain number where a
delay goes is a :class:`Constant`.

Each built-in delay refuses, when made, parameters that let a draw exceed
:data:`MAX_SECONDS` (for the unbounded laws: the largest draw NumPy's generator can give
from 53 random bits, or a 10-sigma normal draw for :class:`LogNormal`), naming the
parameter: a run's clock adds rounds of local steps of such durations and must stay
finite.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from .._validate import as_float, is_scalar, show

__all__ = [
    "MAX_SECONDS",
    "Constant",
    "Delay",
    "Exponential",
    "LogNormal",
    "Pareto",
    "as_delay",
]


#: The longest duration a built-in delay may draw, seconds: far beyond any simulated
#: run, and small enough that a clock summing rounds x local steps x durations stays finite.
MAX_SECONDS = 1e100
_LOG_MAX = float(np.log(MAX_SECONDS))
_BITS_LOG = 53 * float(np.log(2.0))  # -log of the smallest nonzero 1 - U of a 53-bit uniform


def _bounded(log_largest: float, name: str, value, law: str) -> float:
    """``exp(log_largest)``, the largest draw, after refusing it above MAX_SECONDS."""
    if not log_largest <= _LOG_MAX:
        raise ValueError(
            f"{name}={value!r} lets a duration reach about 10^{log_largest / np.log(10):.0f} s "
            f"({law}), above MAX_SECONDS = {MAX_SECONDS:g} s: a run's clock would overflow"
        )
    return float(np.exp(log_largest))


def _log(x: float) -> float:
    return float(np.log(x)) if x > 0 else -np.inf


@runtime_checkable
class Delay(Protocol):
    """The minimal contract of a delay distribution."""

    def draw(self, rng: np.random.Generator, size: int) -> np.ndarray:
        """``size`` independent durations >= 0, float64."""
        ...

    @property
    def lower(self) -> float:
        """The smallest duration the distribution can give."""
        ...

    @property
    def mean(self) -> float:
        """The expected duration (``inf`` where it has none)."""
        ...


class Constant:
    """Always ``value`` seconds (>= 0)."""

    def __init__(self, value: float):
        self.value = as_float(value, "value", nonnegative=True)
        self._largest = _bounded(_log(self.value), "value", self.value, "its one value")

    def draw(self, rng, size: int) -> np.ndarray:
        return np.full(size, self.value)

    @property
    def lower(self) -> float:
        return self.value

    @property
    def mean(self) -> float:
        return self.value

    def __repr__(self) -> str:
        return f"Constant({self.value!r})"


class Exponential:
    """Exponential durations of mean ``mean`` seconds, shifted by ``shift`` (>= 0)."""

    def __init__(self, mean: float, shift: float = 0.0):
        self._mean = as_float(mean, "mean", positive=True)
        self.shift = as_float(shift, "shift", nonnegative=True)
        _bounded(_log(self.shift), "shift", self.shift, "the shortest draw")
        self._largest = self.shift + _bounded(
            _log(self._mean) + np.log(_BITS_LOG), "mean", self._mean, "the largest draw"
        )

    def draw(self, rng, size: int) -> np.ndarray:
        return self.shift + rng.exponential(self._mean, size)

    @property
    def lower(self) -> float:
        return self.shift

    @property
    def mean(self) -> float:
        return self.shift + self._mean

    def __repr__(self) -> str:
        return f"Exponential(mean={self._mean!r}, shift={self.shift!r})"


class LogNormal:
    """Log-normal durations: ``exp(N(log(median), sigma^2))`` seconds."""

    def __init__(self, median: float, sigma: float):
        self.median = as_float(median, "median", positive=True)
        self.sigma = as_float(sigma, "sigma", nonnegative=True)
        _bounded(_log(self.median), "median", self.median, "the median draw")
        self._largest = _bounded(
            _log(self.median) + 10.0 * self.sigma, "sigma", self.sigma, "a 10-sigma draw"
        )

    def draw(self, rng, size: int) -> np.ndarray:
        return rng.lognormal(np.log(self.median), self.sigma, size)

    @property
    def lower(self) -> float:
        return 0.0 if self.sigma > 0 else self.median

    @property
    def mean(self) -> float:
        return self.median * float(np.exp(self.sigma**2 / 2))

    def __repr__(self) -> str:
        return f"LogNormal(median={self.median!r}, sigma={self.sigma!r})"


class Pareto:
    """Pareto (type I) durations: ``scale * U^(-1/shape)`` seconds, at least ``scale``;
    heavy-tailed stragglers for small ``shape`` (infinite variance for shape <= 2,
    infinite mean for shape <= 1)."""

    def __init__(self, shape: float, scale: float):
        self.shape = as_float(shape, "shape", positive=True)
        self.scale = as_float(scale, "scale", positive=True)
        _bounded(_log(self.scale), "scale", self.scale, "the shortest draw")
        self._largest = _bounded(
            _log(self.scale) + _BITS_LOG / self.shape, "shape", self.shape, "the largest draw"
        )

    def draw(self, rng, size: int) -> np.ndarray:
        return self.scale * (1.0 + rng.pareto(self.shape, size))

    @property
    def lower(self) -> float:
        return self.scale

    @property
    def mean(self) -> float:
        return np.inf if self.shape <= 1 else self.scale * self.shape / (self.shape - 1)

    def __repr__(self) -> str:
        return f"Pareto(shape={self.shape!r}, scale={self.scale!r})"


def as_delay(value, name: str) -> Delay:
    """A :class:`Delay` from a delay or a number of seconds (a :class:`Constant`); one
    error naming ``name`` otherwise."""
    if isinstance(value, Delay) and not isinstance(value, type):
        return value
    if is_scalar(value) and not isinstance(value, str):
        seconds = as_float(value, name, nonnegative=True)
        _bounded(_log(seconds), name, seconds, "a constant delay")
        return Constant(seconds)
    raise TypeError(f"{name} must be a number of seconds or a delay (Constant, Exponential, "
                    f"LogNormal, Pareto), got {show(value)}")  # fmt: skip

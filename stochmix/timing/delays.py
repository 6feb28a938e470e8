"""Delays: the distributions of a time model's durations (seconds of simulated time).

Each delay draws nonnegative durations with ``draw(rng, size)``, vectorized, and knows
its smallest possible value (``lower``) and its mean (``mean``). A plain number where a
delay goes is a :class:`Constant`.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

import numpy as np

from .._validate import as_float, is_scalar, show

__all__ = [
    "Constant",
    "Delay",
    "Exponential",
    "LogNormal",
    "Pareto",
    "as_delay",
]


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
        as_float(value, name, nonnegative=True)
        return Constant(value)
    raise TypeError(f"{name} must be a number of seconds or a delay (Constant, Exponential, "
                    f"LogNormal, Pareto), got {show(value)}")  # fmt: skip

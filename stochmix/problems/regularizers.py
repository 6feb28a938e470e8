r"""Regularizers r(x) with a proximal operator, vectorized over rows.

A composite problem (:class:`~stochmix.problems.Composite`) adds one regularizer r to a
smooth problem: every node's objective is F_i + r, the global one f + r. Proximal methods
never differentiate r; they apply its proximal operator

.. math::

    \operatorname{prox}_{t r}(v) = \arg\min_u\; r(u) + \tfrac{1}{2t}\lVert u - v\rVert^2

to many rows at once: :meth:`Regularizer.prox` takes ``v`` of shape (m, d) (NumPy or
Torch, any device) and ``t`` a number or an array of shape (m, 1) (one step per row) and
returns the m proximal points, with no Python loop over rows.

- :class:`L1`: r(x) = lam ||x||_1 (soft thresholding).
- :class:`ElasticNet`: r(x) = l1 ||x||_1 + (l2 / 2) ||x||^2.
- :class:`GroupLasso`: r(x) = lam sum_g ||x_g||_2 over disjoint groups of coordinates.
- :class:`NonNegative`: the indicator of x >= 0 (prox = projection).
- :class:`Box`: the indicator of low <= x <= high (prox = clipping).

:func:`regularizer` builds one from a name and weights (the configuration's
``regularizer = "l1"``, ``reg_l1 = 0.1``).
"""

from __future__ import annotations

import math
from typing import ClassVar, Protocol, runtime_checkable

import numpy as np

from .._arrays import is_numpy
from .._arrays import like as to_like
from .._validate import as_float, as_int, as_int_array, as_real_array, show

__all__ = [
    "L1",
    "REGULARIZERS",
    "Box",
    "ElasticNet",
    "GroupLasso",
    "NonNegative",
    "Regularizer",
    "prox_kernel",
    "regularizer",
]


@runtime_checkable
class Regularizer(Protocol):
    """A convex regularizer with a vectorized proximal operator (see the module
    docstring). ``name`` names it; ``indicator`` is True for the indicator of a convex set
    (value 0 on it, +inf outside; no subgradient is offered)."""

    name: str
    indicator: bool

    def value(self, x) -> float:
        """r(x) for one point x of shape (d,)."""
        ...

    def prox(self, v, t):
        """prox_{t r} of every row of ``v`` (m, d); ``t`` a number or (m, 1) array."""
        ...


def _clip(v, low, high):
    """``v`` clipped to [low, high] (numbers or arrays broadcasting against it), in
    ``v``'s namespace."""
    if is_numpy(v):
        return np.clip(v, low, high)
    import torch  # a Torch tensor: torch is imported already

    def bound(value):
        if torch.is_tensor(value):
            return value
        return torch.as_tensor(np.asarray(value, dtype=np.float64), dtype=v.dtype, device=v.device)

    return torch.minimum(torch.maximum(v, bound(low)), bound(high))


def _step(t, v):
    """The prox step ``t`` as a number or an array broadcasting against ``v``'s rows."""
    if isinstance(t, (int, float, np.floating)):
        return float(t)
    if is_numpy(v):
        return np.asarray(t, dtype=v.dtype).reshape(-1, 1)
    return to_like(np.asarray(t, dtype=np.float64).reshape(-1, 1), v)


def _soft_threshold(v, threshold):
    """sign(v) max(|v| - threshold, 0) = v - clip(v, -threshold, threshold)."""
    return v - _clip(v, -threshold, threshold)


class _Weighted:
    """Shared parts of the weighted regularizers: the checked weights and the repr."""

    indicator = False
    _weights: ClassVar[tuple[str, ...]] = ()

    def subgradient(self, x):
        """A subgradient of r at every row of ``x`` (m, d), for subgradient methods."""
        raise NotImplementedError

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={getattr(self, k)!r}" for k in self._weights)
        return f"{type(self).__name__}({params})"

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and repr(other) == repr(self)

    def __hash__(self) -> int:
        return hash(repr(self))


def _weight(value, name: str) -> float:
    w = as_float(value, name, nonnegative=True)
    if not math.isfinite(w):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return w


class L1(_Weighted):
    r"""r(x) = lam ||x||_1; ``prox_{t r}(v) = sign(v) max(abs(v) - t lam, 0)``, entry by
    entry.

    Args:
        weight: lam >= 0, finite.
    """

    name = "l1"
    _weights = ("weight",)

    def __init__(self, weight):
        self.weight = _weight(weight, "weight")

    def value(self, x) -> float:
        return self.weight * float(np.abs(np.asarray(x)).sum())

    def prox(self, v, t):
        return _soft_threshold(v, _step(t, v) * self.weight)

    def prox_kernel(self, t: float) -> tuple[str, tuple[float, ...]]:
        """The prox with step ``t`` as an element-wise kernel of the compiled programs
        (see :func:`prox_kernel`): ``("shrink", (t lam,))``."""
        return "shrink", (float(t) * self.weight,)

    def subgradient(self, x):
        """lam sign(x) (0 where x_j = 0)."""
        return self.weight * (np.sign(x) if is_numpy(x) else x.sign())


class ElasticNet(_Weighted):
    r"""r(x) = l1 ||x||_1 + (l2 / 2) ||x||^2; prox_{t r}(v) = soft(v, t l1) / (1 + t l2).

    Args:
        l1: the L1 weight >= 0, finite.
        l2: the squared-norm weight >= 0, finite (r's strong convexity).
    """

    name = "elastic_net"
    _weights = ("l1", "l2")

    def __init__(self, l1, l2):
        self.l1 = _weight(l1, "l1")
        self.l2 = _weight(l2, "l2")

    def value(self, x) -> float:
        x = np.asarray(x)
        return self.l1 * float(np.abs(x).sum()) + 0.5 * self.l2 * float(x @ x)

    def prox(self, v, t):
        t = _step(t, v)
        return _soft_threshold(v, t * self.l1) / (1.0 + t * self.l2)

    def prox_kernel(self, t: float) -> tuple[str, tuple[float, ...]]:
        """``("shrink_scaled", (t l1, 1 + t l2))`` (see :func:`prox_kernel`)."""
        return "shrink_scaled", (float(t) * self.l1, 1.0 + float(t) * self.l2)

    def subgradient(self, x):
        """l1 sign(x) + l2 x."""
        sign = np.sign(x) if is_numpy(x) else x.sign()
        return self.l1 * sign + self.l2 * x


class GroupLasso(_Weighted):
    r"""r(x) = lam sum_g ||x_g||_2 over disjoint groups g of coordinates;
    prox_{t r}(v)_g = max(0, 1 - t lam / ||v_g||) v_g (block soft thresholding).

    Args:
        weight: lam >= 0, finite.
        groups: one group label per coordinate, an int array of shape (d,) (any labels:
            coordinates with equal labels form a group), or an int g >= 1: consecutive
            groups of g coordinates (d must be a multiple of g).

    The group norms of all rows are one product with the (d, G) membership matrix, so a
    prox costs O(m d) whatever the number of groups.
    """

    name = "group_lasso"
    _weights = ("weight", "groups")

    def __init__(self, weight, groups):
        self.weight = _weight(weight, "weight")
        if isinstance(groups, (int, np.integer)) and not isinstance(groups, bool):
            self.groups: int | tuple = as_int(groups, "groups", minimum=1)
        else:
            if isinstance(groups, (str, bool)) or groups is None:
                raise TypeError(
                    f"groups must be a group size (int) or one int label per coordinate, got "
                    f"{show(groups)}"
                )
            labels = as_int_array(groups, "groups", ndim=1)
            if labels.size == 0:
                raise ValueError("groups must hold one label per coordinate, got none")
            self.groups = tuple(int(g) for g in labels)
        self._membership: dict = {}

    def membership(self, dim: int) -> np.ndarray:
        """The (d, G) 0/1 matrix whose column g marks the coordinates of group g."""
        found = self._membership.get(dim)
        if found is None:
            if isinstance(self.groups, int):
                if dim % self.groups:
                    raise ValueError(
                        f"groups = {self.groups} (a group size) must divide the dimension {dim}"
                    )
                labels = np.arange(dim) // self.groups
            else:
                if len(self.groups) != dim:
                    raise ValueError(
                        f"groups has {len(self.groups)} labels but the model has {dim} coordinates"
                    )
                labels = np.unique(np.asarray(self.groups), return_inverse=True)[1]
            found = np.zeros((dim, int(labels.max()) + 1))
            found[np.arange(dim), labels] = 1.0
            self._membership[dim] = found
        return found

    def value(self, x) -> float:
        x = np.asarray(x, dtype=np.float64)
        g = self.membership(x.shape[-1])
        return self.weight * float(np.sqrt((x * x) @ g).sum())

    def prox(self, v, t):
        g = self.membership(v.shape[-1])
        if not is_numpy(v):
            g = to_like(g, v)
        norms = ((v * v) @ g) ** 0.5
        threshold = _step(t, v) * self.weight
        if is_numpy(v):
            with np.errstate(divide="ignore", invalid="ignore"):
                scale = np.where(norms > threshold, 1.0 - threshold / norms, 0.0)
        else:
            import torch

            safe = torch.where(norms > 0, norms, torch.ones_like(norms))
            scale = torch.where(norms > threshold, 1.0 - threshold / safe, 0.0)
        return v * (scale @ g.T)

    def subgradient(self, x):
        """lam x_g / ||x_g|| on the groups with x_g != 0, 0 on the others."""
        g = self.membership(x.shape[-1])
        norms = np.sqrt((x * x) @ g)
        with np.errstate(divide="ignore", invalid="ignore"):
            inv = np.where(norms > 0, 1.0 / norms, 0.0)
        return self.weight * x * (inv @ g.T)


class _Indicator(_Weighted):
    """The indicator of a closed convex set: value 0 on it, +inf outside. Points within
    1e-12 of it, relative, count as on it (rounding of a projection), and so do points
    whose float32 rounding is its own float32 projection: a float32 run's model averages
    rows clipped to the bounds as float32 numbers (``float32(-0.15)`` lies 6e-9 below
    -0.15), which must not read as outside the set."""

    indicator = True

    def prox(self, v, t):
        raise NotImplementedError

    def subgradient(self, x):
        raise ValueError(
            f"the indicator regularizer {self!r} has no finite subgradient outside its set: "
            "use a proximal method (its prox is the projection)"
        )

    def value(self, x) -> float:
        x = np.asarray(x, dtype=np.float64)
        gap = np.abs(x - self.prox(x[None, :], 1.0)[0])
        if float(gap.max(initial=0.0)) <= 1e-12 * max(1.0, float(np.abs(x).max(initial=0.0))):
            return 0.0
        single = x.astype(np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            projected = np.asarray(self.prox(single[None, :], 1.0)[0]).astype(np.float32)
        return 0.0 if np.array_equal(single, projected) else math.inf


def _bound(value, name: str) -> np.ndarray:
    """A box bound: a number or a 1-d array of real numbers (+-inf allowed, not NaN)."""
    if isinstance(value, bool) or value is None:
        raise TypeError(f"{name} must be a number or a 1-d array of numbers, got {value!r}")
    arr = as_real_array(value, name, finite=False)
    if arr.ndim > 1:
        raise ValueError(f"{name} must be a number or a 1-d array, got shape {arr.shape}")
    if np.isnan(arr).any():
        raise ValueError(f"{name} must not hold NaN, got {show(value)}")
    return arr


class NonNegative(_Indicator):
    """The indicator of x >= 0; prox = max(v, 0)."""

    name = "nonnegative"

    def prox(self, v, t):
        return _clip(v, 0.0, math.inf)

    def prox_kernel(self, t: float) -> tuple[str, tuple[float, ...]]:
        """``("clip", (0, inf))`` (see :func:`prox_kernel`)."""
        return "clip", (0.0, math.inf)


class Box(_Indicator):
    """The indicator of low <= x <= high (entry by entry); prox = clipping.

    Args:
        low, high: numbers or arrays of shape (d,), low <= high; -inf/+inf allowed.
    """

    name = "box"
    _weights = ("low", "high")

    def __init__(self, low=-math.inf, high=math.inf):
        lo = _bound(low, "low")
        hi = _bound(high, "high")
        if lo.ndim and hi.ndim and lo.size != hi.size:
            raise ValueError(
                f"low and high must have the same length, got {lo.size} and {hi.size}: "
                f"low={low!r}, high={high!r}"
            )
        if np.any(lo > hi):
            raise ValueError(f"low must be <= high entry by entry, got low={low!r}, high={high!r}")
        if np.any(lo == math.inf) or np.any(hi == -math.inf):  # {+inf}: no real point
            name, value = ("low", low) if np.any(lo == math.inf) else ("high", high)
            raise ValueError(
                f"{name} must not be {'+' if name == 'low' else '-'}inf (the box would hold "
                f"no real point), got {name}={value!r}"
            )
        self.low = float(lo) if lo.ndim == 0 else tuple(lo.tolist())
        self.high = float(hi) if hi.ndim == 0 else tuple(hi.tolist())

    def check_dim(self, dim: int) -> None:
        """Raise a ValueError naming ``low`` or ``high`` unless each is a number or holds
        one bound per coordinate of the model (``dim``): checked when a
        :class:`~stochmix.problems.Composite` is made, before any work."""
        for name, bound in (("low", self.low), ("high", self.high)):
            if isinstance(bound, tuple) and len(bound) != dim:
                raise ValueError(
                    f"{name} must be a number or hold one bound per coordinate ({dim}), "
                    f"got {len(bound)} bounds: {name}={bound!r}"
                )

    def prox(self, v, t):
        low = self.low if isinstance(self.low, float) else np.asarray(self.low)
        high = self.high if isinstance(self.high, float) else np.asarray(self.high)
        return _clip(v, low, high)

    def prox_kernel(self, t: float) -> tuple[str, tuple[float, ...]] | None:
        """``("clip", (low, high))`` for bounds that are numbers; None for bounds per
        coordinate (a row map then; see :func:`prox_kernel`)."""
        if isinstance(self.low, float) and isinstance(self.high, float):
            return "clip", (self.low, self.high)
        return None


def prox_kernel(regularizer, t) -> tuple[str, tuple[float, ...]] | None:
    """The prox of ``regularizer`` with the step ``t`` (a number) as an element-wise kernel
    of the engine's compiled programs: ``(kernel name, round scalars)`` (see
    :mod:`stochmix.engine.model.kernels`), or None when it is not one (a group lasso, a
    box with bounds per coordinate, a regularizer of the user's without a ``prox_kernel``
    method, a step per row). A regularizer that has one promises that the kernel computes
    its ``prox`` entry by entry; the prox of such a regularizer then runs inside the
    compiled run of phases around it instead of as a row map of its own."""
    method = getattr(regularizer, "prox_kernel", None)
    if method is None or isinstance(t, bool) or not isinstance(t, (int, float, np.floating)):
        return None
    return method(float(t))


#: name -> the class a configuration's ``regularizer = name`` builds
REGULARIZERS = {
    "l1": L1,
    "elastic_net": ElasticNet,
    "group_lasso": GroupLasso,
    "nonnegative": NonNegative,
    "box": Box,
}


def regularizer(name: str, **weights) -> Regularizer:
    """The regularizer ``name`` (a key of :data:`REGULARIZERS`) with its weights:
    ``regularizer("l1", weight=0.1)``, ``regularizer("box", low=-1, high=1)``."""
    cls = REGULARIZERS.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ValueError(f"regularizer must be one of {sorted(REGULARIZERS)}, got {name!r}")
    try:
        return cls(**weights)
    except TypeError as error:
        raise TypeError(f"regularizer {name!r}: {error}") from None

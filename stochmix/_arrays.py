"""Arrays of either backend: NumPy, or Torch where it is installed.

This module imports nothing else of ours. Problems write each gradient formula once against
an array namespace (``array_api_compat``), so the same code serves NumPy arrays and Torch
tensors on any device.

Torch is never imported here: importing it costs about a second and 180 MB, which every
``import stochmix`` would pay for a backend most runs do not use. :class:`Array` recognises
tensors only once torch is loaded (a tensor cannot exist before), and :func:`torch`
imports it for the code that needs it.
"""

from __future__ import annotations

import sys
from functools import partial
from typing import TYPE_CHECKING, TypeAlias

import numpy as np

from ._pool import CORES, on_pool_thread, on_threads


class _ArrayType(type):
    """``isinstance(x, Array)``: a NumPy array, or a Torch tensor if torch is loaded."""

    def __instancecheck__(cls, obj) -> bool:
        return isinstance(obj, np.ndarray) or isinstance(obj, _loaded_tensor_type())

    def __subclasscheck__(cls, sub) -> bool:
        return issubclass(sub, np.ndarray) or issubclass(sub, _loaded_tensor_type())


if TYPE_CHECKING:  # what the class below stands for, to a static type checker
    import torch as _torch

    Array: TypeAlias = np.ndarray | _torch.Tensor
else:

    class Array(metaclass=_ArrayType):
        """A NumPy array or a Torch tensor, for annotations such as ``Float[Array, "m d"]``.

        Not instantiated: it only answers ``isinstance`` (and ``issubclass``), so jaxtyping
        and the runtime checker check dtypes and shapes of both kinds without importing
        torch.
        """

        def __new__(cls, *args, **kwargs):
            raise TypeError("Array is a type for annotations and isinstance checks only")


def _loaded_tensor_type() -> tuple[type, ...]:
    """``(torch.Tensor,)`` when torch is already imported, else ``()`` (matches nothing)."""
    tensor = getattr(sys.modules.get("torch"), "Tensor", None)  # None where torch is blocked
    return (tensor,) if isinstance(tensor, type) else ()


def torch():
    """The ``torch`` module, imported on first use. Raises ImportError without torch."""
    import torch

    return torch


def is_numpy(x) -> bool:
    """True for NumPy arrays (the sparse CPU backend)."""
    return isinstance(x, np.ndarray)


def namespace(x):
    """The array-API namespace of ``x`` (``array_api_compat`` wraps NumPy and Torch)."""
    from array_api_compat import array_namespace

    return array_namespace(x)


def to_numpy(x) -> np.ndarray:
    """``x`` as a NumPy array (copied off the device when needed)."""
    if is_numpy(x):
        return x
    return x.detach().cpu().numpy()


def like(array: np.ndarray, x):
    """The NumPy ``array`` in the namespace, device and (floating) dtype of ``x``."""
    if is_numpy(x):
        if np.issubdtype(array.dtype, np.floating):
            return array.astype(x.dtype, copy=False)
        return array
    if np.issubdtype(array.dtype, np.floating):
        return torch().tensor(array, dtype=x.dtype, device=x.device)
    return torch().tensor(array, device=x.device)


def cache_key(x) -> tuple:
    """What identifies the copies of a problem's data that suit ``x``."""
    if is_numpy(x):
        return ("numpy", x.dtype.name)
    return ("torch", str(x.device), str(x.dtype))


#: Arrays of at least this many entries are summed by :func:`row_sums` in two halves of
#: their rows, then added (the halves on two threads where the process has two CPUs).
HALVES_MIN = 1 << 18


def row_sums(rows: np.ndarray) -> np.ndarray:
    """The sum of the rows of ``rows`` (s, ...) -> (...). NumPy adds one row of d values
    at a time, slow for small d; a C-contiguous (s, d) array is summed as views of about
    1024 values per row instead, then folded; one of at least :data:`HALVES_MIN` entries
    as two halves of those views, each summed alone, then added (on two threads: a state
    of 10^5 rows, d = 10, outside the caches, 0.27 against 0.40 ms). The order depends
    on the shape alone, never on the threads, so a segment's sum is the same bits on
    whatever rank holds it."""
    if rows.ndim != 2 or not rows.flags.c_contiguous:
        return rows.sum(axis=0)
    s, d = rows.shape
    k = max(1, 1024 // max(d, 1))
    m = (s // k) * k
    if k == 1 or m == 0:
        return rows.sum(axis=0)
    views = rows[:m].reshape(m // k, k * d)
    if rows.size < HALVES_MIN:
        wide = views.sum(axis=0)
    else:
        half = views.shape[0] // 2
        if CORES > 1 and not on_pool_thread():  # (NumPy's sums let go of the GIL)
            low, high = on_threads([partial(views[:half].sum, axis=0),
                                    partial(views[half:].sum, axis=0)])  # fmt: skip
            wide = low + high
        else:
            wide = views[:half].sum(axis=0) + views[half:].sum(axis=0)
    total = wide.reshape(k, d).sum(axis=0)
    if m < s:
        total += rows[m:].sum(axis=0)
    return total

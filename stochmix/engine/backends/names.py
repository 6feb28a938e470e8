"""Backends by name: ``run(backend="numpy" | "torch" | "distributed")``.

Above the backends' own modules (it imports each when named: the Torch and distributed
ones only then), so that none of them imports another through it.
"""

from __future__ import annotations

import numpy as np

from ..._validate import choice
from .numpy_backend import NumpyBackend

__all__ = ["BACKENDS", "make_backend"]

#: The backends a run takes by name (``run(backend=...)``).
BACKENDS = ("numpy", "torch", "distributed")


def make_backend(backend, dtype=np.float64, **options):
    """A backend from its name ("numpy", "torch", "distributed") or an already built
    backend object.

    ``options`` go to the Torch backend (``device``, ``mixing``), or ``compiled`` to the
    NumPy backend."""
    if not isinstance(backend, str):
        if options:
            raise ValueError(
                f"options {sorted(options)} apply to a backend given by name; "
                f"set them on the {type(backend).__name__} object instead"
            )
        _check_dtype(backend, dtype)
        return backend
    choice(backend, "backend", BACKENDS)
    if backend == "distributed":
        if options.pop("compiled", "auto") is True:
            raise ValueError('compiled=True needs backend="numpy" (Numba compiles NumPy code)')
        if options:
            raise ValueError(f"options {sorted(options)} apply to the torch backend only")
        from .distributed import DistributedBackend

        return DistributedBackend(dtype)
    if backend == "torch":
        if options.pop("compiled", "auto") is True:
            raise ValueError('compiled=True needs backend="numpy" (Numba compiles NumPy code)')
        from .torch_backend import TorchBackend

        try:
            return TorchBackend(dtype, **options)
        except ImportError:
            raise ValueError(
                'backend="torch" needs PyTorch: pip install "stochmix[torch]"'
            ) from None
    compiled = options.pop("compiled", "auto")
    if options:
        raise ValueError(f"options {sorted(options)} apply to the torch backend only")
    return NumpyBackend(dtype, compiled)


def _check_dtype(backend, dtype) -> None:
    """Refuse a ``dtype`` other than the default that the backend object does not hold
    (the object's own dtype is what a run computes in: the argument would be ignored)."""
    given = np.dtype(dtype)
    own = getattr(backend, "dtype", None)
    if given == np.float64 or own is None:  # (the default, or a backend without a dtype)
        return
    try:
        held = np.dtype(str(own).removeprefix("torch."))
    except TypeError:
        return
    if held != given:
        raise ValueError(
            f"dtype={given.name} but the {type(backend).__name__} object computes in "
            f"{held.name}: give the dtype to the backend object ({type(backend).__name__}"
            f"(dtype=...)), or the backend by name"
        )

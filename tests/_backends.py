"""Backends the tests compare the engine's fast path against, and the engine's three
paths as run options."""

import pytest

from stochmix.engine import NumpyBackend

#: the engine's paths for node-local runs: NumPy programs, the compiled (Numba) loop, Torch
PATHS = ("numpy programs", "compiled", "torch")


def path_options(path: str, dtype=None) -> dict:
    """The options of :func:`stochmix.run` that take ``path`` (one of :data:`PATHS`), in
    ``dtype`` when given (on Torch the backend holds it); skips where Torch or Numba is
    missing."""
    if path == "torch":
        pytest.importorskip("torch")
        from stochmix.engine import TorchBackend

        return {"backend": TorchBackend() if dtype is None else TorchBackend(dtype=dtype)}
    if path == "compiled":
        pytest.importorskip("numba")
    options: dict = {"compiled": path == "compiled"}
    if dtype is not None:
        options["dtype"] = dtype
    return options


class SparseOnly(NumpyBackend):
    """The NumPy backend with the compiled node-local path switched off: every phase is
    applied through its sparse rows (the general path)."""

    name = "numpy-sparse-only"
    runs_local_phases = False


class WholeBlocks(NumpyBackend):
    """The NumPy backend whose mixing phases stay whole-block phases: no ``run_products``,
    so none joins a run of node-local phases (for the tests of the whole-block path)."""

    def __getattribute__(self, name):
        if name == "run_products":
            raise AttributeError(name)
        return super().__getattribute__(name)

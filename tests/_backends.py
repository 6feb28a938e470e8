"""Backends the tests compare the engine's fast path against."""

from stochmix.engine import NumpyBackend


class SparseOnly(NumpyBackend):
    """The NumPy backend with the compiled node-local path switched off: every phase is
    applied through its sparse rows (the general path)."""

    name = "numpy-sparse-only"
    runs_local_phases = False

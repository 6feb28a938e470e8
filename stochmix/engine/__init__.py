"""The generic iterate engine: stacked state, row-sparse phases, backends, run loop."""

from .backends import NumpyBackend, make_backend
from .layout import Block, Layout
from .loop import CheckpointWarning, DivergenceError, DivergenceWarning, run
from .method import Method, RunContext
from .phase import Phase, PhaseBuilder
from .result import Result

__all__ = [
    "Block",
    "CheckpointWarning",
    "DivergenceError",
    "DivergenceWarning",
    "Layout",
    "Method",
    "NumpyBackend",
    "Phase",
    "PhaseBuilder",
    "Result",
    "RunContext",
    "make_backend",
    "run",
]

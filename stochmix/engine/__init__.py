"""The generic iterate engine: stacked state, row-sparse phases, backends, run loop."""

from .backend_names import make_backend
from .backends import NumpyBackend, TorchBackend
from .equations import Equations, dot, grad, mean, total
from .explain import Explanation, explain
from .layout import Block, Layout
from .loop import CheckpointWarning, DivergenceError, DivergenceWarning, run
from .method import Method, RunContext
from .phase import Phase, PhaseBuilder
from .phase_cache import PhaseCache
from .result import Result
from .rowmap import MapInfo, NonlinearPhaseError, RowFunction, RowMap, map_generator
from .slowpath import SlowPathWarning

__all__ = [
    "Block",
    "CheckpointWarning",
    "DivergenceError",
    "DistributedBackend",
    "DivergenceWarning",
    "Equations",
    "Explanation",
    "Layout",
    "MapInfo",
    "Method",
    "NonlinearPhaseError",
    "NumpyBackend",
    "Phase",
    "PhaseBuilder",
    "PhaseCache",
    "Result",
    "RowFunction",
    "RowMap",
    "RunContext",
    "SlowPathWarning",
    "TorchBackend",
    "dot",
    "explain",
    "grad",
    "make_backend",
    "map_generator",
    "mean",
    "run",
    "total",
]


def __getattr__(name: str):
    # the distributed backend's module is loaded on first use (it is large, and a run on
    # one process never needs it): stochmix.engine.DistributedBackend still works
    if name == "DistributedBackend":
        from .distributed import DistributedBackend

        return DistributedBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

"""The generic iterate engine: stacked state, row-sparse phases, backends, run loop.

Its stages are folders, each importing only the ones before it:
:mod:`~stochmix.engine.model` (what a method writes) -> :mod:`~stochmix.engine.plan`
(a round cut into segments) -> :mod:`~stochmix.engine.codegen` (one writer per target)
-> :mod:`~stochmix.engine.backends` (NumPy, Torch, distributed) ->
:mod:`~stochmix.engine.runner` (the run: the loop and its result; the folder is not
named ``run``, which is the function :func:`stochmix.engine.run`).
"""

from . import _moved
from .backends import NumpyBackend, TorchBackend
from .backends.names import make_backend
from .model.equations import Equations, dot, grad, mean, total
from .model.layout import Block, Layout
from .model.method import Method, RunContext
from .model.phase import Phase, PhaseBuilder
from .model.phase_cache import PhaseCache
from .model.rowmap import MapInfo, NonlinearPhaseError, RowFunction, RowMap, map_generator
from .plan.slowpath import SlowPathWarning
from .runner.explain import Explanation, explain
from .runner.loop import CheckpointWarning, DivergenceError, DivergenceWarning, run
from .runner.result import Result

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
        from .backends.distributed import DistributedBackend

        return DistributedBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_moved.install()  # the 0.1 module paths (stochmix.engine.loop, ...), for one release

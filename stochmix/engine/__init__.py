"""The generic iterate engine: stacked state, row-sparse phases, backends, run loop.

Its stages are folders, each importing only the ones before it:
:mod:`~stochmix.engine.model` (what a method writes) -> :mod:`~stochmix.engine.plan`
(a round cut into segments) -> :mod:`~stochmix.engine.codegen` (one writer per target)
-> :mod:`~stochmix.engine.backends` (NumPy, Torch, distributed) ->
:mod:`~stochmix.engine.runner` (the run: the loop and its result; the folder is not
named ``run``, which is the function :func:`stochmix.engine.run`).
"""

from typing import TYPE_CHECKING, Any

from .._lazy import LazyExports
from . import _moved
from .backends import NumpyBackend
from .backends.names import make_backend
from .model.equations import Equations, dot, grad, mean, total
from .model.layout import Block, Layout
from .model.method import Method, RunContext
from .model.phase import Phase, PhaseBuilder
from .model.phase_cache import PhaseCache
from .model.rowmap import MapInfo, NonlinearPhaseError, RowFunction, RowMap, map_generator
from .plan.slowpath import SlowPathWarning
from .runner.loop import DivergenceError, DivergenceWarning, run
from .runner.result import Result

if TYPE_CHECKING:  # imported on first use (below), named here for type checkers and IDEs
    from .backends.distributed import DistributedBackend
    from .backends.torch_backend import TorchBackend
    from .runner.checkpointer import CheckpointWarning
    from .runner.explain import Explanation, explain

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


#: imported on first use: the distributed backend's module is large, and a run on one
#: process never needs it; a NumPy run never needs the Torch backend either, nor a run
#: without checkpoint= the checkpoint files; explain() plans a run without running it,
#: and most runs never call it (stochmix.engine.DistributedBackend and
#: stochmix.engine.explain still work)
_EXPORTS = LazyExports(
    __name__,
    {
        "DistributedBackend": ".backends.distributed",
        "TorchBackend": ".backends.torch_backend",
        "CheckpointWarning": ".runner.checkpointer",
        "Explanation": ".runner.explain",
        "explain": ".runner.explain",
    },
)


if not TYPE_CHECKING:  # hidden from type checkers, so that they flag a misspelt name

    def __getattr__(name: str) -> Any:
        return _EXPORTS.load(name)

    def __dir__() -> list[str]:
        return _EXPORTS.dir()


_moved.install()  # the 0.1 module paths (stochmix.engine.loop, ...), for one release

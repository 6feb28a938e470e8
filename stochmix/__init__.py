"""stochmix: federated and decentralized optimization as matrix recursions.

Every method is one recursion over a stacked state (one row per node), driven by row- and
column-stochastic mixing matrices from time-varying graphs, and run by one engine::

    import stochmix as sm

    problem = sm.problems.LeastSquares.random(20, 10, seed=0)
    participation = sm.participation.Bernoulli.heterogeneous(20, 0.1, 0.9, seed=0)
    result = sm.run(sm.algorithms.FOCUS(lr=0.002, local_steps=5), problem, participation, 500)
    result.summary()

The subpackages and names below are imported when first used (``sm.run`` imports the
engine, ``sm.algorithms.FOCUS`` the engine and :mod:`~stochmix.algorithms.focus` only),
so that ``import stochmix`` costs little more than NumPy, SciPy and NetworkX do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._lazy import LazyExports
from ._version import __version__

if TYPE_CHECKING:  # what the names below resolve to, for type checkers and IDEs
    from . import algorithms, engine, mixing, participation, problems, protocols, studies
    from .engine import (
        Block,
        Equations,
        Explanation,
        Method,
        PhaseBuilder,
        Result,
        RunContext,
        SlowPathWarning,
        explain,
        run,
    )
    from .protocols import BackendLike, ParticipationLike, ProblemLike
    from .reporting import compare
    from .studies import Study, sweep

#: each public name -> the module that defines it, imported on first use
_EXPORTS = LazyExports(
    __name__,
    {
        **dict.fromkeys(
            "Block Equations Explanation Method PhaseBuilder Result RunContext SlowPathWarning"
            " explain run".split(),
            ".engine",
        ),
        **dict.fromkeys(["BackendLike", "ParticipationLike", "ProblemLike"], ".protocols"),
        "compare": ".reporting",
        "Study": ".studies",
        "sweep": ".studies",
    },
    submodules=[
        "algorithms",
        "engine",
        "mixing",
        "participation",
        "problems",
        "protocols",
        "studies",
    ],
)

__all__ = [
    "BackendLike",
    "Block",
    "Equations",
    "Explanation",
    "Method",
    "ParticipationLike",
    "PhaseBuilder",
    "ProblemLike",
    "Result",
    "RunContext",
    "SlowPathWarning",
    "Study",
    "__version__",
    "compare",
    "explain",
    "algorithms",
    "engine",
    "mixing",
    "participation",
    "problems",
    "protocols",
    "run",
    "studies",
    "sweep",
]


if not TYPE_CHECKING:  # hidden from type checkers, so that they flag a misspelt name

    def __getattr__(name: str) -> Any:
        return _EXPORTS.load(name)

    def __dir__() -> list[str]:
        return _EXPORTS.dir()

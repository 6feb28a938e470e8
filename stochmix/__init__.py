"""stochmix: federated and decentralized optimization as matrix recursions.

Every method is one recursion over a stacked state (one row per node), driven by row- and
column-stochastic mixing matrices from time-varying graphs, and run by one engine::

    import stochmix as sm

    problem = sm.problems.LeastSquares.random(20, 10, seed=0)
    participation = sm.participation.Bernoulli.heterogeneous(20, 0.1, 0.9, seed=0)
    result = sm.run(sm.algorithms.FOCUS(lr=0.002, local_steps=5), problem, participation, 500)
    result.summary()
"""

from . import algorithms, engine, mixing, participation, problems, protocols, studies
from ._version import __version__
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

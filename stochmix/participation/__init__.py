"""Who takes part in each round: participation processes, weight rules and statistics.

A process yields one boolean mask over the N clients per round from its own seeded
generator (same seed, same stream), and exposes the marginals ``p_i`` where they are known.
This package depends on nothing else of ours but :mod:`stochmix._validate`, except
:class:`UplinkDrops` (the engine's random streams).

Each name's module is imported when the name is first used
(``stochmix.participation.Bernoulli`` imports :mod:`~stochmix.participation.independent`
and what it needs only; the other modules, ``processes`` included, are imported as
attributes on first use too), so that a run with one process does not pay for the others.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._lazy import LazyExports

if TYPE_CHECKING:  # what the names below resolve to, for type checkers and IDEs
    from . import processes  # noqa: F401  (an attribute, not in __all__)
    from ._record import Activation, ActivationStream
    from .activation import OnePeerPermutation, PoissonClocks, RandomEdge, RandomMatching
    from .base import ParticipationProcess
    from .correlated import Markov, Periodic, Regularized
    from .estimators import FedAUEstimator
    from .independent import Bernoulli, Full, UniformSample, WeightedSample
    from .statistics import (
        empirical_probabilities,
        mean_intervals,
        participation_intervals,
        period_averaged_weights,
        weight_variance,
    )
    from .traces import Trace
    from .uplink import UplinkDrops
    from .weights import unbiased_weights, uniform_weights

#: each public name -> the module that defines it, imported on first use
_EXPORTS = LazyExports(
    __name__,
    {
        "Activation": "._record",
        "ActivationStream": "._record",
        "OnePeerPermutation": ".activation",
        "PoissonClocks": ".activation",
        "RandomEdge": ".activation",
        "RandomMatching": ".activation",
        "ParticipationProcess": ".base",
        "Markov": ".correlated",
        "Periodic": ".correlated",
        "Regularized": ".correlated",
        "FedAUEstimator": ".estimators",
        "Bernoulli": ".independent",
        "Full": ".independent",
        "UniformSample": ".independent",
        "WeightedSample": ".independent",
        "empirical_probabilities": ".statistics",
        "mean_intervals": ".statistics",
        "participation_intervals": ".statistics",
        "period_averaged_weights": ".statistics",
        "weight_variance": ".statistics",
        "Trace": ".traces",
        "UplinkDrops": ".uplink",
        "unbiased_weights": ".weights",
        "uniform_weights": ".weights",
    },
    # the module that held the processes before they were split, an attribute as before
    submodules=["processes"],
)

__all__ = [
    "ParticipationProcess",
    "Full",
    "UniformSample",
    "WeightedSample",
    "Bernoulli",
    "Regularized",
    "Periodic",
    "Markov",
    "Trace",
    "UplinkDrops",
    "Activation",
    "ActivationStream",
    "PoissonClocks",
    "RandomEdge",
    "RandomMatching",
    "OnePeerPermutation",
    "empirical_probabilities",
    "participation_intervals",
    "mean_intervals",
    "period_averaged_weights",
    "weight_variance",
    "uniform_weights",
    "unbiased_weights",
    "FedAUEstimator",
]


if not TYPE_CHECKING:  # hidden from type checkers, so that they flag a misspelt name

    def __getattr__(name: str) -> Any:
        return _EXPORTS.load(name)

    def __dir__() -> list[str]:
        return _EXPORTS.dir()

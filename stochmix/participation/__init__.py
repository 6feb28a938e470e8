"""Who takes part in each round: participation processes, weight rules and statistics.

A process yields one boolean mask over the N clients per round from its own seeded
generator (same seed, same stream), and exposes the marginals ``p_i`` where they are known.
This package depends on nothing else of ours but :mod:`stochmix._validate`.
"""

# the module that held the processes before they were split, still loaded as before
from . import processes  # noqa: F401
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

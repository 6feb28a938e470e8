"""Analysis of methods on problems with affine gradients: exact operators, fixed points and
rates (:mod:`.linear`), FedAvg's participation bias (:mod:`.participation_bias`), and
worst-case rates over whole function classes, certified by semidefinite programs, with
step tuning (:mod:`.certificates`; cvxpy: ``pip install "stochmix[analysis]"``)."""

from .certificates import Certificate, Tuned, WorstCase, certify, tune, worst_quadratic
from .linear import (
    AffineGradients,
    AffineMap,
    FixedPoint,
    LyapunovRate,
    NoCommonFixedPointWarning,
    PeriodicRate,
    SingularMapError,
    affine_gradients,
    conserved_quantities,
    fixed_point_under_pattern,
    lyapunov_rate,
    pattern_operator,
    periodic_rate,
    phase_operator,
    round_operator,
    run_context,
)
from .lower_bounds import (
    communication_rounds_lower_bound,
    decentralized_time_lower_bound,
    gradient_steps_lower_bound,
)
from .participation_bias import (
    Eq4Comparison,
    WeightEstimate,
    all_pull_round_matrix,
    bernoulli_expected_weights,
    compare_with_fedstale_eq4,
    expected_all_pull_matrix,
    expected_weights,
    perron_vector,
    weighted_minimizer,
)

__all__ = [
    "communication_rounds_lower_bound",
    "decentralized_time_lower_bound",
    "gradient_steps_lower_bound",
    "AffineGradients",
    "Certificate",
    "Tuned",
    "WorstCase",
    "certify",
    "tune",
    "worst_quadratic",
    "AffineMap",
    "Eq4Comparison",
    "FixedPoint",
    "LyapunovRate",
    "NoCommonFixedPointWarning",
    "PeriodicRate",
    "SingularMapError",
    "WeightEstimate",
    "affine_gradients",
    "all_pull_round_matrix",
    "conserved_quantities",
    "bernoulli_expected_weights",
    "compare_with_fedstale_eq4",
    "expected_all_pull_matrix",
    "expected_weights",
    "fixed_point_under_pattern",
    "lyapunov_rate",
    "pattern_operator",
    "perron_vector",
    "periodic_rate",
    "phase_operator",
    "round_operator",
    "run_context",
    "weighted_minimizer",
]

"""Worst-case rate certificates over function classes (:func:`certify`), the parameter that
minimises them (:func:`tune`) and the slowest instance a search finds
(:func:`worst_quadratic`). The certificates need cvxpy (``pip install
"stochmix[analysis]"``), imported when a certificate is first solved."""

from .certify import MAX_CLIENTS, Certificate, certify, method_for_mixing
from .expectation import MAX_MASKS, MeanSquareCertificate, certify_mean_square, mask_distribution
from .search import WorstCase, class_matrix, worst_quadratic
from .system import NotLinearError, RoundSystem, agent_systems, round_system, spectral_systems
from .tune import Tuned, rebuild, tune

__all__ = [
    "MAX_CLIENTS",
    "MAX_MASKS",
    "MeanSquareCertificate",
    "Certificate",
    "NotLinearError",
    "RoundSystem",
    "Tuned",
    "WorstCase",
    "agent_systems",
    "certify",
    "certify_mean_square",
    "class_matrix",
    "mask_distribution",
    "method_for_mixing",
    "rebuild",
    "round_system",
    "spectral_systems",
    "tune",
    "worst_quadratic",
]

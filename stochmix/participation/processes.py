"""Participation processes: every name of the former one-module version, re-exported.

The processes now live one concept per module: the base class in
:mod:`stochmix.participation.base`, the processes independent across rounds in
:mod:`stochmix.participation.independent`, those correlated across rounds in
:mod:`stochmix.participation.correlated`, recorded traces in
:mod:`stochmix.participation.traces` and the fast draw kernels in
:mod:`stochmix.participation._draws`. ``from stochmix.participation.processes import X``
keeps working for every ``X`` this module had, private helpers included.

The draws' tuning constants (``_FLOYD_SIZE``, ``_EXPONENTIAL_BOUND``,
``_DENSE_CANDIDATES``, ``_SPARSE_BERNOULLI``) are read from and assigned to the module that
uses them, so ``monkeypatch.setattr(processes, "_FLOYD_SIZE", 0)`` still changes the draws.
"""

from __future__ import annotations

import sys
import types

from . import _draws, independent
from ._draws import DRAWS as DRAWS
from ._draws import _check_draws as _check_draws
from ._draws import _skips as _skips
from ._draws import _uniform_subset as _uniform_subset
from .base import FloatLike as FloatLike
from .base import IntLike as IntLike
from .base import ParticipationProcess
from .base import SeedLike as SeedLike
from .base import _check_rounds as _check_rounds
from .base import _check_size as _check_size
from .base import _mask_from as _mask_from
from .base import _show_vector as _show_vector
from .correlated import Markov, Periodic, Regularized
from .independent import Bernoulli, Full, UniformSample, WeightedSample
from .traces import Trace
from .traces import _load_trace as _load_trace


def _forwarded(owner: types.ModuleType, name: str) -> property:
    """``owner.name``, read and assigned through this module."""
    return property(
        lambda self: getattr(owner, name), lambda self, value: setattr(owner, name, value)
    )


class _Module(types.ModuleType):
    """This module, whose tuning constants are those of the modules that read them."""

    _FLOYD_SIZE = _forwarded(_draws, "_FLOYD_SIZE")
    _EXPONENTIAL_BOUND = _forwarded(_draws, "_EXPONENTIAL_BOUND")
    _DENSE_CANDIDATES = _forwarded(independent, "_DENSE_CANDIDATES")
    _SPARSE_BERNOULLI = _forwarded(independent, "_SPARSE_BERNOULLI")


sys.modules[__name__].__class__ = _Module

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
]

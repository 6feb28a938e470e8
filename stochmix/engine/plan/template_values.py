"""How a round template holds a planned round's values: a coefficient as a number, one
repeated number or an array bound by its rule, and an index array as the participants
shifted by a constant.

Shared by :mod:`~stochmix.engine.plan.template` (runs of node-local phases) and
:mod:`~stochmix.engine.plan.subset_template` (phases on the active nodes' rows).
"""

from __future__ import annotations

import numpy as np

from ..model.round_scalars import RoundArray

__all__ = ["Uniform", "as_array", "shift_of", "template_coefficient"]


class Uniform(float):
    """A per-node coefficient array whose entries are all this number (rebuilt, for each
    instance, as an array of the instance's length: :func:`as_array`)."""


def template_coefficient(value, rules: bool = False):
    """A template's form of a coefficient value: a number as it is (a round scalar
    included), with ``rules`` a :class:`~stochmix.engine.model.round_scalars.RoundArray`
    with its rule as it is (bound for each instance's participants), a :class:`Uniform`
    for a 1-D array of one repeated number, or None (an array of several values, which
    depends on who participates)."""
    if not isinstance(value, (np.ndarray, list, tuple)):
        return value
    if isinstance(value, RoundArray):  # follows the round: bound by its rule, or refused
        return value if rules and value.rule is not None else None
    array = np.asarray(value)
    if array.ndim == 1 and array.size and (array == array[0]).all():
        return Uniform(array[0])
    return None


def as_array(value, size: int):
    """An instance's coefficient: a :class:`Uniform` as an array of ``size`` of it, any
    other value as it is."""
    return np.full(size, float(value)) if isinstance(value, Uniform) else value


def shift_of(indices, participants: np.ndarray):
    """``k`` with ``indices == participants + k`` (an int), or None."""
    if not isinstance(indices, np.ndarray) or indices.shape != participants.shape:
        return None
    if not indices.size:
        return 0
    k = int(indices[0]) - int(participants[0])
    return k if np.array_equal(indices, participants + k) else None

"""A partition applied to a data set's arrays: per-client rows ``(A_i, b_i)`` for
:class:`~stochmix.problems.LeastSquares` (:func:`client_arrays`).

Re-exported by :mod:`stochmix.problems.partition`.
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Float, Real

from .._validate import as_real_array
from ._partition_common import Parts, _as_parts

__all__ = ["client_arrays"]


def client_arrays(
    features: Real[np.ndarray, "n d"],
    targets: Real[np.ndarray, " n"],
    parts: Parts,
) -> tuple[list[Float[np.ndarray, "_ d"]], list[Real[np.ndarray, " _"]]]:
    """Per-client rows: ``([A_0, ..., A_{N-1}], [b_0, ..., b_{N-1}])``.

    ``A_i = features[parts[i]]`` of shape (n_i, d) and ``b_i = targets[parts[i]]`` of shape
    (n_i,), copies; integer features become float64. Pass them on as
    ``LeastSquares(*client_arrays(X, y, parts), reg)``; that needs every part non-empty.

    Raises:
        ValueError: ``features`` not 2-d or not finite, ``targets`` of the wrong length, or
            indices out of range.
        TypeError: ``features`` or ``targets`` that do not hold real numbers, or indices
            that are not integers.
    """
    x = as_real_array(features, "features", keep_float=True)
    if x.ndim != 2:
        raise ValueError(f"features must have shape (n, d), got {x.shape}")
    as_real_array(targets, "targets", finite=False)  # the check: real numbers
    t = np.asarray(targets)  # as given: integer labels stay integers
    if t.shape != (x.shape[0],):
        raise ValueError(f"targets must have shape ({x.shape[0]},), got {t.shape}")
    p = _as_parts(parts, x.shape[0])
    return [x[q] for q in p], [t[q] for q in p]

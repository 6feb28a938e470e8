"""How heterogeneous a partition is: label counts per client (:func:`partition_stats`),
the entropy of each client's labels (:func:`label_entropy`) and each client's most frequent
label (:func:`client_majority`).

Re-exported by :mod:`stochmix.problems.partition`.
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Float, Int, Real

from .._validate import as_int, as_real_array
from ._partition_common import IntLike, Labels, Parts, _as_labels, _as_parts

__all__ = ["client_majority", "label_entropy", "partition_stats"]


def partition_stats(
    labels: Labels, parts: Parts, n_classes: IntLike | None = None
) -> Int[np.ndarray, "N C"]:
    """Label counts per client: entry (i, c) is the number of client i's samples labelled c.

    Args:
        labels: (n,) nonnegative integer class labels.
        parts: N index arrays (overlaps are counted as given).
        n_classes: C, default ``labels.max() + 1``; must exceed every label.

    Returns:
        (N, C) int64 counts; row i sums to ``len(parts[i])``.
    """
    y = _as_labels(labels)
    p = _as_parts(parts, y.size)
    c = int(y.max()) + 1 if n_classes is None else as_int(n_classes, "n_classes", minimum=1)
    if c <= y.max():
        raise ValueError(f"n_classes must exceed the largest label {y.max()}, got {c}")
    owner = np.repeat(np.arange(len(p)), [q.size for q in p])
    flat = owner * c + y[np.concatenate(p)]
    return np.bincount(flat, minlength=len(p) * c).reshape(len(p), c).astype(np.int64)


def label_entropy(counts: Real[np.ndarray, "*N C"]) -> Float[np.ndarray, "*N"] | float:
    """Shannon entropy (nats) of the label distribution in each row of ``counts``.

    ``label_entropy(partition_stats(labels, parts))`` gives each client's entropy, between 0
    (a single label) and log C (all labels equally often); ``label_entropy(np.bincount(labels))``
    gives the global one. Low client entropies relative to the global one mean strong label
    skew. Rows that sum to zero (empty clients) get entropy 0.

    Args:
        counts: (..., C) nonnegative counts (or proportions).

    Returns:
        (...,) entropies in nats; a float for a 1-d ``counts``.
    """
    arr = as_real_array(counts, "counts")
    if arr.ndim < 1 or arr.shape[-1] < 1:
        raise ValueError(f"counts must have a last axis of classes, got shape {arr.shape}")
    if (arr < 0).any():
        index = np.argwhere(arr < 0)[0]
        raise ValueError(
            f"counts must be nonnegative; entry {tuple(int(i) for i in index)} is "
            f"{arr[tuple(index)]}"
        )
    totals = arr.sum(axis=-1, keepdims=True)
    p = np.divide(arr, totals, out=np.zeros_like(arr), where=totals > 0)
    logp = np.log(p, out=np.zeros_like(p), where=p > 0)
    out = -(p * logp).sum(axis=-1)
    return float(out) if arr.ndim == 1 else out


def client_majority(labels: Labels, parts: Parts) -> Int[np.ndarray, " N"]:
    """Each client's most frequent label (ties to the smaller label; -1 for an empty client).

    For a :func:`majority_partition` with ``majority_fraction > 1/2`` this is its
    ``majority``; usable as group labels of :class:`stochmix.participation.Periodic`.
    """
    counts = partition_stats(labels, parts)
    out = counts.argmax(axis=1).astype(np.int64)
    out[counts.sum(axis=1) == 0] = -1
    return out

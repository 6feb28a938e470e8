"""What the partition modules share: the argument checks of labels, client counts and
parts, and the index helpers that turn an owner per sample into parts.

The public partitioners are in :mod:`stochmix.problems.partition` (with its companions
:mod:`~stochmix.problems.partition_majority`, :mod:`~stochmix.problems.partition_statistics`
and :mod:`~stochmix.problems.partition_arrays`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from jaxtyping import Int

from .._validate import as_client_indices, as_int, as_labels, show

IntLike = int | np.integer
FloatLike = float | np.floating
SeedLike = int | np.integer | np.random.SeedSequence | np.random.Generator | None
Labels = Int[np.ndarray, " n"] | Sequence[int]
Parts = Sequence[Int[np.ndarray, " _"]]


# --------------------------------------------------------------------------- checks


def _as_labels(labels, name: str = "labels") -> np.ndarray:
    """A non-empty 1-d int64 vector of nonnegative class labels."""
    if isinstance(labels, (list, tuple)) and len(labels) == 0:
        raise ValueError(f"{name} must hold at least one sample, got an empty array")
    arr = as_labels(labels, name)
    if arr.size == 0:
        raise ValueError(f"{name} must hold at least one sample, got an empty array")
    return arr


def _n_clients(n_clients, n_samples: int, per_client: int = 1) -> int:
    n = as_int(n_clients, "n_clients", minimum=1)
    if n > n_samples:
        raise ValueError(
            f"n_clients must be <= the number of samples ({n_samples}) so that every client "
            f"gets a sample, got {n}"
        )
    return n


def _as_parts(parts, n_samples: int | None, name: str = "parts", *, disjoint: bool = False):
    """The parts as int64 arrays in [0, n_samples); optionally check that none overlap."""
    if isinstance(parts, (np.ndarray, str, bytes)) or not isinstance(parts, Sequence):
        raise TypeError(f"{name} must be a list of index arrays, one per client, got {show(parts)}")
    if len(parts) == 0:
        raise ValueError(f"{name} must be a non-empty list of index arrays, one per client")
    out = [as_client_indices(p, n_samples, f"{name}[{i}]") for i, p in enumerate(parts)]
    if disjoint:
        counts = np.bincount(np.concatenate(out), minlength=n_samples or 0)
        if (counts > 1).any():
            j = int(np.flatnonzero(counts > 1)[0])
            raise ValueError(f"{name} must not share samples; sample {j} is in {counts[j]} parts")
    return out


def _split_by_owner(owner: np.ndarray, n_clients: int) -> list[np.ndarray]:
    """parts[i] = the indices j with owner[j] == i, increasing."""
    order = np.argsort(owner, kind="stable").astype(np.int64)
    counts = np.bincount(owner, minlength=n_clients)
    return np.split(order, np.cumsum(counts)[:-1])


def _ranks_within(groups: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A random order of the samples sorted by group, and each sample's rank in its group.

    Returns ``(order, rank)``: ``groups[order]`` is nondecreasing with ties in random order,
    and ``rank[j]`` is the position of sample j among the samples of its group.
    """
    n = groups.size
    order = np.lexsort((rng.random(n), groups))
    sorted_groups = groups[order]
    first = np.flatnonzero(np.r_[True, sorted_groups[1:] != sorted_groups[:-1]])
    starts = np.repeat(first, np.diff(np.r_[first, n]))
    rank = np.empty(n, dtype=np.int64)
    rank[order] = np.arange(n) - starts
    return order, rank

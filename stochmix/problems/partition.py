"""Splitting a data set's samples among N federated clients.

A *partition* is a list of N one-dimensional int64 arrays: ``parts[i]`` holds the indices of
client i's samples, in increasing order. Every partitioner here assigns every sample to
exactly one client and is reproducible: the same ``seed`` (int, SeedSequence or Generator,
see :func:`stochmix._validate.make_rng`) gives the same partition.

- :func:`iid_partition`: a uniformly random split into near-equal parts.
- :func:`dirichlet_partition`: label skew, class proportions per client ~ Dirichlet(alpha).
- :func:`majority_partition`: one majority class per client (Wang & Ji 2022, Sec. 6).
- :func:`label_swap`: FedStale's heterogeneity knob (Rodio & Neglia 2024, Sec. 5.1).
- :func:`partition_stats`, :func:`label_entropy`, :func:`client_majority`: how heterogeneous
  a partition is.
- :func:`client_arrays`: per-client ``(A_i, b_i)`` for :class:`~stochmix.problems.LeastSquares`.

The loops here run over classes or clients, never over samples.

This module holds the basic partitioners (:func:`iid_partition`, :func:`dirichlet_partition`)
and :func:`label_swap`, and re-exports the rest, so every name above imports from here: the
majority partition and its transport solvers are in
:mod:`stochmix.problems.partition_majority`, the statistics in
:mod:`stochmix.problems.partition_statistics`, :func:`client_arrays` in
:mod:`stochmix.problems.partition_arrays`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from jaxtyping import Bool, Int

from .._validate import as_bool_array, as_client_indices, as_float, as_int, make_rng, show
from ._partition_common import (
    FloatLike,
    IntLike,
    Labels,
    Parts,
    SeedLike,
    _as_labels,
    _as_parts,
    _n_clients,
    _ranks_within,
    _split_by_owner,
)
from .partition_arrays import client_arrays
from .partition_majority import MajorityPartition, majority_partition
from .partition_statistics import client_majority, label_entropy, partition_stats

__all__ = [
    "MajorityPartition",
    "client_arrays",
    "client_majority",
    "dirichlet_partition",
    "iid_partition",
    "label_entropy",
    "label_swap",
    "majority_partition",
    "partition_stats",
]


def _is_mask(value) -> bool:
    """Whether ``value`` is meant as a boolean mask (an array or list of booleans)."""
    if isinstance(value, np.ndarray):
        return value.dtype == np.bool_
    return (
        isinstance(value, (list, tuple))
        and len(value) > 0
        and all(isinstance(v, (bool, np.bool_)) for v in value)
    )


def _dirichlet(rng: np.random.Generator, alpha: float, shape: tuple[int, int]) -> np.ndarray:
    """Rows ~ Dirichlet(alpha, ..., alpha), drawn in log space.

    Uses Gamma(alpha) = Gamma(alpha + 1) * U^(1/alpha), so that a tiny alpha (where the
    gamma variates underflow to 0 and the usual normalisation gives 0/0) is still exact.
    """
    log_g = np.log(rng.standard_gamma(alpha + 1.0, size=shape))
    log_g += np.log1p(-rng.random(shape)) / alpha  # log U, U uniform on (0, 1]
    log_g -= log_g.max(axis=1, keepdims=True)
    p = np.exp(log_g)
    return p / p.sum(axis=1, keepdims=True)


# --------------------------------------------------------------------------- partitioners


def iid_partition(
    n_samples: IntLike, n_clients: IntLike, seed: SeedLike = None
) -> list[Int[np.ndarray, " _"]]:
    """A uniformly random split of ``range(n_samples)`` into ``n_clients`` parts.

    The part sizes differ by at most one (the first ``n_samples % n_clients`` clients hold one
    more sample); which samples go where is uniformly random.

    Args:
        n_samples: n >= 1.
        n_clients: N in [1, n].
        seed: int, SeedSequence, Generator or None.

    Returns:
        N int64 arrays of increasing sample indices; together they hold every index once.
    """
    n = as_int(n_samples, "n_samples", minimum=1)
    clients = _n_clients(n_clients, n)
    rng = make_rng(seed)
    sizes = n // clients + (np.arange(clients) < n % clients)
    owner = np.empty(n, dtype=np.int64)
    owner[rng.permutation(n)] = np.repeat(np.arange(clients), sizes)
    return _split_by_owner(owner, clients)


def dirichlet_partition(
    labels: Labels,
    n_clients: IntLike,
    alpha: FloatLike,
    seed: SeedLike = None,
    min_size: IntLike = 1,
) -> list[Int[np.ndarray, " _"]]:
    """Label-skewed split: each class is divided among the clients in Dirichlet proportions.

    The standard split of Hsu et al. (2019) and Yurochkin et al. (2019): for each class k,
    draw ``p_k ~ Dirichlet(alpha, ..., alpha)`` over the N clients, shuffle the class's n_k
    samples and give client i the i-th block of ``floor(n_k cumsum(p_k))`` boundaries, about
    ``p_k[i] n_k`` samples. Large ``alpha`` gives every client nearly the global label mix
    (``alpha -> inf`` is a stratified IID split); small ``alpha`` concentrates each class on
    a few clients, so that each client sees few classes.

    Minimum size: a plain draw can leave clients with fewer than ``min_size`` samples (often
    with small alpha and many clients). Instead of redrawing until it does not (which for
    small alpha may practically never happen), the draw is *rebalanced*: every short client
    receives just the samples it lacks, taken uniformly at random from the clients above
    ``min_size`` without bringing any of them below it. This moves the fewest samples
    possible (the total shortfall) and leaves the partition untouched when no client is short.
    ``min_size=0`` keeps the raw draw (clients may then be empty).

    Args:
        labels: (n,) nonnegative integer class labels.
        n_clients: N in [1, n].
        alpha: Dirichlet concentration, > 0 (any size: tiny values are drawn in log space).
        seed: int, SeedSequence, Generator or None.
        min_size: least number of samples per client, >= 0, with ``N * min_size <= n``.

    Returns:
        N int64 arrays of increasing sample indices; together they hold every index once.

    Raises:
        ValueError: ``alpha <= 0``, more clients than samples, or ``N * min_size > n``.
    """
    y = _as_labels(labels)
    n = y.size
    clients = _n_clients(n_clients, n)
    a = as_float(alpha, "alpha", positive=True)
    least = as_int(min_size, "min_size", minimum=0)
    if clients * least > n:
        raise ValueError(
            f"min_size must be <= n_samples / n_clients = {n} / {clients}, got {least}"
        )
    rng = make_rng(seed)
    _, cls = np.unique(y, return_inverse=True)
    class_counts = np.bincount(cls)
    props = _dirichlet(rng, a, (class_counts.size, clients))  # (C, N)
    bounds = np.floor(np.cumsum(props, axis=1) * class_counts[:, None]).astype(np.int64)
    bounds = np.minimum(bounds, class_counts[:, None])
    bounds[:, -1] = class_counts
    alloc = np.diff(bounds, axis=1, prepend=0)  # (C, N): samples of class k for client i
    order, _ = _ranks_within(cls, rng)  # by class, random within a class
    owner = np.empty(n, dtype=np.int64)
    owner[order] = np.repeat(np.tile(np.arange(clients), class_counts.size), alloc.ravel())

    sizes = alloc.sum(axis=0)
    deficit = np.maximum(least - sizes, 0)
    if deficit.any():
        surplus = np.maximum(sizes - least, 0)
        _, rank = _ranks_within(owner, rng)
        spare = np.flatnonzero(rank < surplus[owner])  # at most surplus_i of client i's
        moved = rng.choice(spare, size=int(deficit.sum()), replace=False)
        owner[moved] = np.repeat(np.arange(clients), deficit)
    return _split_by_owner(owner, clients)


def label_swap(
    labels: Labels,
    clients_partition: Parts,
    group: Int[np.ndarray, " g"] | Bool[np.ndarray, " N"] | Sequence[int],
    fraction: FloatLike,
    swap: tuple[int, int] = (0, 1),
    seed: SeedLike = None,
) -> Int[np.ndarray, " n"]:
    """Swap two labels on a fraction of some clients' samples (FedStale's data heterogeneity).

    Rodio & Neglia (2024, Sec. 5.1), following Fraboni et al.: split the data at random
    among the clients, then in the second group of clients swap a fraction sigma_g^2 of two
    labels; sigma_g^2 = 0 is homogeneous data and 1 the most heterogeneous. Here, for every
    client i in ``group``, ``round(fraction * s_i)`` of its s_i samples labelled ``a`` or
    ``b`` (``swap = (a, b)``), chosen uniformly at random, have ``a`` turned into ``b`` and
    ``b`` into ``a``. Nothing else changes.

    Args:
        labels: (n,) nonnegative integer class labels.
        clients_partition: N index arrays that do not overlap (a partition).
        group: the clients whose labels are swapped: indices in [0, N) or a boolean mask (N,).
        fraction: share of each such client's a/b samples to swap, in [0, 1].
        swap: the two labels (a, b), different.
        seed: int, SeedSequence, Generator or None.

    Returns:
        a new (n,) int64 label vector; ``labels`` is not modified.

    Raises:
        ValueError: ``fraction`` outside [0, 1], equal or negative labels in ``swap``, client
            indices out of range, or overlapping parts.
    """
    y = _as_labels(labels)
    parts = _as_parts(clients_partition, y.size, "clients_partition", disjoint=True)
    clients = len(parts)
    if _is_mask(group):
        chosen = np.flatnonzero(as_bool_array(group, "group", shape=(clients,)))
    else:
        single = isinstance(group, (int, np.integer)) and not isinstance(group, bool)
        chosen = np.unique(as_client_indices([group] if single else group, clients, "group"))
    frac = as_float(fraction, "fraction", nonnegative=True, maximum=1.0)
    if isinstance(swap, (str, bytes)) or not isinstance(swap, Sequence):
        raise TypeError(f"swap must be a pair of labels (a, b), got {show(swap)}")
    if len(swap) != 2:
        raise ValueError(f"swap must be a pair of labels (a, b), got {show(swap)}")
    a = as_int(swap[0], "swap[0]", minimum=0)
    b = as_int(swap[1], "swap[1]", minimum=0)
    if a == b:
        raise ValueError(f"swap must name two different labels, got ({a}, {b})")
    rng = make_rng(seed)
    out = y.copy()
    if chosen.size == 0:
        return out
    idx = np.concatenate([parts[i] for i in chosen])
    owner = np.repeat(chosen, [parts[i].size for i in chosen])
    keep = (y[idx] == a) | (y[idx] == b)
    idx, owner = idx[keep], owner[keep]
    if idx.size == 0:
        return out
    per_client = np.bincount(owner, minlength=clients)
    quota = np.floor(frac * per_client + 0.5).astype(np.int64)
    _, rank = _ranks_within(owner, rng)
    flip = idx[rank < quota[owner]]
    out[flip] = a + b - y[flip]
    return out

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
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import scipy.sparse
from jaxtyping import Bool, Float, Int, Real

from .._lazy import lazy_module
from .._validate import (
    as_bool_array,
    as_client_indices,
    as_float,
    as_int,
    as_int_array,
    as_labels,
    as_real_array,
    make_rng,
    show,
)

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

csgraph = lazy_module("scipy.sparse.csgraph")

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


def _is_mask(value) -> bool:
    """Whether ``value`` is meant as a boolean mask (an array or list of booleans)."""
    if isinstance(value, np.ndarray):
        return value.dtype == np.bool_
    return (
        isinstance(value, (list, tuple))
        and len(value) > 0
        and all(isinstance(v, (bool, np.bool_)) for v in value)
    )


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


class MajorityPartition(NamedTuple):
    """The result of :func:`majority_partition`; unpacks as ``parts, majority = ...``."""

    parts: list[np.ndarray]
    """N int64 arrays of increasing sample indices."""
    majority: np.ndarray
    """(N,) int64: each client's majority label (a value of ``labels``)."""


def majority_partition(
    labels: Labels,
    n_clients: IntLike,
    majority_fraction: FloatLike = 0.95,
    seed: SeedLike = None,
    *,
    majority_labels: Int[np.ndarray, " N"] | Sequence[int] | None = None,
) -> MajorityPartition:
    """One majority class per client (Wang & Ji 2022, Sec. 6 and App. D.1).

    Wang & Ji give each of N = 250 clients "data of one majority class label, with 5% of data
    of other (minority) labels" (``majority_fraction = 0.95``), and then make the clients
    available in turn by majority label; :class:`stochmix.participation.Periodic` takes the
    returned ``majority`` (or ``majority // 2`` to pair labels {0, 1}, {2, 3}, ... as they
    do) as its per-client group labels.

    Construction, exact up to rounding:

    1. Majority labels. Unless ``majority_labels`` is given, client i's majority label is
       non-decreasing in i (clients 0, 1, ... share the smallest label, and so on). When
       N >= C (the number of distinct labels), each class gets one client, and the other
       N - C are shared out in proportion to the class sizes (largest remainders), so a
       balanced data set with N = 250, C = 10 gives 25 clients per label, as in the paper.
       When N < C, the N largest classes (ties to the smaller label) get one client each.
    2. Sizes. All clients hold the same number of samples (n / N, as in the paper) when the
       label sizes allow it. Otherwise (say 212 against 357 samples of two labels, where
       the clients of the smaller label cannot fill 95% of an equal share with it) the total
       M_g of the clients of each majority label g is moved as little as possible away from
       the equal share: a common per-client size, clipped to the range in which label g
       can supply a fraction ``majority_fraction`` of M_g and the other clients can absorb
       the rest of label g. Group g then takes ``K_g = round(majority_fraction * M_g)``
       samples of label g, shared among its clients as evenly as possible.
    3. Minority mix. The samples left after the majority blocks go to the clients of other
       majority labels: group g gets about ``(1 - majority_fraction) M_g`` of them, drawn
       from the other labels in proportion to what those labels have left (the
       matrix-scaling solution with a zero diagonal), rounded to whole samples with every
       total kept exact (an integer maximum flow completes the rounding); which samples
       go to which client is uniformly random.

    Every client's share of its majority label is then ``majority_fraction`` up to
    rounding: within about ``1 / m_i`` for a client of m_i samples. For
    ``majority_fraction < 1/2`` the "majority" label need not be the client's most frequent
    one; ``majority_fraction = 1`` gives each client a single label (every label then needs a
    client).

    Args:
        labels: (n,) nonnegative integer class labels.
        n_clients: N in [1, n].
        majority_fraction: share of each client's data with its majority label, in [0, 1].
        seed: int, SeedSequence, Generator or None.
        majority_labels: (N,) the majority label of each client, values taken by ``labels``
            (default: as in step 1).

    Returns:
        ``MajorityPartition(parts, majority)``: the N index arrays and the (N,) majority
        labels.

    Raises:
        ValueError: ``majority_fraction`` outside [0, 1], more clients than samples, a
            ``majority_labels`` entry that no sample has, or a fraction that the class sizes
            cannot meet (for instance a label held by no client as majority label that is
            larger than all minority shares together, or ``majority_fraction = 1`` with a
            label that no client has as majority label).
    """
    y = _as_labels(labels)
    n = y.size
    clients = _n_clients(n_clients, n)
    frac = as_float(majority_fraction, "majority_fraction", nonnegative=True, maximum=1.0)
    rng = make_rng(seed)
    classes, cls, class_counts = np.unique(y, return_inverse=True, return_counts=True)
    n_cls = classes.size

    if majority_labels is None:
        if clients >= n_cls:
            per_class = 1 + _largest_remainder(class_counts, clients - n_cls)
        else:
            per_class = np.zeros(n_cls, dtype=np.int64)
            per_class[np.argsort(-class_counts, kind="stable")[:clients]] = 1
        group = np.repeat(np.arange(n_cls), per_class)
    else:
        given = as_int_array(majority_labels, "majority_labels", ndim=None)
        if given.shape != (clients,):
            raise ValueError(f"majority_labels must have shape ({clients},), got {given.shape}")
        group = np.searchsorted(classes, given)
        bad = (group >= n_cls) | (classes[np.minimum(group, n_cls - 1)] != given)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"majority_labels must be labels that occur in labels; entry {i} is {given[i]}"
            )

    per_label = np.bincount(group, minlength=n_cls)  # clients per label
    totals = _group_totals(class_counts, per_label, frac, n)
    fail = (
        f"majority_fraction={frac} cannot be met with {n_cls} labels of sizes "
        f"{class_counts.tolist()} and {per_label.tolist()} majority clients per label; "
        "change majority_fraction or n_clients, or pass majority_labels"
    )
    if totals is None:
        raise ValueError(fail)
    has = per_label > 0
    need = np.minimum(class_counts, np.floor(frac * totals + 0.5)).astype(np.int64)
    need[~has] = 0
    left = class_counts - need  # per label, for other groups' minority blocks
    total = int(left.sum())
    cap = np.where(has, total - left, 0)  # Hall: demand_g + left_g <= total
    if (left > total).any() or cap.sum() < total:
        raise ValueError(fail)
    demand = _bounded_apportionment((1.0 - frac) * totals, cap, total)
    if (need + demand < per_label).any():
        raise ValueError(fail)
    # Client i: its group's blocks cut as evenly as possible (sizes within a group differ by
    # at most one where the remainders allow).
    by_group = np.argsort(group, kind="stable")
    first = np.concatenate([[0], np.cumsum(per_label)[:-1]])
    pos = np.empty(clients, dtype=np.int64)
    pos[by_group] = np.arange(clients) - np.repeat(first, per_label)
    size_g = np.maximum(per_label, 1)[group]
    major = need[group] // size_g + (pos < need[group] % size_g)
    minor = demand[group] // size_g + (pos >= size_g - demand[group] % size_g)
    transport = _zero_diagonal_transport(demand, left)  # [g, c]: class c -> group g minority

    # Buckets: 2g = majority block of group g, 2g + 1 = minority block of group g.
    per_bucket = np.zeros((n_cls, 2 * n_cls), dtype=np.int64)  # [class, bucket]
    per_bucket[np.arange(n_cls), 2 * np.arange(n_cls)] = need
    per_bucket[:, 1::2] = transport.T
    order, _ = _ranks_within(cls, rng)
    bucket = np.empty(n, dtype=np.int64)
    bucket[order] = np.repeat(np.tile(np.arange(2 * n_cls), n_cls), per_bucket.ravel())
    # Within each bucket, a random order of its samples is cut among the bucket's clients.
    pair_client = np.tile(np.arange(clients), 2)
    pair_bucket = np.concatenate([2 * group, 2 * group + 1])
    pair_count = np.concatenate([major, minor])
    slots = np.lexsort((pair_client, pair_bucket))
    order, _ = _ranks_within(bucket, rng)
    owner = np.empty(n, dtype=np.int64)
    owner[order] = np.repeat(pair_client[slots], pair_count[slots])
    return MajorityPartition(_split_by_owner(owner, clients), classes[group])


def _group_totals(
    class_counts: np.ndarray, per_label: np.ndarray, frac: float, n: int
) -> np.ndarray | None:
    """Real sample totals M_g of the clients of each majority label g, or None if impossible.

    M_g is as close to the equal share ``per_label[g] * n / N`` as the constraints allow:
    ``M = clip(per_label * s, lo, hi)`` with the common per-client size s set by bisection so
    that sum M = n. The constraints make a fraction ``frac`` of each group's data its own
    label with the rest absorbable by the other groups: ``frac M_g <= n_g`` (enough samples
    of label g) and Hall's condition ``(1 - frac) M_g + n_g - frac M_g <= (1 - frac) n``
    (what other groups must take of label g fits in their minority shares), plus
    ``M_g >= per_label[g]`` (a sample per client); labels without clients need
    ``n_g <= (1 - frac) n``.
    """
    nc = class_counts.astype(np.float64)
    has = per_label > 0
    lo = per_label.astype(np.float64)
    with np.errstate(over="ignore"):  # a tiny frac: no upper bound worth the name
        hi = np.full(nc.size, np.inf) if frac == 0 else nc / frac
    slack = (1.0 - frac) * n
    if frac > 0.5:
        lo = np.maximum(lo, (nc - slack) / (2.0 * frac - 1.0))
    elif frac < 0.5:
        hi = np.minimum(hi, (slack - nc) / (1.0 - 2.0 * frac))
    elif (nc[has] > n / 2).any():
        return None
    tol = 1e-9 * n
    if (nc[~has] > slack + tol).any():
        return None
    lo[~has] = 0.0
    hi[~has] = 0.0
    if (lo > hi + tol).any() or lo.sum() > n + tol or hi.sum() < n - tol:
        return None
    hi = np.maximum(hi, lo)
    s_lo, s_hi = 0.0, float(n)
    for _ in range(200):
        mid = 0.5 * (s_lo + s_hi)
        if np.clip(per_label * mid, lo, hi).sum() < n:
            s_lo = mid
        else:
            s_hi = mid
    return np.clip(per_label * s_hi, lo, hi)


def _bounded_apportionment(target: np.ndarray, cap: np.ndarray, total: int) -> np.ndarray:
    """Integers 0 <= q <= cap summing to ``total`` (<= cap.sum()), proportional to
    ``target`` where the caps allow (water-filling, then largest remainders)."""
    q = np.zeros(cap.size, dtype=np.int64)
    if total == 0:
        return q
    t = np.where(cap > 0, np.maximum(target, 1e-12), 0.0)
    m_lo, m_hi = 0.0, float((cap[t > 0] / t[t > 0]).max())
    for _ in range(200):
        mid = 0.5 * (m_lo + m_hi)
        if np.minimum(cap, mid * t).sum() < total:
            m_lo = mid
        else:
            m_hi = mid
    real = np.minimum(cap, m_hi * t)
    q = np.minimum(np.floor(real).astype(np.int64), cap)
    while q.sum() < total:  # a few passes at most
        room = np.flatnonzero(q < cap)
        room = room[np.argsort(-(real[room] - q[room]), kind="stable")]
        q[room[: total - int(q.sum())]] += 1
    while q.sum() > total:  # only through floating-point error
        over = np.flatnonzero(q > 0)
        q[over[np.argsort(real[over] - q[over], kind="stable")][: int(q.sum()) - total]] -= 1
    return q


def _largest_remainder(weights: np.ndarray, total: int) -> np.ndarray:
    """Integers proportional to ``weights`` summing to ``total`` (Hamilton's method)."""
    share = weights * (total / weights.sum())
    out = np.floor(share).astype(np.int64)
    extra = total - int(out.sum())
    out[np.argsort(-(share - out), kind="stable")[:extra]] += 1
    return out


def _zero_diagonal_transport(rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """A nonnegative integer (C, C) matrix with zero diagonal and the given margins.

    Requires ``rows.sum() == cols.sum() = R`` and ``rows + cols <= R`` (Hall's condition for
    this support, checked by the caller). The fractional solution closest to proportional
    draws, ``T = diag(u) (1 - I) diag(v)``, is found by matrix scaling (Sinkhorn); its floor
    leaves a residual problem that still satisfies Hall's condition (its margins are the
    row and column sums of the fractional parts), which an integer maximum flow completes.
    """
    n_cls = rows.size
    r = rows.astype(np.float64)
    c = cols.astype(np.float64)
    kernel = 1.0 - np.eye(n_cls)
    u = np.ones(n_cls)
    v = np.ones(n_cls)
    for _ in range(2000):
        u = np.divide(r, kernel @ v, out=np.zeros(n_cls), where=r > 0)
        v = np.divide(c, kernel.T @ u, out=np.zeros(n_cls), where=c > 0)
        t = u[:, None] * kernel * v[None, :]
        if np.abs(t.sum(axis=1) - r).max() < 1e-9 * max(1.0, r.max()):
            break
    floor = np.floor(t + 1e-9).astype(np.int64)
    if (floor.sum(axis=1) > rows).any() or (floor.sum(axis=0) > cols).any():
        floor[:] = 0  # not converged (a tight margin): let the flow do all of it
    rest = _flow_transport(rows - floor.sum(axis=1), cols - floor.sum(axis=0))
    if rest is None:
        floor[:] = 0
        rest = _flow_transport(rows, cols)
    if rest is None:  # pragma: no cover - excluded by the caller's Hall check
        raise RuntimeError("no transport plan exists for these margins")
    return floor + rest


def _flow_transport(rows: np.ndarray, cols: np.ndarray) -> np.ndarray | None:
    """An integer zero-diagonal transport with these margins by maximum flow, or None."""
    n_cls = rows.size
    total = int(rows.sum())
    if total == 0:
        return np.zeros((n_cls, n_cls), dtype=np.int64)
    # Nodes: 0 source, 1..C groups, C+1..2C classes, 2C+1 sink.
    size = 2 * n_cls + 2
    cap = np.zeros((size, size), dtype=np.int32)
    cap[0, 1 : n_cls + 1] = rows
    block = np.minimum(rows[:, None], cols[None, :]) * (1 - np.eye(n_cls, dtype=np.int64))
    cap[1 : n_cls + 1, n_cls + 1 : 2 * n_cls + 1] = block
    cap[n_cls + 1 : 2 * n_cls + 1, -1] = cols
    result = csgraph.maximum_flow(scipy.sparse.csr_matrix(cap), 0, size - 1)
    if result.flow_value != total:
        return None
    flow = result.flow.toarray()
    return np.maximum(flow[1 : n_cls + 1, n_cls + 1 : 2 * n_cls + 1], 0).astype(np.int64)


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


# --------------------------------------------------------------------------- statistics


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


# --------------------------------------------------------------------------- problems


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

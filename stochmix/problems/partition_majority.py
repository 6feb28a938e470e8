"""The majority partition: one majority class per client (Wang & Ji 2022, Sec. 6), and
the solvers it needs to share the other samples out exactly (bounded apportionment, and a
zero-diagonal transport by matrix scaling completed by an integer maximum flow).

:func:`majority_partition` is re-exported by :mod:`stochmix.problems.partition`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import scipy.sparse
from jaxtyping import Int

from .._lazy import lazy_module
from .._validate import as_float, as_int_array, make_rng
from ._partition_common import (
    FloatLike,
    IntLike,
    Labels,
    SeedLike,
    _as_labels,
    _n_clients,
    _ranks_within,
    _split_by_owner,
)

__all__ = ["MajorityPartition", "majority_partition"]

csgraph = lazy_module("scipy.sparse.csgraph")


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

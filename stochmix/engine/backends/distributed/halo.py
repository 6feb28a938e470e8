"""Halo exchanges of a decentralized method's products on a shard: the :class:`HaloPlan`
of a mixing matrix (which rows a rank receives and sends, and its rows of the matrix with
the columns renamed), made by :func:`halo_plan`; the closed forms of the rows a ring and a
one-peer graph move (:func:`ring_halo_rows`, :func:`shift_halo_rows`); a product's matrix
with its plan (``_Mixed``) and the cache that keeps plans by the matrix's identity
(``_ByIdentity``). See :mod:`stochmix.engine.backends.distributed`."""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

PLANS = 64  #: halo plans kept per shard (one per distinct mixing matrix, by identity)

__all__ = ["PLANS", "HaloPlan", "halo_plan", "ring_halo_rows", "shift_halo_rows"]


@dataclass(frozen=True, eq=False)
class HaloPlan:
    """How one rank multiplies its rows of an ``(n, n)`` mixing matrix ``W`` with a block
    of which it holds rows ``[lo, hi)`` (m rows): what it gets from the others (the halo)
    and what it sends them.

    Attributes:
        local: CSR of shape ``(m, m + h)``: rows ``lo..hi-1`` of ``W`` with each column
            ``c`` renamed ``c - lo`` when the rank holds it and ``m + t`` when ``c`` is
            ``halo[t]``. Every row keeps its entries in ``W``'s stored order, so that
            ``local @ [own rows; halo rows]`` adds the same products in the same order as
            ``W @ X`` does on one process (SciPy sums a row's entries in stored order):
            the same bits on any number of ranks.
        halo: the nodes whose rows it receives, shape (h,), sorted (so grouped by the
            rank that holds them, in rank order).
        receive: rows it receives from each rank, shape (R,).
        send: for each rank q, the rows it sends q, as offsets into ``[lo, hi)``, sorted
            (q expects them in that order); empty for itself and ranks that need none.
    """

    local: sp.csr_array
    halo: np.ndarray
    receive: np.ndarray
    send: tuple

    @property
    def rows(self) -> int:
        """Remote rows received per product (h)."""
        return int(self.halo.size)


def halo_plan(matrix, lo: int, hi: int, owner: np.ndarray) -> HaloPlan:
    """The :class:`HaloPlan` of the rank holding rows ``[lo, hi)`` of every block, for the
    ``(n, n)`` CSR ``matrix``; ``owner[c]`` is the rank holding node c, shape (n,).

    Costs one pass over the matrix's entries (a rank finds what the others need of it
    from the matrix itself, which every rank has: no messages)."""
    n = matrix.shape[0]
    size = int(owner.max()) + 1 if owner.size else 1
    if lo == 0 and hi == n:  # one rank holds every node: W's arrays, nothing moves
        nothing = np.zeros(0, dtype=np.int64)
        # a new matrix object on the same arrays: the plan must not keep W itself alive
        local = sp.csr_array((matrix.data, matrix.indices, matrix.indptr), shape=matrix.shape)
        return HaloPlan(local, nothing, np.zeros(size, dtype=np.int64), (nothing,) * size)
    indptr = np.asarray(matrix.indptr, dtype=np.int64)
    indices = np.asarray(matrix.indices)
    m, a, b = hi - lo, int(indptr[lo]), int(indptr[hi])
    cols = indices[a:b].astype(np.int64)
    outside = (cols < lo) | (cols >= hi)
    halo = np.unique(cols[outside])
    renamed = cols - lo
    renamed[outside] = m + np.searchsorted(halo, cols[outside])
    local = sp.csr_array(
        (matrix.data[a:b], renamed, indptr[lo : hi + 1] - a), shape=(m, m + halo.size)
    )
    receive = np.bincount(owner[halo], minlength=size).astype(np.int64)
    # what the others need of [lo, hi): the entries in those columns, outside those rows
    at = np.flatnonzero((indices >= lo) & (indices < hi))
    rows = np.searchsorted(indptr, at, side="right") - 1
    foreign = (rows < lo) | (rows >= hi)
    pairs = np.unique(owner[rows[foreign]].astype(np.int64) * n + indices[at[foreign]])
    dest, col = np.divmod(pairs, n)
    send = tuple(col[dest == q] - lo for q in range(size))
    return HaloPlan(local, halo, receive, send)


def shift_halo_rows(n: int, m: int, shift: int) -> int:
    """Closed form of :attr:`HaloPlan.rows` for a matrix whose row i reads node i and
    node ``(i + shift) mod n`` (a one-peer graph: the one-peer exponential graph at hop
    ``2^k``, a directed ring), on a rank holding m consecutive nodes: the shifted range
    minus the rank's own, ``min(m, s) - max(0, m + s - n)`` rows with ``s = shift mod
    n`` (whatever the range's position)."""
    s = int(shift) % n
    return min(m, s) - max(0, m + s - n)


def ring_halo_rows(n: int, m: int) -> int:
    """Closed form of :attr:`HaloPlan.rows` for an undirected ring (row i reads nodes
    i - 1, i, i + 1 mod n) on a rank holding m >= 1 consecutive nodes: one row from each
    side, ``min(2, n - m)``."""
    return min(2, n - m) if m else 0


@dataclass(frozen=True, eq=False)
class _Mixed:
    """A product of a whole-block phase on a shard: its matrix, the matrix's halo plan,
    the source block and the shard's rows of it."""

    matrix: object
    plan: HaloPlan
    source: str
    rows: slice

    @property
    def key(self) -> tuple:
        """What its halo rows are kept under: (id(matrix), source)."""
        return id(self.matrix), self.source


class _ByIdentity:
    """Values cached by the identity of an object (a mixing matrix, a phase), dropped when
    that object is garbage collected (a time-varying sequence's matrices go as soon as
    the sequence lets them go) and all at once past ``size`` entries."""

    def __init__(self, size: int):
        self.size = size
        self.found: dict = {}  # id(obj) -> (weak reference to obj, value)

    def get(self, obj):
        entry = self.found.get(id(obj))
        return None if entry is None or entry[0]() is not obj else entry[1]

    def put(self, obj, value):
        if len(self.found) >= self.size:
            self.found.clear()
        key = id(obj)
        found = self.found

        def forget(_, key=key):
            entry = found.get(key)
            if entry is not None and entry[0]() is None:
                del found[key]

        self.found[key] = (weakref.ref(obj, forget), value)
        return value

    def __len__(self) -> int:
        return len(self.found)

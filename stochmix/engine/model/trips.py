"""Per-node trip counts: a phase repeated ``K_i`` times at node i, as one run.

Federated clients with uneven local work (``K_i`` local steps, drawn per round or set
per client) apply the same local step a different number of times each. Written as
phases, that is the pull over the participants S, then for ``j = 1 .. max K`` the step
over ``S_j = {i in S : K_i >= j}`` (sorted, nested: ``S_1 ⊇ S_2 ⊇ ...``), then whatever
follows over S (the upload and the server's sum). Every path of the engine can run these
phases as they are; a :class:`TripCounts` tags them so that the planner runs them as
**one** run of node-local phases instead of one run per step count, the j-th step a
region of the program limited to the nodes of ``S_j``. A run is bound in one of two forms:

* **by count** (what the planner binds, and what the Numba loop runs): the nodes of S in
  their order, each with its count; the loop goes over S once and enters the j-th step's
  region at the nodes whose count is at least j. Nothing is reordered, so the loop reads
  the state in the order of its rows, as a round with one K does.
* **by prefix** (made from the first for the NumPy and Torch programs, which work on
  chunks of nodes): S ordered by decreasing count (stable: by index within a count), so
  that each ``S_j`` is a prefix of that order; the programs cut their chunks at the
  prefixes' ends and skip the region in chunks past it.

A round then streams each participant's rows through memory once, whatever the counts,
and the phases' structure no longer depends on which counts occur (only on the largest),
so rounds share one program and one template.

The arithmetic at each node is the same as with one run per count; sums over the nodes
(the server's aggregate) are added in another order (the nodes' by count, the prefix
order by prefix), so results agree to rounding.
"""

from __future__ import annotations

from functools import cached_property

import numpy as np

from .round_scalars import RoundArray

__all__ = ["TripCounts", "descending", "spread_over"]


class TripCounts:
    """The per-node trip counts of one round's repeated phase.

    Args:
        nodes: the nodes the repetitions are counted for, sorted, shape (n,) (indices of
            whatever the phases index: clients, for the methods' equations).
        counts: the trips of each, int, shape (n,), each >= 0.

    A phase built for the j-th repetition (over ``nodes[counts >= j]``) is tagged with
    ``phase.trips = (this, j)``; see the module docstring.
    """

    def __init__(self, nodes: np.ndarray, counts: np.ndarray):
        self.nodes = np.asarray(nodes)
        self.counts = np.asarray(counts, dtype=np.int64)
        self._members: dict[int, np.ndarray] = {}
        if self.counts.shape != self.nodes.shape:
            raise ValueError(
                f"counts: one per node ({self.nodes.shape[0]}), got shape {self.counts.shape}"
            )

    @cached_property
    def most(self) -> int:
        """The largest count (0 for no nodes)."""
        return int(self.counts.max()) if self.counts.size else 0

    @cached_property
    def order(self) -> np.ndarray:
        """Positions of the nodes by decreasing count, by position within a count:
        ``nodes[order][:extent(j)]`` is ``nodes[counts >= j]`` as a set."""
        return descending(self.counts, self.most)

    @cached_property
    def extents(self) -> tuple[int, ...]:
        """``|{i : counts_i >= j}|`` for ``j = 1 .. most``."""
        tally = np.bincount(self.counts, minlength=self.most + 1)
        above = np.cumsum(tally[::-1])[::-1]  # above[j] = #{counts >= j}
        return tuple(int(v) for v in above[1:])

    def members(self, j: int) -> np.ndarray:
        """``nodes[counts >= j]``, sorted: the nodes of the j-th repetition (made once: the
        method builds its phases over them and the planner checks the phases against them)."""
        found = self._members.get(j)
        if found is None:
            found = self._members[j] = self.nodes[self.counts >= j]
        return found

    def ranks(self, j: int) -> np.ndarray:
        """For the first ``extent(j)`` nodes of the order, their places in
        :meth:`members` (j): how an array aligned with the j-th repetition's nodes is
        read in the run's order."""
        place = np.cumsum(self.counts >= j) - 1
        return place[self.order[: self.extents[j - 1]]]


def descending(counts: np.ndarray, most: int | None = None) -> np.ndarray:
    """Positions of ``counts`` by decreasing count, by position within a count (a stable
    radix sort of small keys); ``most``: their largest (found when None)."""
    if most is None:
        most = int(counts.max()) if counts.size else 0
    below = most - counts
    for dtype in (np.uint8, np.uint16):
        if most <= np.iinfo(dtype).max:
            return np.argsort(below.astype(dtype), kind="stable")
    return np.argsort(below, kind="stable")


def spread_over(values, members: np.ndarray, n: int) -> np.ndarray:
    """Per-node ``values`` of the nodes where ``members`` (a mask over n nodes) holds, as
    an array over all n nodes (others get the first value: equal values stay equal). A
    round array comes back a round array without a rule: its values no longer line up
    with the participants, so a template refuses it (it never takes it for one repeated
    number, which would freeze it)."""
    arr = np.asarray(values)
    out = np.full((n, *arr.shape[1:]), arr[0] if arr.size else 0, arr.dtype)
    out[members] = arr
    return out.view(RoundArray) if isinstance(values, RoundArray) else out

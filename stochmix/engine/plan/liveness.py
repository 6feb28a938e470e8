"""Which node rows of the state hold something, tracked through a run.

**Rows the state does not keep.** Most client rows carry nothing from one round to the
next: FedAvg's client models are overwritten by the pull before anything reads them, and
FOCUS's client trackers are emptied by the collect. :func:`find_scratch` finds such
blocks from the phases a method builds (not from a list of methods): a block's node rows
(the rows of nodes ``client_node .. client_node + N - 1``) are

* **dead** when nothing in a round reads them from the state: every run of node-local
  phases that uses them writes them first (it computes them in its buffers from other
  rows, as the pull does) and no other phase touches them;
* **zero** when they start zero and everything that writes them writes zeros (a run of
  node-local phases reads them as zeros, below).

The run then keeps them out of the state (:class:`~stochmix.engine.model.layout.Layout`'s
``scratch``): a run of node-local phases holds the round's participants' rows in its own
buffers, per chunk, and does not store them back. Memory goes from O(N d) per such block
to O(participants d) of scratch. The numbers do not change: what is left out is never
read. :func:`check_plan` verifies every round's plan against the blocks left out before
it runs and raises :class:`LivenessError` if a round would read them (a method whose
rounds differ from the rounds probed at the start: run it with ``storage="full"``).

**Blocks known to be zero.** Some blocks are emptied every round: FOCUS's collect moves
each participant's tracker into the server's and leaves the client rows of ``y`` zero; a
client's rows of such a block are zero whenever a round starts. A run of node-local phases
then need not read them (they are zero), nor write back zeros over zeros.
:class:`ZeroRows` knows, for each block, whether all of its node rows are zero, from the
state when the run starts and from what every executed item may write since (blocks whose
zero rows the state does not keep are zero throughout):

* a run of node-local phases writes a block's node rows with what its schedule stores
  (zeros keep the block zero, anything else does not), and may write single rows there;
* any other phase (general, whole-block, nonlinear) that rewrites a node row of a block
  makes it not zero.

The knowledge is conservative (a block may be zero without being known so) and exact
where it is used: a run started with a block known to be zero computes what it would
compute from gathered zeros (see :func:`stochmix.engine.plan.schedule.plan_schedule`). It is
recomputed from the state when a run starts or resumes from a checkpoint, so nothing of it
is saved.
"""

from __future__ import annotations

import copy

import numpy as np

from ..model.layout import Layout

__all__ = [
    "LivenessError",
    "PROBE_PASSES",
    "PlanCheck",
    "ZeroRows",
    "find_scratch",
    "needed",
]

#: How many times :func:`find_scratch` goes through its participant sets (nobody, one
#: client, two, three, the first and the last), in rounds 0, 1, 2, ...
PROBE_PASSES = 3


class LivenessError(RuntimeError):
    """A round reads node rows that the run does not keep (see :func:`check_plan`)."""


def node_ranges(layout: Layout, first: int, count: int) -> dict[str, tuple[int, int]]:
    """Block -> the rows of Z, ``[start, stop)``, that hold its node rows (the rows of
    nodes ``first .. first + count - 1``), for the blocks that have some."""
    out = {}
    for block in layout.blocks:
        lo = max(first, block.first_node)
        hi = min(first + count, block.first_node + block.rows)
        if hi > lo:
            start = layout.node_offset(block.name)
            out[block.name] = (start + lo, start + hi)
    return out


def _holding(rows, ranges: dict, among) -> set:
    """The blocks among ``among`` with a node row (per ``ranges``) in ``rows``."""
    rows = np.asarray(rows, dtype=np.int64).ravel()
    if not rows.size:
        return set()
    return {b for b in among if ((rows >= ranges[b][0]) & (rows < ranges[b][1])).any()}


def needed(item, scratch: dict, ranges: dict, method) -> set:
    """The blocks of ``scratch`` (name -> "dead" or "zero") whose node rows the plan item
    ``item`` needs from the state: reads (a "zero" block read by a run of node-local
    phases is read as zeros: not needed) or writes of anything but zeros."""
    if not scratch:
        return set()
    names = set(scratch)
    structure = getattr(item, "structure", None)
    if structure is not None:  # a run of node-local phases
        schedule = structure.schedule
        nodes = getattr(item, "nodes", None)
        if nodes is not None and nodes.size and int(nodes.min()) < method.client_node:
            # a run over a node that is no client (a server's row kernel): its rows are
            # kept; one over both kinds would need its blocks' client rows kept as well
            if int(nodes.max()) >= method.client_node:
                return names & set(schedule.blocks)
            return set()
        zero = {b for b in names if scratch[b] == "zero"}
        # a block picked by index is kept whole: its rows are any of its rows
        out = names & {v.block for lf in structure.forms for v in lf.views}
        # a mixing product reads its source whole (every node's row)
        out.update(names & {p.source for lf in structure.forms for p in lf.products})
        out.update(b for b in schedule.gather if b in names and b not in zero)
        out.update(
            schedule.blocks[st.block]
            for st in schedule.stores
            if st.value is not None and schedule.blocks[st.block] in zero
        )
        single = [*schedule.singles, *schedule.outer_rows]
        single += [
            r for entries in schedule.tail for e in entries for r in (e.row, e.ref, *e.more)
        ]
        single = [r for r in single if r is not None]
        return out | _holding(single, ranges, names)
    if getattr(item, "nonlinear", False):  # a row map: its own rows
        rows = [item.z_rows, *(z_rows for _, _, z_rows in item.sources)]
        return _holding(np.concatenate(rows), ranges, names)
    form = getattr(item, "blockwise", None)
    if form is not None:
        return names  # whole-block phases read and write all of their blocks' rows
    out = _holding(item.rows, ranges, names) | _holding(item.mix.indices, ranges, names)
    if item.clients.size:  # gradients taken at the method's points
        from ..model.method import model_points

        if not model_points(method):
            return names
        out |= names & {method.model_block}
    return out


def find_scratch(
    method, n_clients: int, dim: int, probabilities, plan, regularizer=None
) -> dict[str, str]:
    """The blocks whose node rows a run of ``method`` need not keep: name -> "dead" or
    "zero" (see the module docstring), found from the plans of probe rounds
    (:data:`PROBE_PASSES` passes over nobody, one, two and three participants, the first
    and the last client, in rounds 0, 1, 2, ...), made by ``plan(phases, method, ctx)`` on
    a copy of the method, with the run's problem ``regularizer`` (proximal methods write
    their prox phases only for one).

    Empty for a method that reports its output or consensus itself (it may read any row;
    on its class or set on the instance)
    and for one whose probe rounds fail (a method that needs rounds of its own kind)."""
    from ..model.method import Method, RunContext

    kind = type(method)
    if kind.output is not Method.output or kind.consensus_error is not Method.consensus_error:
        return {}
    if {"output", "consensus_error"} & vars(method).keys():
        return {}  # (set on the instance: as much its own as on a class)
    probe = copy.deepcopy(method)  # probing must not touch the method's own state
    layout = Layout(probe.blocks(n_clients))
    ranges = node_ranges(layout, probe.client_node, n_clients)
    scratch = {
        b.name: "zero" if b.init == "zeros" else "dead" for b in layout.blocks if b.name in ranges
    }
    if not scratch:
        return {}
    last = n_clients - 1
    sets = [[], [0], [0, 1], [0, 1, 2], [0, last], [last]] * PROBE_PASSES
    plans = []
    try:
        ctx = RunContext(layout, n_clients, dim, probabilities, seed=0)
        ctx.regularizer = regularizer
        probe.start(ctx)
        for r, s in enumerate(sets):
            participants = np.unique(np.asarray(s, dtype=np.int64).clip(0, last))
            plans.append(plan(probe.round_phases(r, participants, ctx), probe, ctx))
    except Exception:  # noqa: BLE001  (a method's own rounds refuse these: keep everything)
        return {}
    while True:
        lost = set()
        for items in plans:
            for item in items:
                lost |= needed(item, scratch, ranges, probe)
        if not lost:
            return scratch
        for b in lost:
            if scratch[b] == "zero":
                scratch[b] = "dead"  # perhaps never read: asked again
            else:
                del scratch[b]


class PlanCheck:
    """Refuses a round whose plan needs node rows that ``layout`` does not keep (see the
    module docstring); a run of node-local phases is checked once per program."""

    def __init__(self, layout: Layout, method, n_clients: int):
        self.layout, self.method = layout, method
        self.ranges = node_ranges(layout, method.client_node, n_clients)
        self.programs: dict = {}  # structure of a run -> the blocks it needs

    def __call__(self, plan: list, r: int) -> list:
        """``plan``, once checked (LivenessError if round ``r`` would read what is not
        kept)."""
        for item in plan:
            structure = getattr(item, "structure", None)
            if structure is not None:
                found = self.programs.get(structure)
                if found is None:
                    found = self.programs[structure] = self._needed(item)
            else:
                found = self._needed(item)
            if found:
                raise LivenessError(
                    f"round {r} of {self.method.name} reads the node rows of block(s) "
                    f"{sorted(found)}, which this run does not keep (the rounds probed when "
                    "it started never read them): run it with storage='full'"
                )
        return plan

    def _needed(self, item) -> set:
        return needed(item, self.layout.scratch, self.ranges, self.method)


class ZeroRows:
    """The blocks whose node rows are all zero (see the module docstring).

    Args:
        layout: the run's layout.
        first: the first node that is a client or peer (``Method.client_node``).
        count: how many there are (N).
    """

    def __init__(self, layout: Layout, first: int, count: int):
        self.layout = layout
        self.ranges: dict[str, slice] = {}  # block -> its node rows, as rows of Z
        self.nodes: dict[str, tuple[int, int]] = {}  # block -> its first and last node
        for name, (start, stop) in node_ranges(layout, first, count).items():
            self.ranges[name] = slice(start, stop)
            node = start - layout.node_offset(name)
            self.nodes[name] = (node, node + stop - start - 1)
        # zero rows the state does not keep: zero throughout (check_plan sees to it)
        self.always = frozenset(b for b, kind in layout.scratch.items() if kind == "zero")
        self.known: frozenset = self.always

    def covers(self, name: str, lo: int, hi: int) -> bool:
        """Whether nodes ``lo..hi`` all have node rows in block ``name``."""
        first, last = self.nodes[name]
        return first <= lo and hi <= last

    def start(self, z) -> None:
        """Read which blocks have all their node rows zero in the state ``z``."""
        self.known = self.always | frozenset(
            name
            for name, rows in self.ranges.items()
            if name not in self.layout.scratch and not bool((z[rows] != 0).any())
        )

    def after_program(self, program, nodes: np.ndarray) -> None:
        """A run of node-local phases (``program``) ran on ``nodes``."""
        if not self.known:
            return
        # (rows picked by index are rows of their block: it is no longer known zero)
        block = {v.name: v.block for lf in program.forms for v in lf.views}
        stores = program.schedule.stores
        lost = {block.get(b, b) for b in (program.blocks[st.block] for st in stores)}
        lost.difference_update(
            program.blocks[st.block]
            for st in stores
            if st.value is None and program.blocks[st.block] not in block
        )
        single = [*program.outer_rows, *(e.row for entries in program.tail for e in entries)]
        lost.update(self._holding(np.asarray(single, dtype=np.int64)))
        self.known = (self.known - lost) | self.always

    def forget(self, blocks) -> None:
        """Blocks ``blocks`` were rewritten in full: none of them is known zero now."""
        self.known = (self.known - set(blocks)) | self.always

    def after_phase(self, rows) -> None:
        """A phase that rewrites ``rows`` of Z (None: possibly any row) ran."""
        if not self.known:
            return
        if rows is None:
            self.known = self.always
            return
        self.known = (self.known - self._holding(np.asarray(rows, dtype=np.int64))) | self.always

    def _holding(self, rows: np.ndarray) -> set:
        """The known-zero blocks with a node row among ``rows``."""
        if rows.size == 0:
            return set()
        rows = np.sort(rows)
        found = set()
        for name in self.known:
            span = self.ranges[name]
            k = np.searchsorted(rows, span.start)
            if k < rows.size and rows[k] < span.stop:
                found.add(name)
        return found

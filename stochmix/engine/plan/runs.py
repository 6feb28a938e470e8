"""The run being assembled by the planner (:func:`~stochmix.engine.plan.round_plan.plan_round`):
consecutive node-local phases over the same nodes that one program applies chunk by chunk,
which phases may join it, and whether its single rows stay outside its nodes' rows.

A run takes one set of gradients: full ones, or one draw of sampled gradients (the
samples each node draws, bound per round), since its program binds one gradient function.

Rows picked by index (``x.at[...]``, :class:`~stochmix.engine.model.local_form.ViewTerm`)
join a run under two rules that keep a chunk's gathers and stores exact: a block is
read and written in a run through one index array only (two nodes' rows never alias
across chunks), and never also at node rows or as single rows.
"""

from __future__ import annotations

import numpy as np

from ..model.method import RunContext
from ..model.phase import LocalForm, Phase
from ..model.product_form import renamed
from ..model.trips import TripCounts

__all__: list[str] = []


def _block_of(layout, row: int) -> tuple[str, int]:
    """The block that row ``row`` of Z belongs to, and the node it holds."""
    name, local = layout.locate(row)
    return name, local + layout.first_node(name)


class _Run:
    """A run of node-local phases being assembled (see :func:`_plan`).

    The run may end with a *tail*: phases without nodes (single rows from single rows,
    such as a server step) that read an outer row the run has written. They are applied
    after the run's outer rows are set.
    """

    def __init__(self, phase: Phase, lf: LocalForm, sampled_products: bool = False):
        self.phases = [phase]
        self.forms = [lf]  # the phases' node-local forms
        self.tail = 0
        self.nodes = lf.nodes
        self.same_nodes = {id(self.nodes)}  # node arrays known equal to ``nodes``
        self.node_targets = set(lf.targets)
        self.outer_written = set(lf.outer_rows)
        self.late_rows: set = set()  # outer rows set with terms read once the run's are set
        #: per form, -1 or the repetition (1, 2, ...) of :attr:`trips` it is
        self.levels = [-1]
        self.trips: TripCounts | None = None  # the counts of the run's repeated phases
        self.shift = 0  # the run's nodes are trips.nodes + shift
        self.views = {v.block: v.rows for v in lf.views}  # block -> its rows by index
        self.plain = set(lf.plain_blocks)  # blocks read or written at node rows
        # the gradients its phases take: None (none yet), "full" or a draw's samples
        self.draw = None if not lf.takes_gradients else _draw(lf)
        self.products = len(lf.products)  # how many mixing products its forms read
        # whether sampled gradients and products may share a run (the compiled loop runs
        # both; on the NumPy programs a whole-block pass is faster)
        self.sampled_products = sampled_products

    def repetition(self, phase: Phase, lf: LocalForm) -> int:
        """The repetition ``j`` of the run's trip counts that ``phase`` is (see
        :mod:`stochmix.engine.model.trips`), checked against the run's nodes; 0 if it is
        none (it then joins as any phase does, or not at all)."""
        tag = phase.trips
        if tag is None or self.tail or not lf.nodes.size or lf.views or self.views:
            return 0
        if lf.products or self.products:
            return 0  # (a run of products is computed once, at its start, on every node)
        if lf.samples is not None or not isinstance(self.draw, (str, type(None))):
            return 0  # (sampled gradients: one draw a run)
        trips, j = tag
        if self.trips is None:
            if self.nodes.size != trips.nodes.size or not self.nodes.size:
                return 0
            shift = int(self.nodes[0]) - int(trips.nodes[0])
            if not np.array_equal(self.nodes, trips.nodes + shift):
                return 0
        elif trips is not self.trips:
            return 0
        else:
            shift = self.shift
        if not 1 <= j <= trips.most or lf.nodes.size != trips.extents[j - 1]:
            return 0
        if not np.array_equal(lf.nodes, trips.members(j) + shift):
            return 0
        if lf.single_reads & self.outer_written or lf.outer_rows & self.outer_written:
            return 0
        self.trips, self.shift = trips, shift
        return j

    def accepts(self, lf: LocalForm) -> bool:
        outer_only = not lf.nodes.size and bool(lf.outer)
        if self.tail:
            return outer_only
        if (lf.views or self.views) and not self._views_agree(lf):
            return False
        if lf.samples is not None and self.trips is not None:
            return False  # (a run with trip counts is chunked by prefix: a draw is one chunk)
        if lf.products and not self._products_ok(lf):
            return False
        if lf.samples is not None and self.products and not self.sampled_products:
            return False  # (sampled gradients with products: see _products_ok)
        if lf.takes_gradients and self.draw is not None:  # one draw of gradients a run
            draw = _draw(lf)
            if isinstance(draw, str) or isinstance(self.draw, str):
                if not (isinstance(draw, str) and isinstance(self.draw, str)):
                    return False  # full gradients and a draw: two gradient functions
            elif draw is not self.draw and not np.array_equal(draw, self.draw):
                return False
        nodes = lf.nodes
        if nodes.size and self.nodes.size:
            if id(nodes) not in self.same_nodes:
                if not np.array_equal(nodes, self.nodes):
                    return False
                self.same_nodes.add(id(nodes))
        elif nodes.size != self.nodes.size and not outer_only:
            return False
        if lf.single_reads & self.outer_written or lf.outer_rows & self.outer_written:
            return outer_only or self._late(lf)  # the first phase of the tail, or late terms
        return True

    def _products_ok(self, lf: LocalForm) -> bool:
        """Whether the products of ``lf`` may be computed when the run starts: no phase of
        the run before it writes their sources (at node rows or at outer rows, which are
        set when the run ends), the run repeats no phase, and it takes no sampled
        gradients unless they run in the compiled loop (``sampled_products``)."""
        sources = {p.source for p in lf.products}
        if sources & self.node_targets or self.outer_written or self.trips:
            return False
        # (sampled gradients on the NumPy programs: a whole-block pass is faster there)
        return self.sampled_products or isinstance(self.draw, str | None)

    def _views_agree(self, lf: LocalForm) -> bool:
        """Whether ``lf``'s rows picked by index keep the run's rules (see the module
        docstring): one index array per block, never with its node rows."""
        if lf.plain_blocks & self.views.keys():
            return False
        for v in lf.views:
            if v.block in self.plain:
                return False
            rows = self.views.get(v.block)
            if rows is not None and rows is not v.rows and not np.array_equal(rows, v.rows):
                return False
        return True

    def _late(self, lf: LocalForm) -> bool:
        """Whether a phase over the run's nodes that only sets outer rows may join the body
        although it reads outer rows an earlier phase sets: it reads them only in
        single-row terms of its outer rows, which the schedule applies once those are set
        (:func:`~stochmix.engine.plan.schedule.plan_schedule`, its first tail entries), and
        none of them gets such terms itself (they are applied all at once)."""
        if not lf.nodes.size or lf.targets or lf.kernels or lf.outer_rows & self.outer_written:
            return False
        late = lf.single_reads & self.outer_written
        return not (any(e.row in late for e in lf.external) or late & self.late_rows)

    def add(self, phase: Phase, lf: LocalForm, repetition: int = 0) -> None:
        if lf.nodes.size and lf.single_reads & self.outer_written and not self.tail:
            self.late_rows.update(lf.outer_rows)  # (accepted by _late)
        if self.tail or (
            not lf.nodes.size
            and (lf.single_reads & self.outer_written or lf.outer_rows & self.outer_written)
        ):
            self.tail += 1
        self.phases.append(phase)
        self.forms.append(renamed(lf, self.products))
        self.products += len(lf.products)
        self.levels.append(repetition - 1 if repetition else -1)
        if not self.nodes.size:
            self.nodes = lf.nodes
            self.same_nodes = {id(self.nodes)}
        self.node_targets.update(lf.targets)
        self.outer_written.update(lf.outer_rows)
        self.views.update((v.block, v.rows) for v in lf.views)
        self.plain.update(lf.plain_blocks)
        if lf.takes_gradients and self.draw is None:
            self.draw = _draw(lf)

    @property
    def body(self) -> list[LocalForm]:
        """The forms of the phases applied chunk by chunk (all but the tail)."""
        return self.forms[: len(self.forms) - self.tail]


def _rows_ok(run: _Run, ctx: RunContext, memo: dict) -> bool:
    """The single rows of a run are outside its nodes' rows: an outer row must not be
    one of the nodes' rows of any block, and a row read one at a time must not be a
    node's row of a block the run writes on its nodes (its snapshot would go stale)."""
    nodes = run.nodes
    if not nodes.size:
        return True

    def among_nodes(row):
        key = ("row", row, id(nodes))
        if key not in memo:
            block, node = _block_of(ctx.layout, row)
            memo[key] = block, bool((nodes == node).any())
        return memo[key]

    for lf in run.body:
        for row in lf.outer_rows:
            block, inside = among_nodes(row)
            if inside or block in run.views:
                return False
        for row in lf.single_reads:
            block, inside = among_nodes(row)
            if (inside and block in run.node_targets) or block in run.views:
                return False
    return True


def _draw(lf: LocalForm):
    """What gradients a form takes: "full", or its sampled gradients' samples."""
    return "full" if lf.samples is None else lf.samples


def run_views(forms) -> tuple:
    """The rows picked by index of a run's forms, ``(name, block, rows)`` once per block
    (the run's rules give each block one index array, aligned with the run's nodes)."""
    found: dict = {}
    for lf in forms:
        for v in lf.views:
            found.setdefault(v.name, (v.name, v.block, v.rows))
    return tuple(found.values())

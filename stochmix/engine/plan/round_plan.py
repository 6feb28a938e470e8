"""Planning a round: its phases cut into segments (runs of node-local phases to apply
chunk by chunk) and single phases, each bound to the round.

A run of consecutive node-local phases over the same nodes (see
:class:`~stochmix.engine.model.phase.LocalForm`) becomes one :class:`LocalStep`: the
nodes are processed in cache-sized chunks, and for each chunk every block row the run
reads is gathered once into a small dense buffer, all the run's phases are applied to the
buffer (gradients and reductions into outer rows included), and the rewritten rows are
scattered back. A round then streams each participant's rows through memory once instead
of once per phase, which is what a hand-written kernel does, but for any method whose
phases have this shape.

This is exact, not an approximation: within such a run each node's rows depend only on
the same node's rows and on single rows no phase of the run has written yet (read from a
snapshot taken when the run starts), and an outer row is a sum over the nodes that can be
accumulated chunk by chunk and written when the run ends. Runs are cut where these
conditions would fail.

A :class:`LocalStep` carries its run's :class:`Structure` (which blocks each phase writes
from which, which coefficients are +-1, numbers or per-node arrays), not a compiled
program: code generation (:mod:`stochmix.engine.codegen`) compiles one program per
structure, and later rounds with the same structure (every round of a method, whatever
its participants) reuse it, binding only the round's nodes and coefficients. Phases that
rewrite whole blocks (a decentralized ``W_k`` mixing every node; see
:mod:`stochmix.engine.model.blockwise`) stay single phases, applied by the backend as one
sparse product per mixed block where it can.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache, partial

import numpy as np

from ..model.blockwise import chained
from ..model.method import Method, RunContext, model_points
from ..model.phase import LocalForm, Phase
from ..model.product_form import product_form
from ..model.rowmap import RowMap
from ..model.tail_kernel import tail_kernel
from ..model.traffic import round_traffic
from ..model.trips import descending, spread_over
from .capabilities import Capabilities, capabilities
from .runs import _block_of, _rows_ok, _Run, run_views
from .schedule import Schedule, plan_schedule
from .slowpath import SlowPaths

__all__ = ["LocalStep", "Structure", "general_path", "label_of", "plan_round", "whole_path"]


def _local_refusal(lf: LocalForm, method: Method, ctx: RunContext, memo: dict) -> str | None:
    """None when a node-local phase can run on the chunked path at all (distinct nodes,
    gradients taken at the method's default points, of the clients whose nodes they are);
    else why not, in words. (Which rows it may read and write one at a time is checked
    per run: :func:`_rows_ok`.)"""
    nodes = lf.nodes
    key: tuple
    if nodes.size > 1:  # a node twice would be written twice, not summed
        key = ("distinct", id(nodes))
        if key not in memo:
            ordered = nodes if (nodes[1:] > nodes[:-1]).all() else np.sort(nodes)
            memo[key] = bool((ordered[1:] > ordered[:-1]).all())
        if not memo[key]:
            return "its nodes repeat (a node's rows would be written twice, not summed)"
    if any(v.block == method.model_block for v in lf.views):
        return (
            f"it picks rows of the model block {method.model_block!r} by index (x.at[...]): "
            "node-local runs read the model at the nodes' own rows (their gradients), so it "
            "is never picked by index there"
        )
    if not lf.takes_gradients:
        return None
    if not model_points(method):
        return (
            f"it takes gradients, at the points {type(method).__name__}.points gives (the "
            "node-local path takes them at the model rows)"
        )
    offset = method.client_node + ctx.layout.first_node(method.model_block)
    clients = lf.clients
    assert clients is not None  # a form that takes gradients names their clients
    key = ("clients", id(clients), id(lf.nodes))
    if key not in memo:
        memo[key] = clients.shape == lf.nodes.shape and np.array_equal(clients + offset, lf.nodes)
    if not memo[key]:
        return (
            f"its gradients' clients are not its nodes (client i is node i + {offset} of "
            f"{method.model_block!r})"
        )
    return None


def _plan(
    phases: list[Phase], local_ok: bool, method, ctx, whole: bool = False, why=None,
    trips: bool = False, products: bool = False, sampled_products: bool = False,
) -> list:  # fmt: skip
    """Split a round's phases into runs to chunk (``_Run``) and single phases. ``whole``:
    the backend applies whole-block forms (see :func:`_whole_runs`). ``why``: a dict that
    gets, for each phase left out of every run, why (by ``id`` of the phase). ``trips``:
    the repetitions of a phase with per-node trip counts join one run (see
    :mod:`stochmix.engine.model.trips`). ``products``: a whole-block phase whose terms are
    node-local but for its mixing products joins runs with them computed when the run
    starts (:mod:`stochmix.engine.model.product_form`); ``sampled_products``: runs of
    sampled gradients take them too (they run in the compiled loop)."""
    out: list[_Run | Phase] = []
    run: _Run | None = None
    memo: dict = {}
    why = {} if why is None else why
    for ph in phases:
        if ph.is_identity:
            continue
        lf = ph.local if local_ok else None
        if lf is None and products and ph.local is None:
            lf = _with_products(ph, ctx)
        if lf is not None:
            refusal = _local_refusal(lf, method, ctx, memo)
            if refusal is not None:
                lf, why[id(ph)] = None, refusal
        elif ph.local is None:
            why[id(ph)] = ph.local_why or "it is not node-local"
        if lf is not None and run is not None and trips:
            j = run.repetition(ph, lf)
            if j:
                run.add(ph, lf, j)
                continue
        if lf is not None and run is not None:
            tail = tail_kernel(
                lf, ctx.layout, run.nodes, run.outer_written, bool(run.tail), method.client_node
            )
            if tail is not None:  # the server's prox after its average: the run's tail
                run.add(ph, tail)
                continue
        if lf is not None and run is not None and run.accepts(lf):
            run.add(ph, lf)
            continue
        if run is not None:
            out.append(run)
            run = None
        if lf is not None:
            run = _Run(ph, lf, sampled_products)
        else:
            out.append(ph)
    if run is not None:
        out.append(run)
    checked: list[_Run | Phase] = []
    for item in out:
        if isinstance(item, _Run) and not _rows_ok(item, ctx, memo):
            checked += item.phases  # one at a time through the sparse path
            for ph in item.phases:
                why[id(ph)] = (
                    "its segment reads or writes a single row (a server or aggregate row) "
                    "that is one of the round's nodes' rows"
                )
        else:
            checked.append(item)
    if products:  # a lone mixing phase without gradients: its whole-block pass is as fast
        checked = [
            item.phases[0]
            if isinstance(item, _Run)
            and len(item.phases) == 1
            and item.forms[0].products
            and not item.forms[0].takes_gradients
            else item
            for item in checked
        ]
    return _whole_runs(checked) if whole else checked


def _with_products(phase: Phase, ctx: RunContext) -> LocalForm | None:
    """The phase's node-local form with mixing products
    (:func:`~stochmix.engine.model.product_form.product_form`), made once per phase."""
    memo = phase.__dict__.setdefault("_product_forms", {})
    key = id(ctx.layout)
    found = memo.get(key)
    if found is None or found[0] is not ctx.layout:
        found = memo[key] = (ctx.layout, product_form(phase.blockwise, ctx.layout))
    return found[1]


def _hand_off(plan: list) -> list:
    """The plan with each pair of whole-block phases where the first may hand a block to
    the second (:func:`~stochmix.engine.model.blockwise.chained`: DGD's local step, then its
    product ``x <- W x``) replaced by copies of them that do."""
    out = list(plan)
    for i in range(len(out) - 1):
        first, second = out[i], out[i + 1]
        if not (isinstance(first, Phase) and isinstance(second, Phase)):
            continue
        one, two = first.blockwise, second.blockwise
        if one is None or two is None:
            continue
        block = chained(one, two)
        if block is not None:
            out[i] = first.twin(("hand_off", block), partial(replace, one, hand_off=block))
            out[i + 1] = second.twin(("take", block), partial(replace, two, take=block))
    return out


def _whole_runs(items: list) -> list:
    """A run of one node-local phase that rewrites one whole block, next to a phase that
    takes the whole-block path (a decentralized mixing step), takes the whole-block path
    too: a mixing product cuts the run anyway, and one expression on whole slices needs
    no gathering or scattering (DGD's local step). Runs that write several blocks stay
    chunked, where each node's rows stream through the cache once for all of them. (A
    federated round never qualifies: its model block holds the server row, which client
    phases do not rewrite.)"""

    def mixing(item) -> bool:
        return isinstance(item, Phase) and item.blockwise is not None

    out = []
    for i, item in enumerate(items):
        if (
            isinstance(item, _Run)
            and len(item.phases) == 1
            and ((i > 0 and mixing(items[i - 1])) or (i + 1 < len(items) and mixing(items[i + 1])))
            and item.phases[0].blockwise is not None
            and len(item.phases[0].blockwise.targets) == 1
        ):
            out += item.phases
        else:
            out.append(item)
    return out


@dataclass(frozen=True, eq=False)
class Structure:
    """What a compiled program of a run of node-local phases depends on: the phases'
    node-local ``forms``, the method's ``model`` block and the ``tail`` (how many of the
    forms are applied after the run's outer rows are set). Runs of equal structure run the
    same code; :attr:`key` says which (equal keys, equal programs), hashed once."""

    forms: tuple[LocalForm, ...]
    model: str
    tail: int
    #: per form of the body, -1 or the run's extent it is limited to (see
    #: :func:`~stochmix.engine.plan.schedule.plan_schedule`); empty: none is limited
    levels: tuple = ()
    key: tuple = field(init=False)
    _hash: int = field(init=False, repr=False)

    def __post_init__(self) -> None:
        key = (self.model, self.tail, tuple(lf.signature for lf in self.forms), self.levels)
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "_hash", hash(key))

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other) -> bool:
        return self is other or (
            isinstance(other, Structure) and self._hash == other._hash and self.key == other.key
        )

    @property
    def schedule(self) -> Schedule:
        """The run's :class:`~stochmix.engine.plan.schedule.Schedule` (every block known
        to hold values), planned once per structure."""
        return _schedule(self)


@lru_cache(maxsize=256)
def _schedule(structure: Structure) -> Schedule:
    return plan_schedule(
        list(structure.forms), structure.model, structure.tail, levels=structure.levels
    )


@dataclass(frozen=True)
class LocalStep:
    """A run of node-local phases, bound to one round: the program of ``structure``
    applied to ``nodes`` with the coefficient values ``coefs`` and gradient ``clients``.
    ``outside`` lists nodes that must stay outside ``nodes`` for the program to be right
    (its outer rows and the single rows it reads of blocks it writes)."""

    structure: Structure
    nodes: np.ndarray
    coefs: tuple
    clients: np.ndarray | None
    outside: tuple
    labels: tuple = ()  #: the labels of the run's phases, in order (for messages)
    #: (gradient evaluations, messages, floats, sample gradients) of the run's phases
    #: (for templates)
    traffic: tuple | None = None
    #: how many of ``nodes`` each of its limited phases runs at (``structure.levels``
    #: number them; see :mod:`stochmix.engine.model.trips`); empty: none is limited
    extents: tuple = ()
    #: per extent, the traffic of the phases limited to it (part of ``traffic``)
    level_traffic: tuple = ()
    #: bound by count: per node of ``nodes`` (in their own order), its trips; the phase of
    #: level j runs at the nodes whose count exceeds j, and per-node coefficients are
    #: given for all of ``nodes``. None: bound by prefix (with ``extents``, ``nodes`` are
    #: ordered by decreasing count and the phase of level j runs at the first
    #: ``extents[j]``; its per-node coefficients are given for those)
    counts: np.ndarray | None = None
    #: the run's rows picked by index, ``(name, block, rows)`` with ``rows`` aligned with
    #: ``nodes`` (:class:`~stochmix.engine.model.local_form.ViewTerm`), bound per round
    views: tuple = ()
    #: the rows each of ``clients`` draws where the run takes sampled gradients ((c, b)
    #: int64, bound per round), else None
    samples: np.ndarray | None = None
    #: the run's mixing products in the order of their names (``@0``, ...): ``(matrix,
    #: rows)``, node ``nodes[t]`` reading row t of ``matrix @ Z[rows]`` (bound per round;
    #: :mod:`stochmix.engine.model.product_form`)
    products: tuple = ()

    def by_prefix(self) -> LocalStep:
        """This step bound by prefix (itself if it is): the nodes by decreasing count, each
        per-node coefficient read in that order and, for a limited phase, cut to its
        prefix (for the NumPy and Torch programs; see :mod:`stochmix.engine.model.trips`)."""
        counts = self.counts
        if counts is None:
            return self
        order = descending(counts)
        n = self.nodes.size
        structure = self.structure
        body = len(structure.forms) - structure.tail
        coefs = list(self.coefs)
        slot = 0
        for k, lf in enumerate(structure.forms):
            level = structure.levels[k] if k < body else -1
            for _ in lf.coefficients:
                c = coefs[slot]
                if k < body and np.ndim(c) and np.shape(c)[0] == n:
                    read = order if level < 0 else order[: self.extents[level]]
                    coefs[slot] = np.asarray(c)[read]
                slot += 1
        return replace(
            self,
            nodes=self.nodes[order],
            coefs=tuple(coefs),
            clients=None if self.clients is None else self.clients[order],
            counts=None,
            views=tuple((name, block, rows[order]) for name, block, rows in self.views),
            samples=None if self.samples is None else self.samples[order],
        )


def _bind(run: _Run, method: Method, ctx: RunContext) -> LocalStep:
    forms = list(run.forms)
    # every single row the run reads or writes, tail included: a template may reuse the
    # run only for participants whose nodes avoid them all
    outside = {
        _block_of(ctx.layout, row)[1] for lf in forms for row in (*lf.outer_rows, *lf.single_reads)
    }
    traffic = round_traffic(run.phases, method, ctx.dim, ctx.sample_counts)
    if run.trips is not None:
        return _bind_trips(run, method, ctx, tuple(sorted(outside)), traffic)
    return LocalStep(
        Structure(tuple(forms), method.model_block, run.tail),
        run.nodes,
        tuple(c for lf in forms for c in lf.coefficients),
        next((lf.clients for lf in forms if lf.takes_gradients), None),
        tuple(sorted(outside)),
        tuple(ph.label for ph in run.phases),
        traffic,
        views=run_views(forms),
        samples=next((lf.samples for lf in forms if lf.takes_gradients), None),
        products=tuple((p.matrix, p.rows) for lf in forms for p in lf.products),
    )


def _bind_trips(run: _Run, method: Method, ctx: RunContext, outside: tuple, traffic) -> LocalStep:
    """A run with repeated phases, bound by count: its nodes in their order with their
    trips, the per-node coefficients of each repetition given for every node (the value
    at nodes that skip it is never read)."""
    trips = run.trips
    assert trips is not None  # (a run with repeated phases)
    n = run.nodes.size
    coefs: list = []
    body = len(run.forms) - run.tail
    for k, (lf, level) in enumerate(zip(run.forms, run.levels, strict=True)):
        for c in lf.coefficients:
            if k >= body or level < 0 or np.ndim(c) == 0:
                coefs.append(c)
            else:
                coefs.append(spread_over(c, trips.counts > level, n))
    clients = None
    taking = next((lf for lf in run.forms if lf.takes_gradients), None)
    if taking is not None and taking.clients is not None and taking.nodes.size:
        clients = run.nodes - (int(taking.nodes[0]) - int(taking.clients[0]))
    levels = tuple(run.levels[:body])
    level_traffic = tuple(
        round_traffic(
            [ph for ph, lv in zip(run.phases, run.levels, strict=True) if lv == j],
            method, ctx.dim, ctx.sample_counts,
        )
        for j in range(trips.most)
    )  # fmt: skip
    return LocalStep(
        Structure(tuple(run.forms), method.model_block, run.tail, levels),
        run.nodes,
        tuple(coefs),
        clients,
        outside,
        tuple(ph.label for ph in run.phases),
        traffic,
        trips.extents,
        level_traffic,
        trips.counts,
        run_views(run.forms),
    )


def plan_round(
    phases: list[Phase],
    backend,
    method: Method,
    ctx: RunContext,
    caps: Capabilities | None = None,
    *,
    notes: SlowPaths | None = None,
) -> list:
    """What :func:`~stochmix.engine.backends.dispatch.execute` runs for a round:
    :class:`LocalStep` s and single phases.
    ``caps``: the backend's :func:`~stochmix.engine.plan.capabilities.capabilities` (made here
    when None). ``notes`` gets the phases that take the general path, and why (see
    :mod:`stochmix.engine.plan.slowpath`)."""
    # A method that returns the very same phase objects again (decentralized methods on a
    # static or periodic graph) gets the plan made for them, kept on the first phase
    # along with everything it was made for (compared by identity, so never stale).
    memo = phases[0].__dict__.setdefault("_plans", {}) if phases else None
    key = (id(backend), id(method), id(ctx), *map(id, phases))
    if memo is not None:
        found = memo.get(key)
        if found and all(
            a is b for a, b in zip(found[0], (backend, method, ctx, *phases), strict=True)
        ):
            return list(found[1])
    if caps is None:
        caps = capabilities(backend)
    local_ok, whole = caps.local_phases, caps.blockwise
    # a whole-block phase leaves the checks of the blocks the reported model sums to the
    # run, which checks that model after every round
    trusted = method.checked_by_output if whole else ()
    why: dict = {}
    items = _plan(
        phases, local_ok, method, ctx, whole, why, caps.trips, caps.products,
        caps.compiled_samples,
    )  # fmt: skip
    if notes is not None:
        _note_general(items, phases, why, backend, local_ok, whole, notes, caps.row_subsets)
    plan = [
        _bind(item, method, ctx)
        if isinstance(item, _Run)
        else item.trusting(trusted)
        if isinstance(item, Phase)
        else item
        for item in items
    ]
    if caps.hands_off:
        plan = _hand_off(plan)
    if memo is not None:
        if len(memo) >= 256:
            memo.clear()
        # kept from the second time these phases come (reused phases only: the plan
        # refers to the phase that holds it, a cycle not worth making for phases built
        # afresh every round)
        memo[key] = ((backend, method, ctx, *phases), plan) if key in memo else None
    return list(plan)


def label_of(phase: Phase, phases: list) -> str:
    """A phase's label for messages, or ``#k`` (its place in the round) when it has none."""
    if phase.label:
        return phase.label
    return next((f"#{k}" for k, ph in enumerate(phases) if ph is phase), "#?")


def whole_path(form, whole: bool, row_subsets: bool) -> bool:
    """Whether a phase with this whole-block ``form`` (or None) goes to the backend's
    ``apply_blockwise``: ``whole``, the backend applies whole-block forms, and a form on
    some rows only (the active nodes') where it applies those (``row_subsets``). The
    rule :func:`~stochmix.engine.backends.dispatch.execute` follows."""
    return whole and form is not None and (row_subsets or not form.subset)


def general_path(item, whole: bool, row_subsets: bool = True) -> bool:
    """Whether a planned item is a phase that takes the general path (its sparse rows):
    not a segment, not a whole-block product (:func:`whole_path`), not a nonlinear row
    map."""
    if not isinstance(item, Phase) or isinstance(item, RowMap):
        return False
    return not whole_path(item.blockwise, whole, row_subsets)


#: Why an activated push is a slow path (see :func:`_note_general`).
PUSHED = (
    "under node activation its push (W D + I - D: the columns of W at the active nodes) "
    "is built every round and applied through sparse rows on this backend, not in a "
    "compiled pass (the NumPy backend scatters the active nodes' columns of W in one "
    "pass: applies_row_subsets); under edge activation (gossip) it costs what its edges do"
)


def _note_general(
    items, phases, why, backend, local_ok, whole, notes: SlowPaths, row_subsets: bool = True
) -> None:
    """Record in ``notes`` the planned phases that take the general path, and why."""
    what = "general path (its sparse rows built and applied every round)"
    if not local_ok and not hasattr(backend, "runs_local_phases"):
        # (a backend that declares runs_local_phases = False chose the general path)
        name = getattr(backend, "name", type(backend).__name__)
        notes.add("", what, f"the {name} backend runs no node-local segments (runs_local_phases)")
    for item in items:
        if not general_path(item, whole, row_subsets):
            continue
        if getattr(item, "pushes", False):
            notes.add(label_of(item, phases), what, PUSHED)
            continue
        if getattr(item, "row_sparse", False):
            continue  # (an activated mixing phase: its sparse rows are the active ones)
        reason = why.get(id(item))
        if reason is None:
            if not local_ok and item.local is not None:
                continue  # said once for the round, above
            reason = "it is not node-local"
        if not whole and item.local is None and item.blockwise is not None:
            reason = "it mixes whole blocks and the backend has no apply_blockwise"
        notes.add(label_of(item, phases), what, reason)

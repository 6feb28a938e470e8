"""``explain``: the plan of a run's first rounds, as the engine makes it, in words.

:func:`explain` sets a run up as :func:`~stochmix.engine.runner.loop.run` does (the same
backend, compiled gradient, state layout and :class:`~stochmix.engine.plan.planner.
RoundPlanner`), draws the first rounds' participants from the same stream and asks the
planner for their plans, without running them. What it reports is what the run would do:

* the round cut into **segments**: node-local segments (a run of node-local phases over
  the participants, run as one NumPy program, one compiled Numba loop or one Torch
  program), whole-block phases (one sparse product per mixed block: the decentralized
  methods' fast path), activated phases (the sparse rows of a round's active nodes: a
  gossip tick's intended path, as cheap as its edge), nonlinear row maps, and phases on
  the **general path** (their sparse rows built and applied every round: the slow path),
  each with why;
* what runs the node-local segments, and why the compiled loop is off where it is;
* whether rounds are **templated** (planned once per ``template_key``, as the planner keys
  them: with a round's largest trip count or its groups), and why not; under edge
  activation, whether the gossip ticks run in compiled segments, and why not;
* the slow paths the planner noted (:mod:`stochmix.engine.plan.slowpath`), the same a long
  run warns about.

``str(explain(...))`` prints it; :attr:`Explanation.table` gives the segments as rows.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ..._validate import as_int
from ..model.phase import Phase
from ..model.rowmap import RowMap
from ..plan.capabilities import capabilities
from ..plan.gradients import (
    ROWWISE_MIN_ENTRIES,
    ROWWISE_MIN_WORK,
    compiled_refusal,
    row_gradient,
    runs_rowwise,
)
from ..plan.planner import NOT_TEMPLATED, record_overrides
from ..plan.round_plan import LocalStep, general_path
from ..plan.slowpath import SLOW_PATH_MIN_ROUNDS, SlowPath
from .arguments import RunOptions
from .explain_batches import BATCHED, batches, checkpointed, ticks
from .loop import participant_stream, prepare

__all__ = ["Explanation", "RoundPlan", "Segment", "explain"]

GENERAL = "general path (sparse rows, built every round)"
ACTIVE = "sparse rows of the active nodes"


@dataclass(frozen=True)
class Segment:
    """One item of a round's plan.

    Attributes:
        kind: "node-local" (a segment of node-local phases), "round loop" (every phase of
            a round of a verified segment key, run by the compiled loop of
            :mod:`~stochmix.engine.runner.segments` in a batch of rounds: one program
            for the round and the rounds around it), "whole-block" (a phase
            applied as sparse products over whole blocks), "active rows" (an activated
            phase: the sparse rows of the round's active nodes, its intended path, costing
            what those nodes cost), "row map" (a nonlinear phase) or "general" (a phase
            on the general path).
        phases: the labels of its phases, in order ("" for an unlabelled phase).
        nodes: how many nodes a node-local segment runs over (None for other kinds).
        runs: what applies it: "NumPy program", "compiled loop (Numba)", "Torch
            program", "block products" (one product per mixed block), the active nodes'
            sparse rows, "row map" or the general path.
        tail: how many of the last phases of a node-local segment only set single rows
            from the rows it summed (a server step after its aggregation).
        why: for a phase on the general path, why it is there.
        repeats: for a node-local segment that repeats a phase a per-node number of
            times (uneven local steps, :mod:`stochmix.engine.model.trips`), how many nodes
            take each repetition (its prefixes, decreasing); empty otherwise.
        products: for a node-local segment, how many mixing products (``W @ x``) it
            computes when it starts (:mod:`stochmix.engine.model.product_form`).
        waits: whether it mixes a block that an earlier segment of the round writes: every
            node's rows of it must be written before the product reads them (a barrier),
            so the two cannot be one program.
    """

    kind: str
    phases: tuple[str, ...]
    nodes: int | None
    runs: str
    tail: int = 0
    why: str | None = None
    repeats: tuple[int, ...] = ()
    products: int = 0
    waits: bool = False

    @property
    def fast(self) -> bool:
        """Whether the segment takes a fast path (anything but the general path)."""
        return self.kind != "general"

    def describe(self) -> str:
        """One line: what it is, what runs it, its phases."""
        names = _grouped(self.phases[: len(self.phases) - self.tail])
        if self.tail:
            names += f"; then {_grouped(self.phases[len(self.phases) - self.tail :])}"
        if self.kind == "node-local":
            head = f"node-local segment, {self.nodes} nodes, {self.runs}"
            if self.repeats:
                counts = "/".join(map(str, self.repeats))
                head += f" (per-node trip counts: repetitions over {counts} nodes)"
            if self.products:
                many = "s" if self.products > 1 else ""
                head += f", {self.products} mixing product{many} at its start"
        elif self.kind == "round loop":
            head = f"the round loop of a compiled batch of rounds, {self.nodes} nodes, {self.runs}"
        elif self.kind == "whole-block":
            head = "whole-block phase, one product per mixed block"
        elif self.kind == "active rows":
            head = f"activated phase, {ACTIVE}"
        elif self.kind == "row map":
            head = "nonlinear row map"
        else:
            head = GENERAL
        if self.waits:
            head += " (after a barrier: it mixes rows an earlier segment writes)"
        line = f"{head}: {names}"
        return line if self.why is None else f"{line}\n       why: {self.why}"


@dataclass(frozen=True)
class RoundPlan:
    """The plan of one explained round.

    Attributes:
        round: its number.
        participants: how many take part.
        source: how the planner got it: "built" (from the method's phases), "cache"
            (an earlier round's plan, by ``phase_key``), "template" (an earlier round's
            plan for new participants, by ``template_key``) or "batch" (not planned: the
            round runs in a compiled batch of rounds, :mod:`~stochmix.engine.runner.segments`,
            its one segment of kind "round loop").
        segments: the plan, in order.
    """

    round: int
    participants: int
    source: str
    segments: tuple[Segment, ...]


@dataclass(frozen=True)
class Explanation:
    """What :func:`explain` found; ``str()`` prints it (see the module docstring).

    Attributes:
        method: the method's name.
        backend: the backend's name.
        programs: what runs node-local segments (and why the compiled loop is off,
            where it is).
        templating: whether rounds are templated, and why not.
        rounds: each explained round's plan.
        slow_paths: the slow paths the planner noted, in the order met.
    """

    method: str
    backend: str
    programs: str
    templating: str
    rounds: tuple[RoundPlan, ...]
    slow_paths: tuple[SlowPath, ...]

    @property
    def fast(self) -> bool:
        """Whether every explained round stays on the fast paths (no slow path noted)."""
        return not self.slow_paths

    @property
    def segments(self) -> tuple[Segment, ...]:
        """The last explained round's segments (a steady round's plan)."""
        return self.rounds[-1].segments if self.rounds else ()

    @property
    def table(self) -> list[dict]:
        """Every explained round's segments as rows: ``round``, ``segment`` (its number,
        from 1), ``kind``, ``phases`` (labels joined by ", "), ``nodes``, ``runs``,
        ``why`` (for example ``pandas.DataFrame(explanation.table)``)."""
        return [
            {
                "round": plan.round,
                "segment": k + 1,
                "kind": seg.kind,
                "phases": ", ".join(seg.phases),
                "nodes": seg.nodes,
                "runs": seg.runs,
                "why": seg.why,
            }
            for plan in self.rounds
            for k, seg in enumerate(plan.segments)
        ]

    def __str__(self) -> str:
        count = len(self.rounds)
        lines = [
            f"{self.method} on the {self.backend} backend: the plan of {count} "
            f"round{'s' if count != 1 else ''}",
            f"  node-local segments run: {self.programs}",
            f"  templating: {self.templating}",
        ]
        lines += _round_lines(self.rounds)
        if self.slow_paths:
            lines.append(
                f"  slow paths (a run of more than {SLOW_PATH_MIN_ROUNDS} rounds warns once "
                "about each):"
            )
            lines += [f"    - {note}" for note in self.slow_paths]
        else:
            lines.append("  slow paths: none")
        return "\n".join(lines)

    def __repr__(self) -> str:
        count = sum(len(plan.segments) for plan in self.rounds[-1:])
        state = "fast path" if self.fast else f"{len(self.slow_paths)} slow path(s)"
        return (
            f"<Explanation of {self.method}: {len(self.rounds)} rounds planned, "
            f"{count} segments in the last, {state}>"
        )

    def _repr_pretty_(self, printer, cycle) -> None:  # IPython shows the whole plan
        printer.text(repr(self) if cycle else str(self))


_HOW = {
    "built": "planned from its phases",
    "cache": "an earlier round's plan",
    "template": "instantiated from its template",
    "batch": "not planned: run in a compiled batch",
}


def _shape(segments) -> tuple:
    """Segments up to their node counts and per-node trip counts (which follow each
    round's participants and draws; how many repetitions a segment has stays)."""
    return tuple((replace(seg, nodes=None, repeats=()), len(seg.repeats)) for seg in segments)


def _round_lines(plans) -> list[str]:
    """The rounds' part of :meth:`Explanation.__str__`: a round with new segments lists
    them; a stretch of rounds that repeat them (the same segments over each round's own
    nodes, with its own per-node trip counts) or have nothing to do is one line, "rounds
    3-200, ...: the same segments as round 2"."""
    lines: list[str] = []
    previous: tuple | None = None  # the shape of the last segments listed
    shown: RoundPlan | None = None  # ... and their round's plan
    i = 0
    while i < len(plans):
        plan = plans[i]
        shape = _shape(plan.segments)
        same = bool(shape) and shape == previous
        if shape and not same:
            head = f"  round {plan.round}, {plan.participants} participants"
            lines.append(f"{head} ({_HOW[plan.source]}):")
            lines += [f"    {k + 1}. {seg.describe()}" for k, seg in enumerate(plan.segments)]
            previous, shown, i = shape, plan, i + 1
            continue
        j = i + 1  # the stretch: the same shape again, or nothing to do, throughout
        while j < len(plans) and _shape(plans[j].segments) == shape:
            j += 1
        stretch = plans[i:j]
        first, last = stretch[0].round, stretch[-1].round
        counts = sorted({p.participants for p in stretch})
        who = str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"
        how = ", ".join(dict.fromkeys(_HOW[p.source] for p in stretch))
        rounds = f"round {first}" if first == last else f"rounds {first}-{last}"
        what = "nothing to do"
        if same and shown is not None:  # (same: some segments were listed)
            moved = any(_nodes(p) != _nodes(shown) for p in stretch)
            drawn = any(_trips(p) != _trips(shown) for p in stretch)
            what = f"the same segments as round {shown.round}"
            what += ", each over its own nodes" if moved else ""
            what += (" and trip counts" if moved else ", each with its own trip counts") * drawn
        lines.append(f"  {rounds}, {who} participants ({how}): {what}")
        i = j
    return lines


def _nodes(plan) -> tuple:
    return tuple(seg.nodes for seg in plan.segments)


def _trips(plan) -> tuple:
    return tuple(seg.repeats for seg in plan.segments)


def explain(
    method, problem, participation, rounds: int = 2, *, options: RunOptions | None = None,
    **run_options,
) -> Explanation:  # fmt: skip
    """The plan of the first ``rounds`` rounds of ``run(method, problem, participation,
    ..., **run_options)``, in words: how each round is cut into segments, what runs them,
    whether rounds are templated, and every slow path with its reason. Nothing is run.

    Args:
        method, problem, participation: as for :func:`~stochmix.engine.runner.loop.run`.
        rounds: how many rounds to plan (the first ones of the run's stream).
        options: the run's options as one record
            (:class:`~stochmix.engine.runner.arguments.RunOptions`), instead of keywords.
        run_options: any keyword arguments of ``run`` (checked as ``run`` checks them);
            those that change the plan are ``seed`` (the participants), ``backend``,
            ``dtype``, ``device``, ``mixing``, ``compiled``, ``storage`` and ``callback``.

    Returns:
        An :class:`Explanation`; ``print(explain(...))`` shows it.

    ``compiled="auto"`` decides by the run's length; here the run is ``rounds`` long, so
    the report says from how many rounds it would compile (``compiled=True`` shows the
    compiled plan). ``backend="distributed"`` is not explained (its plans are per rank).
    """
    if options is None:
        try:
            options = RunOptions.of(**run_options)
        except TypeError as error:
            raise TypeError(f"explain() got {error}") from None
    elif run_options:
        raise TypeError(
            f"explain() takes options= or keyword options, not both: {sorted(run_options)}"
        )
    rounds = as_int(rounds, "rounds", minimum=1)
    _, options = options.checked(method, problem, participation, rounds)
    back = options.make_backend()
    if getattr(back, "runs_sharded", False):
        raise ValueError(
            "explain plans the rounds of one process; backend='distributed' plans each rank's "
            "shard (explain the same run with backend='numpy' to see its segments)"
        )
    dtype = getattr(back, "dtype", options.dtype)
    setup = prepare(method, problem, participation, rounds, back, options, warn=False)
    seed = options.seed
    planner, dim = setup.planner, int(problem.dim)
    stream = participant_stream(participation, seed)
    clock = options.clock
    if clock is not None:  # the rounds as the clock makes them (deadlines, arrivals)
        stream = clock.stream(stream, method, setup.ctx, seed)
    whole = hasattr(back, "apply_blockwise")
    made = batches(
        method, problem, participation, setup, back, dtype, options, rounds, planner.notes
    )
    labels: dict = {}  # a verified key -> the labels of the phases it was learnt from
    plans, keys, overridden, inherited, cached = [], [], [], [], []
    for r in range(rounds):
        drawn = next(stream)
        nodes = getattr(drawn, "nodes", None)  # an Activation record, or the indices
        if nodes is None:
            participants = np.asarray(drawn, dtype=np.int64)
        else:
            participants, setup.ctx.activation = nodes, drawn
        key = None if made is None else made.key(r, participants, drawn)
        if key is not None and made.program(key) is not None:
            loop = Segment("round loop", labels[key], int(participants.size), BATCHED)
            plans.append(RoundPlan(r, int(participants.size), "batch", (loop,)))
            checkpointed(made, options, r + 1, rounds)
            continue
        keys.append(planner.keys.get("template_key", r, participants))
        inherited.append(method.template_key(r, participants))
        cached.append(method.phase_key(r, participants))
        overridden.append(record_overrides(setup.ctx))
        plan = planner.plan(r, participants)
        segments = tuple(
            _segment(item, back, setup.rows, dim, whole, planner.notes) for item in plan
        )
        segments = _barriers(plan, segments, setup.ctx.layout)
        plans.append(RoundPlan(r, int(participants.size), planner.source, segments))
        if key is not None:  # what the run's segmenter learns from a round built in full
            phases = planner.phases  # (None for a cached plan: built again, as the run does)
            if phases is None:
                phases = method.round_phases(r, participants, setup.ctx)
            made.learn(key, phases, participants, planner.round_traffic())
            labels.setdefault(key, tuple(p.label for p in phases))
        checkpointed(made, options, r + 1, rounds)
    return Explanation(
        method=method.name,
        backend=getattr(back, "name", type(back).__name__),
        programs=_programs(back, setup, problem, dtype, rounds, dim),
        templating=_templating(planner, keys, overridden, plans, inherited)
        + _refused_cache(planner, cached)
        + ticks(method, problem, participation, setup, back, dtype, options, plans),
        rounds=tuple(plans),
        slow_paths=tuple(planner.notes),
    )


def _barriers(plan: list, segments: tuple, layout) -> tuple:
    """``segments`` with :attr:`Segment.waits` set: those that mix a block an earlier item
    of the round writes."""
    written: set = set()
    out = []
    for item, segment in zip(plan, segments, strict=True):
        mixed = _mixed(item)
        out.append(replace(segment, waits=bool(mixed & written)))
        written |= _written(item, layout)
    return tuple(out)


def _mixed(item) -> set:
    """The blocks a planned item mixes (its products' or its whole-block form's sources)."""
    if isinstance(item, LocalStep):
        return {p.source for lf in item.structure.forms for p in lf.products}
    form = item.blockwise if isinstance(item, Phase) else None
    if form is None:
        return set()
    mixed = {t.source for target in form.targets for t in target.terms if t.kind == "mix"}
    return mixed | {term.source for _, _, term in form.pushes}


def _written(item, layout) -> set:
    """The blocks a planned item writes rows of."""
    if isinstance(item, LocalStep):
        views = {v.name: v.block for lf in item.structure.forms for v in lf.views}
        return {views.get(b, b) for b in item.structure.schedule.written}
    form = item.blockwise if isinstance(item, Phase) and not isinstance(item, RowMap) else None
    if form is not None:
        return {target.block for target in form.targets}
    rows = getattr(item, "z_rows", None) if isinstance(item, RowMap) else None
    if rows is None:
        rows = getattr(item, "rows", ())
    return {layout.locate(int(r))[0] for r in np.unique(np.asarray(rows, dtype=np.int64))}


def _segment(item, back, kernel, dim: int, whole: bool, notes) -> Segment:
    """The :class:`Segment` of one planned item."""
    if isinstance(item, LocalStep):
        if getattr(back, "local_program", None) is not None:
            runs = "Torch program"
        elif item.samples is not None and (kernel is None or kernel.sampled is None):
            runs = "NumPy program (sampled gradients)"  # (the problem's, in one chunk)
        elif runs_rowwise(capabilities(back).compiled, kernel, item.nodes.size, dim):
            drawn = ", sampled gradients" if item.samples is not None else ""
            runs = f"compiled loop (Numba{drawn})"
        else:
            runs = "NumPy program"
        labels = item.labels or ("",) * len(item.structure.forms)
        return Segment(
            "node-local", labels, int(item.nodes.size), runs, item.structure.tail,
            repeats=tuple(int(e) for e in item.extents), products=len(item.products),
        )  # fmt: skip
    if isinstance(item, RowMap):
        return Segment("row map", (item.label,), None, "row map")
    if isinstance(item, Phase) and not general_path(item, whole, capabilities(back).row_subsets):
        return Segment("whole-block", (item.label,), None, "block products")
    if getattr(item, "row_sparse", False) and not getattr(item, "pushes", False):
        # its intended path: no slow-path note (planner)
        return Segment("active rows", (item.label,), None, ACTIVE)
    # the notes name an unlabelled phase by its place in the round ("#k")
    named = (lambda n: n.phase == item.label) if item.label else (lambda n: n.phase[:1] == "#")
    why = next(
        (n.why for n in notes if named(n) and n.what.startswith("general")),
        "it is not node-local",
    )
    return Segment("general", (item.label,), None, GENERAL, why=why)


def _programs(back, setup, problem, dtype, rounds: int, dim: int) -> str:
    """What runs the node-local segments, and why the compiled loop is off if it is."""
    if getattr(back, "local_program", None) is not None:
        return "Torch programs (the Torch backend)"
    if not getattr(back, "runs_local_phases", False):
        return "nothing: the backend runs no node-local segments (every phase is general)"
    mode = getattr(back, "compiled", False)
    if setup.rows is not None:
        if mode is True:
            return "the compiled loop (Numba, one node at a time) for every segment"
        return (
            "the compiled loop (Numba) for segments of at least "
            f"{ROWWISE_MIN_ENTRIES} node entries (nodes x d), NumPy programs below"
        )
    if mode is False:
        return "NumPy programs (compiled=False)"
    per_round = setup.expected * dim
    if per_round < ROWWISE_MIN_ENTRIES:
        return (
            f"NumPy programs (compiled='auto' compiles rounds of {ROWWISE_MIN_ENTRIES}+ node "
            f"entries; these have about {per_round:.0f})"
        )
    if row_gradient(problem, back, dtype, float("inf"), per_round) is None:
        why = compiled_refusal(problem) or f"{type(problem).__name__} gives no compiled gradient"
        return f"NumPy programs (the compiled loop cannot run: {why})"
    needed = int(np.ceil(ROWWISE_MIN_WORK / per_round))
    return (
        f"NumPy programs (compiled='auto' compiles runs of at least {needed} rounds here, "
        f"this explains {rounds}; compiled=True shows the compiled plan)"
    )


def _templating(planner, keys: list, overridden: list, plans, inherited) -> str:
    """Whether the explained rounds are templated, and why not. ``keys``: each round's
    ``template_key`` as the engine takes it (None where the method inherits it past an
    overriding subclass: ``inherited`` holds what it gives); ``overridden``: whether the
    round's record carried what the keys cannot see (then the planner builds it in full).
    The planner keys its templates by more than ``template_key`` (the round's largest trip
    count, its groups): what it made and used is read from it, not looked up by these
    keys."""
    if all(k is None for k in keys):
        if any(k is not None for k in inherited):
            return f"off ({planner.keys.why('template_key')})"
        return "off (the method gives no template_key)"
    refused = [n for n in planner.notes if n.what == NOT_TEMPLATED]
    if refused:
        note = refused[0]
        where = f"phase {note.phase!r}: " if note.phase else ""
        return f"off ({where}{note.why})"
    keyed = [over for k, over in zip(keys, overridden, strict=True) if k is not None]
    if all(keyed):
        return (
            "off (each round's record sets what its template_key cannot see: the clock's "
            "local steps, launches or arrivals; such rounds are built in full)"
        )
    templates = list(planner.templates.values())
    if any(t is False for t in templates):
        general = [n for n in planner.notes if n.what.startswith("general")]
        if general:
            return f"off (phase {general[0].phase!r} takes the general path)"
        return "off"
    if any(p.source == "template" for p in plans) or any(t.verified for t in templates):
        return "on (one plan per template_key, checked against a full build on its second round)"
    if not templates:
        return "off (rounds of fewer than two participants are built in full, by design)"
    return (
        "on, not yet checked (a template is checked against a full build on its key's "
        "second round; none came back in these rounds)"
    )


def _refused_cache(planner, cached: list) -> str:
    """Why the plan cache is off where the method's own ``phase_key`` would give keys that
    the engine sets aside ("" otherwise)."""
    if not planner.keys.refused("phase_key") or all(k is None for k in cached):
        return ""
    return f"; plan cache: off ({planner.keys.why('phase_key')})"


def _grouped(labels) -> str:
    """Labels joined by ", ", a label repeated k times in a row written once as ``label
    x k`` (an unlabelled phase as ``(unlabelled)``)."""
    out: list[list] = []
    for label in labels:
        if out and out[-1][0] == label:
            out[-1][1] += 1
        else:
            out.append([label, 1])
    return ", ".join(
        (label or "(unlabelled)") + (f" x{count}" if count > 1 else "") for label, count in out
    )

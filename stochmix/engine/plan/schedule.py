"""The schedule of a run of node-local phases: what the generated code does, as data.

A run of node-local phases (see :class:`~stochmix.engine.model.phase.LocalForm`) is applied to
its nodes a chunk (or a node) at a time: gather the rows the run reads into buffers, apply
every phase to the buffers, scatter the rewritten rows. Which buffer holds which block
after each phase, which blocks are zero, which updates can be done in place, which values
must be checked for NaN and Inf and which sums go into outer rows depend only on the
run's *structure* (its forms' signatures), not on its nodes or coefficient values.
:func:`plan_schedule` works them out once and returns a :class:`Schedule`: a flat list of
typed steps over named buffers, plus what happens around the chunks (snapshots of single
rows, outer rows, the tail). It holds no code and no arrays.

Emitters turn a schedule into code, one per target (the NumPy program, the Numba loop over
nodes and the Torch program, :mod:`stochmix.engine.codegen`), each step one statement of
its language; none of them decides anything about buffers or order.

Buffers: every block the run touches has a slot ``i`` (its position in
:attr:`Schedule.blocks`) and two buffers ``b{i}_0`` and ``b{i}_1``; a phase that rewrites
a block out of place writes the spare one. Operands besides buffers are a single row of
the state (:class:`Single`, read from the snapshot taken when the run starts), the
gradient scratch :data:`GRADIENT` and the temporary :data:`SCRATCH`.

Coefficients: the run's coefficient values are numbered in one order,
:data:`~stochmix.engine.model.phase.COEFFICIENT_ORDER` within each form and form after form;
a :class:`Coef` names a value's number (its *slot*) and how it multiplies (its kind:
``"one"``, ``"minus_one"``, ``"scalar"`` or ``"array"``, one value per node).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..model.kernels import KERNELS
from ..model.phase import COEFFICIENT_ORDER, LocalForm, coefficient_kind
from .steps import (
    GRADIENT,
    SCRATCH,
    Add,
    AddScaled,
    Buffer,
    Check,
    Coef,
    Copy,
    EndGuard,
    Gather,
    Gradient,
    Guard,
    Kernel,
    Multiply,
    Negate,
    Operand,
    OuterSingle,
    Reduce,
    Scale,
    Single,
    Step,
    Store,
    Subtract,
    TailEntry,
    Zero,
)


@dataclass(frozen=True)
class Schedule:
    """A run of node-local phases, planned; see the module docstring.

    Attributes:
        model: the block where gradients are taken.
        blocks: every block the chunk touches, in slot order.
        gather: blocks read before any phase writes them (gathered at the chunk's start).
        written: blocks the run writes on its nodes (scattered at the chunk's end).
        singles: rows of the state read one at a time (snapshotted at the run's start).
        outer_rows: rows set, when every chunk is done, from sums over the nodes.
        outer_singles: single-row terms of the outer rows, added after the sums.
        tail: phases of single rows from single rows applied after the outer rows, each a
            tuple of entries; first, where some, the single-row terms of body phases that
            read an outer row an earlier phase of the run sets (each such outer row kept,
            plus those terms).
        steps: the chunk's work, in order.
        stores: what is scattered into each written block.
        checks: buffers checked for NaN and Inf after the stores.
        needs_gradients: whether any step takes gradients.
        coefficients: how many coefficient values the run takes.
        zero: blocks whose rows at the run's nodes are known to be zero when it starts
            (see :func:`plan_schedule`): never gathered, and not stored back when they
            end zero.
        scratch: blocks whose node rows the state does not keep: never stored.
    """

    model: str
    blocks: tuple[str, ...]
    gather: tuple[str, ...]
    written: tuple[str, ...]
    singles: tuple[int, ...]
    outer_rows: tuple[int, ...]
    outer_singles: tuple[OuterSingle, ...]
    tail: tuple[tuple[TailEntry, ...], ...]
    steps: tuple[Step, ...]
    stores: tuple[Store, ...]
    checks: tuple[Buffer, ...]
    needs_gradients: bool
    coefficients: int
    zero: frozenset = frozenset()
    scratch: frozenset = frozenset()

    def describe(self) -> str:
        """The schedule as text, one line per step: for reading a run's plan and for the
        golden tests."""

        def show(x):
            if isinstance(x, tuple) and not isinstance(x, Single | Coef):
                return ",".join(show(v) for v in x)
            if isinstance(x, Single):
                return f"z[{x.row}]"
            if isinstance(x, Coef):
                return f"c{x.slot}:{x.kind}"
            return str(x)

        lines = [
            f"blocks {', '.join(self.blocks)}; gather {', '.join(self.gather) or '-'}; "
            f"write {', '.join(self.written) or '-'}",
        ]
        if self.zero:
            lines.append(f"zero at the start: {', '.join(sorted(self.zero))}")
        if self.scratch:
            lines.append(f"not kept: {', '.join(sorted(self.scratch))}")
        if self.singles:
            lines.append(f"snapshot rows {', '.join(map(str, self.singles))}")
        for step in self.steps:
            if isinstance(step, Check) and step.unless:
                held = " and ".join(f"c{c.slot} >= {bound!r}" for c, bound in step.unless)
                lines.append(f"  check {step.value} unless {held}")
                continue
            fields = " ".join(show(v) for v in step)
            lines.append(f"  {type(step).__name__.lower()} {fields}".rstrip())
        for store in self.stores:
            lines.append(f"store {self.blocks[store.block]} <- {store.value or 'zeros'}")
        for value in self.checks:
            lines.append(f"check {value}")
        for row in self.outer_rows:
            lines.append(f"outer z[{row}] <- sums")
        for row, ref, slot in self.outer_singles:
            lines.append(f"outer z[{row}] += c{slot} z[{ref}]")
        for k, entries in enumerate(self.tail):
            terms = ", ".join(
                f"z[{e.row}] = {e.kernel}("
                + ", ".join(f"z[{r}]" for r in (e.ref, *e.more))
                + "; "
                + ", ".join(f"c{e.slot + j}" for j in range(e.scalars))
                + ")"
                if e.kind == "kernel"
                else f"z[{e.row}] "
                + {"zero": "= 0", "keep": "kept"}.get(e.kind, f"+= c{e.slot} z[{e.ref}]")
                for e in entries
            )
            lines.append(f"tail {k}: {terms}")
        return "\n".join(lines)


# ---------------------------------------------------------------------- planning
class _Planner:
    """The buffers' state while the steps are planned."""

    def __init__(self, blocks: tuple[str, ...]):
        self.slot = {b: i for i, b in enumerate(blocks)}
        self.cur: dict[str, Buffer | None] = {}  # block -> buffer holding it (None: zero)
        self.version: dict[str, int] = {}  # times a buffer has been written
        self.reduced: set[tuple] = set()  # (buffer, version) summed into an outer row
        self.unread: set[str] = set()  # buffers written and not read since
        self.steps: list = []
        self.outer_singles: list[OuterSingle] = []
        #: (buffer, version) read by a step that carries NaN and Inf into a later value
        self.carried: set[tuple] = set()
        #: (buffer, version) -> ((source, version), (Coef, bound) pairs): a kernel's
        #: output, finite exactly when its source was while the scalars hold the bounds
        self.mirrors: dict[tuple, tuple] = {}
        self.guarded = False  # planning a Guard region
        #: outer rows set by the phases planned so far, and per outer row the single-row
        #: terms of later phases that read them (applied once they are set: a tail)
        self.outer_set: set = set()
        self.late: dict = {}

    def wrote(self, buffer: Buffer) -> None:
        self.version[buffer] = self.version.get(buffer, 0) + 1
        self.unread.add(buffer)

    def read(self, buffer: Buffer | None) -> None:
        """A later value now depends on ``buffer`` (NaN and Inf carry over into it)."""
        self.unread.discard(buffer)
        if buffer is not None and not self.guarded:  # (a guarded step may not run)
            self.carried.add((buffer, self.version.get(buffer, 0)))

    def check(self, value: Buffer) -> None:
        """Check ``value`` before it is replaced: unless it is a kernel's output whose
        source a later value has also read (its NaN or Inf then shows there, while the
        kernel's scalars hold their bounds: the check is kept for other values)."""
        found = self.mirrors.get((value, self.version.get(value, 0)))
        unless = ()
        if found is not None and found[0] in self.carried:
            unless = found[1]
        self.steps.append(Check(value, unless))
        self.read(value)

    def buffer(self, block: str, k: int) -> Buffer:
        return Buffer(self.slot[block], k)

    def spare(self, block: str) -> Buffer:
        first = self.buffer(block, 0)
        return self.buffer(block, 1) if self.cur.get(block) == first else first


def numbered(lf: LocalForm, base: int) -> dict[str, list[tuple]]:
    """A form's entries with their coefficients numbered from ``base``, by group of
    :data:`~stochmix.engine.model.phase.COEFFICIENT_ORDER`: each entry becomes ``(entry,
    Coef)``. The one place where slots are assigned."""
    slot = base
    out: dict[str, list[tuple]] = {}
    for group in COEFFICIENT_ORDER:
        out[group] = []
        for entry in getattr(lf, group):
            if group == "kernels":  # round scalars: one slot each, always bound
                coefs = tuple(Coef(slot + k, "scalar") for k in range(len(entry.coef)))
                out[group].append((entry, coefs))
                slot += len(coefs)
                continue
            out[group].append((entry, Coef(slot, coefficient_kind(entry.coef))))
            slot += 1
    return out


def plan_schedule(
    forms: list[LocalForm],
    model_block: str,
    tail: int = 0,
    zero: frozenset = frozenset(),
    scratch: frozenset = frozenset(),
    levels: tuple = (),
) -> Schedule:
    """The :class:`Schedule` of a run of node-local phases; the last ``tail`` forms only
    set single rows from single rows (see :func:`stochmix.engine.plan.round_plan.plan_round`).

    ``levels``: for each form of the body, -1 (it runs at every node of the run) or the
    repetition it is (0 the first) of a phase repeated a per-node number of times (it
    runs at the nodes that make that repetition, see :mod:`stochmix.engine.model.trips`);
    empty: every form runs everywhere. A limited form's steps are a :class:`Guard` region
    that leaves each block in the buffer that held it before, so the code after the
    region is the same whether a node ran it or not; the blocks such a form writes are
    gathered (a node that skips the region keeps its values) unless known to be zero
    (they are then set to zero before the region: a :class:`Zero` step).

    NaN and Inf: every value written is read by a later value (which carries a NaN or
    Inf on), summed into an outer row, or checked (a :class:`Check` step, or the final
    checks). A gradient is not such a read (a loss may saturate); nor is a read inside a
    guarded region, for a value outside it. The output of an element-wise kernel that
    keeps finiteness for its round scalars' values (``ElementwiseKernel.faithful``) is
    finite exactly when its source was: when a later value has read that source too, the
    output's check carries ``unless`` bounds, and a writer may skip it while every such
    scalar holds its bound.

    ``zero``: blocks whose rows at the run's nodes are all zero when it starts (the engine
    tracks this: a tracker that every round empties, FOCUS's client rows of y). They are
    not gathered (a zero block is what the planner assumes of a block nothing wrote), and
    a zero block that ends the run zero is not stored back: its rows already are. The
    arithmetic is the same but for additions of zero that are left out.

    ``scratch``: blocks whose node rows the state does not keep (see
    :mod:`stochmix.engine.plan.liveness`): never stored (their final values are still checked
    for NaN and Inf); a run that would gather one is refused with ValueError."""
    body = forms[: len(forms) - tail]
    levels = tuple(levels) if levels else (-1,) * len(body)
    if len(levels) != len(body):
        raise ValueError(f"levels: one per form of the body ({len(body)}), got {len(levels)}")
    base = sum(len(lf.coefficients) for lf in body)
    tail_entries = []
    for lf in forms[len(forms) - tail :]:
        slots = numbered(lf, base)
        base += len(lf.coefficients)
        entries = [TailEntry(e.row, e.kind, e.ref, c.slot) for e, c in slots["outer"]]
        entries += [
            TailEntry(
                k.target, "kernel", k.source, cs[0].slot if cs else -1, k.kernel, len(cs), k.more
            )
            for k, cs in slots["kernels"]
        ]
        tail_entries.append(tuple(entries))
    blocks: list[str] = []
    gather: list[str] = []
    written: set[str] = set()
    for lf, level in zip(body, levels, strict=True):
        reads: list = [t.source for t in lf.terms] + [o.ref for o in lf.outer if o.kind == "sum"]
        reads += [b for k in lf.kernels for b in k.sources]
        if lf.takes_gradients:
            reads.append(model_block)
        if level >= 0:  # nodes past the prefix keep the values the block holds
            reads += [t for t in lf.targets if t not in zero and t not in scratch]
        for b in reads:
            if b not in written and b not in gather:
                gather.append(b)
        for b in [*reads, *lf.targets]:
            if b not in blocks:
                blocks.append(b)
        written.update(lf.targets)

    p = _Planner(tuple(blocks))
    # a kernel's source is read as it is (a kernel of zero need not be zero: a box's
    # projection), gathered even where known zero; one the state does not keep is zero
    # (liveness keeps the other blocks a run reads): its zeros are made in a buffer
    scratch = frozenset(scratch) & set(blocks)
    sources = {b for lf in body for k in lf.kernels for b in k.sources}
    zero = (frozenset(zero) & set(blocks) - sources) | (scratch & sources)
    gather = [b for b in gather if b not in zero]
    if scratch & set(gather):
        raise ValueError(
            f"blocks {sorted(scratch & set(gather))} are read by this run but their node rows "
            "are not kept in the state"
        )
    for b in gather:
        buffer = p.buffer(b, 0)
        p.steps.append(Gather(buffer, p.slot[b]))
        p.wrote(buffer)
        p.read(buffer)  # the state's own values, checked when they were written
        p.cur[b] = buffer
    base = 0
    for lf, level in zip(body, levels, strict=True):
        if level < 0:
            _phase(p, lf, base, model_block)
        else:
            _guarded(p, lf, base, model_block, level)
        base += len(lf.coefficients)
        p.outer_set.update(lf.outer_rows)
    if p.late:  # before the run's own tail: their phases come first
        late = tuple(
            entry
            for row in sorted(p.late)
            for entry in (TailEntry(row, "keep", row, -1), *p.late[row])
        )
        tail_entries.insert(0, late)
    # Written rows must be finite: each block's final rows unless an outer row has summed
    # them in their final state (NaN and Inf survive a sum).
    stores, checks = [], []
    for b in blocks:
        if b not in written:
            continue
        value = p.cur.get(b)
        if value is None and b in zero:
            continue  # zero before, zero after: nothing to write
        if b not in scratch:
            stores.append(Store(p.slot[b], value))
        if value is not None and (value, p.version.get(value, 0)) not in p.reduced:
            checks.append(value)
    return Schedule(
        model=model_block,
        blocks=tuple(blocks),
        gather=tuple(gather),
        written=tuple(b for b in blocks if b in written),
        singles=tuple(sorted({r for lf in body for r in lf.single_reads})),
        outer_rows=tuple(sorted({r for lf in body for r in lf.outer_rows})),
        outer_singles=tuple(p.outer_singles),
        tail=tuple(tail_entries),
        steps=tuple(p.steps),
        stores=tuple(stores),
        checks=tuple(checks),
        needs_gradients=any(lf.takes_gradients for lf in body),
        coefficients=base + sum(len(lf.coefficients) for lf in forms[len(forms) - tail :]),
        zero=zero,
        scratch=scratch,
    )


def _phase(p: _Planner, lf: LocalForm, base: int, model_block: str) -> None:
    """Plan one phase: gradients, outer sums (from the values before the phase), then
    every target block's new rows (out of place first, then in place)."""
    slots = numbered(lf, base)
    if lf.kernels:
        _kernels(p, slots["kernels"])
        return
    exprs: dict[str, list] = {t: [] for t in lf.targets}
    for term, coef in slots["terms"]:
        exprs[term.target].append(("block", term.source, coef))
    for term, coef in slots["external"]:
        exprs[term.target].append(("row", term.row, coef))
    for term, coef in slots["gradients"]:
        exprs[term.target].append(("grad", None, coef))
    reductions = []
    for entry, coef in slots["outer"]:
        if entry.kind == "sum":
            reductions.append((entry.row, entry.ref, coef))
        elif entry.kind == "grad":
            reductions.append((entry.row, GRADIENT, coef))
        elif entry.kind == "row" and entry.ref in p.outer_set:
            # a row an earlier phase of the run sets as an outer row: read once it is set
            late = TailEntry(entry.row, "row", entry.ref, coef.slot)
            p.late.setdefault(entry.row, []).append(late)
        elif entry.kind == "row":
            p.outer_singles.append(OuterSingle(entry.row, entry.ref, coef.slot))

    if lf.takes_gradients:
        # not a read for the NaN/Inf bookkeeping: a gradient need not carry a NaN or Inf
        # of its point on (a logistic loss saturates), so a point that nothing else reads
        # is still checked when it is dropped
        p.steps.append(Gradient(p.cur.get(model_block)))
    for row, source, coef in reductions:
        if source == GRADIENT:  # the gradients summed (before a target may reuse them)
            p.steps.append(Reduce(row, GRADIENT, coef))
            continue
        src = p.cur.get(source)
        if src is None:
            continue
        p.reduced.add((src, p.version.get(src, 0)))
        p.read(src)
        p.steps.append(Reduce(row, src, coef))

    # In place: a target with a term from itself. It goes after every other in-place
    # target that reads its old value; out-of-place targets go first (they read the old
    # values and write spare buffers). A cycle sends one target out of place.
    inplace = {
        t
        for t, ex in exprs.items()
        if sum(k == "block" and ref == t for k, ref, _ in ex) == 1 and p.cur.get(t) is not None
    }
    order: list[str] = []
    pending = set(inplace)
    while pending:
        ready = sorted(t for t in pending if not any(_reads(exprs[u], t) for u in pending - {t}))
        if not ready:
            t = min(pending)
            pending.discard(t)
            inplace.discard(t)
            continue
        order += ready
        pending.difference_update(ready)
    grad_uses = sum(1 for ex in exprs.values() for k, _, _ in ex if k == "grad")
    summed = any(source == GRADIENT for _, source, _ in reductions)
    new = {}
    for target in [t for t in exprs if t not in inplace] + order:
        ex = exprs[target]
        new[target] = value = _target(p, target, ex, target in inplace, grad_uses)
        if summed and value is not None and len(ex) == 1 and ex[0][0] == "grad":
            if ex[0][2].kind == "one":
                # a copy of the gradients this phase summed into an outer row: that row
                # shows their NaN or Inf (as for a buffer summed once computed)
                p.reduced.add((value, p.version.get(value, 0)))
    for target, value in new.items():
        # A value replaced before anything read it would take a NaN or Inf with it: check
        # it here, as the sparse path checks every phase's output.
        old = p.cur.get(target)
        if old is not None and old != value and old in p.unread:
            p.check(old)
    p.cur.update(new)


def _guarded(p: _Planner, lf: LocalForm, base: int, model_block: str, level: int) -> None:
    """Plan one phase limited to a prefix of the run's nodes (a :class:`Guard` region):
    the phase, then each block it moved to another buffer copied back, so that after the
    region every block is where it was. Outer sums made inside the region exempt no value
    from its final check (a node outside the prefix did not make them)."""
    for target in lf.targets:  # zero (known, or set by a phase before): made a buffer
        _zeros_buffer(p, target)
    before = dict(p.cur)
    reduced = set(p.reduced)
    p.steps.append(Guard(level))
    p.guarded = True
    _phase(p, lf, base, model_block)
    p.guarded = False
    for block, value in list(p.cur.items()):
        old = before.get(block)
        if value == old:
            continue
        assert old is not None  # every target holds a buffer before the region
        if value is None:  # the phase zeroed the block at the prefix
            p.steps.append(Zero(old))
        else:
            p.read(value)
            p.steps.append(Copy(old, value))
        p.wrote(old)
        p.cur[block] = old
    p.steps.append(EndGuard())
    p.reduced = reduced


def _zeros_buffer(p: _Planner, block: str) -> Buffer:
    """The buffer holding ``block``: one of zeros where the run knows it is zero."""
    found = p.cur.get(block)
    if found is None:
        found = p.spare(block)
        p.steps.append(Zero(found))
        p.wrote(found)
        p.read(found)  # zeros: nothing to check
        p.cur[block] = found
    return found


def _kernels(p: _Planner, entries: list) -> None:
    """Plan a phase of one element-wise kernel: the target's new rows from its source's
    current buffer (in place when the target is the source)."""
    ((term, coefs),) = entries  # a row map has one target
    # a source zeroed by a phase before: the kernel reads it as it is
    source = _zeros_buffer(p, term.source)
    more = tuple(_zeros_buffer(p, b) for b in term.more)
    read = (source, p.version.get(source, 0))
    faithful = KERNELS[term.kernel].faithful  # (None for several sources: checks kept)
    in_place = term.target == term.source and term.target not in term.more
    if faithful is None:
        # a projection maps an infinite entry to a bound: its read carries nothing on, so
        # a value it replaces is checked first, and one it leaves stays to be checked
        if in_place and source in p.unread:
            p.check(source)
    elif in_place:
        p.read(source)  # a NaN or Inf stays one, whatever the scalars
    else:  # the output stands for the source: not a read that carries its NaN on
        p.unread.discard(source)
    out = source if in_place else p.spare(term.target)
    p.steps.append(Kernel(out, source, term.kernel, coefs, more))
    p.wrote(out)
    if faithful is not None and not in_place:
        bounds = tuple(zip(coefs, faithful, strict=True))
        p.mirrors[out, p.version[out]] = (read, bounds)
    old = p.cur.get(term.target)
    if old is not None and old != out and old in p.unread:
        p.check(old)
    p.cur[term.target] = out


def _target(p: _Planner, target: str, ex: list, in_place: bool, grad_uses: int):
    """Plan the new rows of one target block; returns the buffer holding them."""
    if in_place:
        out = p.cur[target]
        assert out is not None  # a block updated in place holds a buffer
        p.read(out)
        own = next(e for e in ex if e[0] == "block" and e[1] == target)
        coef = own[2]
        if coef.kind == "minus_one":
            p.steps.append(Negate(out))
        elif coef.kind != "one":
            p.steps.append(Scale(out, coef))
        ex = [e for e in ex if e is not own]
        first = False
    else:
        out = p.spare(target)
        first = True
    src: Operand | None
    for k, ref, coef in ex:
        if k == "block":
            src = p.cur.get(ref)
            p.read(src)
            if src is None:
                continue
        elif k == "row":
            src = Single(ref)
        else:
            src = GRADIENT
        if first:
            p.steps.append(Copy(out, src) if coef.kind == "one" else Multiply(out, src, coef))
            first = False
        elif coef.kind == "one":
            p.steps.append(Add(out, src))
        elif coef.kind == "minus_one":
            p.steps.append(Subtract(out, src))
        else:
            scratch = GRADIENT if k == "grad" and grad_uses == 1 else SCRATCH
            p.steps.append(AddScaled(out, src, coef, scratch))
    if first:
        return None
    p.wrote(out)
    return out


def _reads(exprs: list, block: str) -> bool:
    return any(k == "block" and ref == block for k, ref, _ in exprs)


__all__ = [
    "GRADIENT",
    "SCRATCH",
    "Add",
    "AddScaled",
    "Buffer",
    "Check",
    "Coef",
    "Copy",
    "EndGuard",
    "Gather",
    "Gradient",
    "Guard",
    "Kernel",
    "Multiply",
    "Negate",
    "OuterSingle",
    "Reduce",
    "Scale",
    "Schedule",
    "Single",
    "Store",
    "Subtract",
    "TailEntry",
    "Zero",
    "numbered",
    "plan_schedule",
]

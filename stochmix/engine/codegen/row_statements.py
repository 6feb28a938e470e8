"""A schedule's steps lowered to loops over one row, for the row-wise (Numba) programs.

The row-wise loop (:class:`~stochmix.engine.codegen.rowwise.RowwiseProgram`) applies a run to one
node at a time, on rows of d entries. At small d a statement costs what its loop costs
(the compiler's alias checks, a vector body and a scalar tail) far more than its
arithmetic, and each loop reads back what the one before it stored. So the schedule's
steps are lowered before they are written, in ways that change no entry's arithmetic
(every operation is the same, in the same order, rounded the same way; the numbers are bit
for bit those of one loop per step, in float64 and float32):

* **gradients where they are kept**: a gradient that a later step copies into a block's
  buffer (FOCUS keeps each new gradient) is written straight into that buffer, and the
  steps until the next gradient read it there;
* **copies forwarded**: a buffer that is a copy of a row (a snapshot of a single row, the
  node's gathered state row, another buffer, the gradients) is not written: the steps read
  the row itself, until the row or the buffer is rewritten (the copy is then made, before
  that write);
* **element-wise steps fused**: consecutive steps that each rewrite the same buffer from
  others become one loop whose expression applies them in order; a step's result that a
  float64 coefficient entered is rounded to the state's dtype (:attr:`Names.rounded`)
  before the next step uses it, as storing it would have (a no-op in float64);
* **a sum from its expression**: a buffer summed into an outer row right after it is
  computed, and never read again, is summed from that expression without being written;
* **rows left alone**: a store that would put a gathered row back unchanged is not made,
  and the final NaN/Inf checks (and any checks in a row) share one loop.

:func:`lower` does this and returns statements (:class:`Loop`, :class:`Call`,
:class:`Sum`, :class:`Finite`, :class:`Put`) that name rows and entries as code; the
program writes each as one line or one loop over ``j``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

from ..model.kernels import KERNELS
from ..plan.schedule import (
    GRADIENT,
    Add,
    AddScaled,
    Buffer,
    Check,
    Copy,
    EndGuard,
    Gather,
    Gradient,
    Guard,
    Kernel,
    Multiply,
    Negate,
    Reduce,
    Scale,
    Single,
    Store,
    Subtract,
    Zero,
)


class Row(NamedTuple):
    """A row operand as code: ``row`` names it as a 1-d array, ``entry`` its j-th entry."""

    row: str
    entry: str


class Loop(NamedTuple):
    """``for j: out.entry = value``."""

    out: Row
    value: str


class Call(NamedTuple):
    """``grad(data, client, point, out)``: the node's gradient at ``point`` into ``out``."""

    point: Row
    out: Row


class Sum(NamedTuple):
    """``for j: A[index, j] += value``: a node's share of outer row number ``index``."""

    index: int  # type: ignore[assignment]  # (shadows tuple.index, which no one calls here)
    value: str


class Finite(NamedTuple):
    """``for j: bad |= (some entry is NaN or Inf)`` over ``entries``."""

    entries: tuple[str, ...]


class Put(NamedTuple):
    """``for j: z[node's row of block slot, j] = value``: a store."""

    slot: int
    value: str


Statement = Loop | Call | Sum | Finite | Put | Guard | EndGuard


@dataclass(frozen=True)
class Names:
    """How the program names things in code.

    Attributes:
        buffer: a chunk buffer's row.
        single: the snapshot of a single row of the state (by its row number).
        gathered: the node's row of the block in a slot, as gathered from the state.
        gradient: the gradient scratch row.
        origin: a row of zeros (the point of a gradient taken at zero).
        coef: the code of a coefficient, by its kind and slot.
        outer: the place of an outer row among the program's sums.
        rounded: an expression rounded as storing it in the state would round it.
            Coefficients are float64 and the state may be float32: one loop per step
            rounds every step's result when it stores it, so a fused loop rounds a step's
            result that a coefficient entered before the next step uses it.
    """

    buffer: Callable[[Buffer], Row]
    single: Callable[[int], Row]
    gathered: Callable[[int], Row]
    gradient: Row
    origin: Row
    coef: Callable[[str, int], str]
    outer: Callable[[int], int]
    rounded: Callable[[str], str]


def kept_gradients(steps: tuple) -> dict[int, Buffer]:
    """Gradients to write straight into a buffer: step number -> the buffer.

    The gradient at step ``i`` goes into ``X`` when a later ``Copy(X, GRADIENT)`` comes
    before the next gradient, nothing in between reads or writes ``X``, nothing after the
    copy and before the next gradient writes ``X``, and ``X`` is not the gradient's point
    (a kernel may read its point after it starts writing)."""
    kept = {}
    gradients = [i for i, s in enumerate(steps) if isinstance(s, Gradient)]
    for n, i in enumerate(gradients):
        end = gradients[n + 1] if n + 1 < len(gradients) else len(steps)
        for c in range(i + 1, end):
            step = steps[c]
            if not (isinstance(step, Copy) and step.source == GRADIENT):
                continue
            x = step.out
            between = steps[i + 1 : c]
            if any(isinstance(s, Guard | EndGuard) for s in between):
                break  # (a guard's region is lowered on its own)
            after = steps[c + 1 : end]
            if (
                x != steps[i].point
                and not any(x in _reads(s) or x in _writes(s) for s in between)
                and not any(x in _writes(s) for s in after)
            ):
                kept[i] = x
            break  # only the first copy of a gradient can take its place
    return kept


def _live_after(steps: tuple, stores: tuple, checks: tuple) -> list[set]:
    """For each step, the buffers that a later step, a store or a check reads before
    anything rewrites them whole."""
    live = {s.value for s in stores if s.value is not None} | set(checks)
    after: list[set] = [set()] * len(steps)
    for i in range(len(steps) - 1, -1, -1):
        after[i] = set(live)
        step = steps[i]
        if isinstance(step, Gather | Copy | Multiply | Zero) or (
            isinstance(step, Kernel) and step.out != step.source
        ):
            live.discard(step.out)
        live.update(b for b in _reads(step) if isinstance(b, Buffer))
    return after


def _reads(step) -> tuple:
    if isinstance(step, Gradient):
        return (step.point,)
    if isinstance(step, Reduce):
        return (step.source,)
    if isinstance(step, Check):
        return (step.value,)
    if isinstance(step, Kernel):
        return (step.source, *step.more)
    if isinstance(step, Copy | Multiply):
        return (step.source,)
    if isinstance(step, Add | Subtract | AddScaled):
        return (step.out, step.source)
    if isinstance(step, Negate | Scale):
        return (step.out,)
    return ()


def _writes(step) -> tuple:
    if isinstance(
        step, Gather | Copy | Multiply | Add | Subtract | AddScaled | Negate | Scale | Kernel | Zero
    ):
        return (step.out,)
    return ()


class _Lowering:
    """The buffers' copies and the pending fused loop while the steps are lowered."""

    def __init__(self, names: Names, plain: bool):
        self.names = names
        self.plain = plain  # one loop per step: nothing forwarded or fused
        self.out: list[Statement] = []
        self.copies: dict[Buffer, Row] = {}  # buffer -> the row it is a copy of
        self.gradient = names.gradient  # where the current gradients are
        # a fused loop not yet written: (buffer, expression, whether a coefficient entered
        # the expression since it was last rounded)
        self.pending: tuple[Buffer, str, bool] | None = None

    # ------------------------------------------------------------------ reading
    def read(self, operand) -> Row:
        if isinstance(operand, Single):
            return self.names.single(operand.row)
        if operand == GRADIENT:
            return self.gradient
        if self.pending is not None and operand == self.pending[0]:
            self.flush()
        return self.copies.get(operand) or self.names.buffer(operand)

    def read_source(self, step: Gather | Copy) -> str:
        if isinstance(step, Gather):
            return self.names.gathered(step.block).entry
        return self.read(step.source).entry

    # ------------------------------------------------------------------ writing
    def flush(self) -> None:
        if self.pending is not None:
            buffer, value, _ = self.pending
            self.pending = None
            self.out.append(Loop(self.names.buffer(buffer), value))

    def overwrite(self, row: Row) -> None:
        """``row`` is about to be rewritten: make the copies of it that others stand for."""
        for buffer, source in list(self.copies.items()):
            if source == row:
                del self.copies[buffer]
                self.out.append(Loop(self.names.buffer(buffer), source.entry))

    def define(self, buffer: Buffer) -> None:
        """``buffer`` gets a new value (its own copy, if any, is dropped)."""
        self.overwrite(self.names.buffer(buffer))
        self.copies.pop(buffer, None)

    def update(self, buffer: Buffer, rewrite: Callable[[str], str], widens: bool) -> None:
        """``buffer <- rewrite(its value)``, fused with the pending loop when that one
        rewrites ``buffer`` too; ``widens``: whether the rewrite brings a coefficient in."""
        if self.pending is not None and self.pending[0] == buffer:
            _, value, wide = self.pending
            value = self.names.rounded(value) if wide else value
            self.pending = (buffer, rewrite(value), widens)
            return
        self.flush()
        old = self.read(buffer).entry
        self.define(buffer)
        self.pending = (buffer, rewrite(old), widens)
        if self.plain:
            self.flush()

    def assign(self, buffer: Buffer, value: Callable[[], str]) -> None:
        """``buffer <- value()`` (value read after the pending loop is written)."""
        self.flush()
        expression = value()
        self.define(buffer)
        self.pending = (buffer, expression, True)  # (only Multiply assigns: a coefficient)
        if self.plain:
            self.flush()

    def barrier(self) -> None:
        """Where a guarded region opens or closes: the pending loop written and every
        forwarded copy made, so that each buffer holds its value whether the region runs
        at a node or not."""
        self.flush()
        for buffer, source in list(self.copies.items()):
            self.out.append(Loop(self.names.buffer(buffer), source.entry))
        self.copies.clear()
        self.gradient = self.names.gradient

    # ------------------------------------------------------------------ the steps
    def step(self, step, kept: Buffer | None, live: bool) -> None:
        """Lower one step; ``kept``: the buffer a gradient goes into (else the scratch),
        ``live``: whether a later step, store or check reads what this step reads."""
        names = self.names
        if isinstance(step, Guard | EndGuard):
            self.barrier()
            self.out.append(step)
            return
        if self.plain and isinstance(step, Gather | Copy):
            self.flush()
            self.out.append(Loop(names.buffer(step.out), self.read_source(step)))
            return
        if isinstance(step, Gather):
            self.flush()
            self.define(step.out)
            self.copies[step.out] = names.gathered(step.block)
        elif isinstance(step, Gradient):
            self.flush()
            if kept is not None:
                self.define(kept)
                target = names.buffer(kept)
            else:
                target = names.gradient
                self.overwrite(target)
            point = self.read(step.point) if step.point is not None else names.origin
            self.out.append(Call(point, target))
            self.gradient = target
        elif isinstance(step, Copy):
            if step.source == GRADIENT and self.gradient == names.buffer(step.out):
                return  # the gradient was written here (kept_gradients)
            self.flush()
            source = self.read(step.source)
            self.define(step.out)
            if source != names.buffer(step.out):
                self.copies[step.out] = source
        elif isinstance(step, Reduce):
            if self.pending is not None and self.pending[0] == step.source and not live:
                # summed where it is computed: never stored
                _, value, wide = self.pending
                value = self.names.rounded(value) if wide else f"({value})"
                self.pending = None
            else:
                value = self.read(step.source).entry
                self.flush()
            if step.coef.kind != "one":
                value = f"{self._coef(step.coef)} * {value}"
            self.out.append(Sum(names.outer(step.row), value))
        elif isinstance(step, Check):
            self.flush()
            self._finite(self.read(step.value).entry)
        elif isinstance(step, Zero):
            self.flush()
            self.define(step.out)
            self.out.append(Loop(names.buffer(step.out), "0.0"))
        elif isinstance(step, Multiply):
            coef = self._coef(step.coef)
            self.assign(step.out, lambda: f"{self.read(step.source).entry} * {coef}")
        elif isinstance(step, Negate):
            self.update(step.out, lambda v: f"-({v})", False)
        elif isinstance(step, Scale):
            coef = self._coef(step.coef)
            self.update(step.out, lambda v: f"({v}) * {coef}", True)
        elif isinstance(step, Add | Subtract | AddScaled):
            entry = self.read(step.source).entry
            if isinstance(step, Add):
                term = f" + {entry}"
            elif isinstance(step, Subtract):
                term = f" - {entry}"
            else:
                term = f" + {entry} * {self._coef(step.coef)}"
            self.update(step.out, lambda v: f"{v}{term}", isinstance(step, AddScaled))
        elif isinstance(step, Kernel):
            helper = KERNELS[step.kernel].numba
            scalars = ", ".join(self._coef(c) for c in step.coefs)
            more = "".join(f"{self.read(b).entry}, " for b in step.more)
            if step.out == step.source:
                self.update(step.out, lambda v: f"{helper}({v}, {more}{scalars})", True)
            else:
                self.assign(
                    step.out,
                    lambda: f"{helper}({self.read(step.source).entry}, {more}{scalars})",
                )
        else:  # pragma: no cover - a step type without a statement is a bug
            raise TypeError(f"no statement for schedule step {step!r}")

    def _coef(self, coef) -> str:
        return self.names.coef(coef.kind, coef.slot)

    def _finite(self, entry: str) -> None:
        if self.out and isinstance(self.out[-1], Finite):
            self.out[-1] = Finite((*self.out[-1].entries, entry))
        else:
            self.out.append(Finite((entry,)))

    # ------------------------------------------------------------------ the end
    def finish(self, stores: tuple[Store, ...], checks: tuple[Buffer, ...]) -> None:
        """The stores (a row put back unchanged is left alone), then the final checks."""
        self.flush()
        gathered = self.names.gathered
        rewritten = [  # in the stores' order: the generated text must not vary
            gathered(s.block)
            for s in stores
            if s.value is None or self.read(s.value) != gathered(s.block)
        ]
        for row in rewritten:  # copies of a state row that a store rewrites are made first
            self.overwrite(row)
        for store in stores:
            if store.value is None:
                self.out.append(Put(store.block, "0.0"))
            elif gathered(store.block) in rewritten:
                self.out.append(Put(store.block, self.read(store.value).entry))
        entries = tuple(self.read(value).entry for value in checks)
        if entries:
            self.out.append(Finite(entries))


def lower(
    steps: tuple,
    stores: tuple[Store, ...],
    checks: tuple[Buffer, ...],
    names: Names,
    plain: bool = False,
) -> list[Statement]:
    """The statements of a run's steps, stores and checks (see the module docstring).

    ``plain``: one loop per step instead, each step written as it is (what the lowering is
    tested against, bit for bit; checks in a row still share one loop)."""
    lowering = _Lowering(names, plain)
    kept = {} if plain else kept_gradients(steps)
    live = _live_after(steps, stores, checks)
    for i, step in enumerate(steps):
        lowering.step(step, kept.get(i), plain or any(b in live[i] for b in _reads(step)))
    lowering.finish(stores, checks)
    return lowering.out


__all__ = ["Call", "Finite", "Loop", "Names", "Put", "Row", "Statement", "Sum", "lower"]

"""The typed steps of a schedule (see :mod:`stochmix.engine.plan.schedule`): what the
generated code does to a chunk's buffers, one record per statement, and the records of
what happens around the chunks (stores, outer rows, the tail). Pure data: no code, no
arrays."""

from __future__ import annotations

from typing import NamedTuple

GRADIENT = "g"  #: the buffer holding the current gradients of the chunk's clients
SCRATCH = "tmp"  #: a temporary buffer of the chunk's shape


class Buffer(str):
    """A chunk buffer, named ``b{slot}_{k}`` in generated code: the ``k``-th (0 or 1)
    buffer of the block in slot ``slot``. It *is* its name (a ``str``), so emitters write
    it into code as it is."""

    slot: int
    k: int

    def __new__(cls, slot: int, k: int) -> Buffer:
        buffer = super().__new__(cls, f"b{slot}_{k}")
        buffer.slot, buffer.k = slot, k
        return buffer

    def __reduce__(self):
        return Buffer, (self.slot, self.k)


class Single(NamedTuple):
    """Row ``row`` of the state, as it was when the run started (a snapshot)."""

    row: int


class Coef(NamedTuple):
    """Coefficient number ``slot`` of the run's values, multiplying as ``kind``."""

    slot: int
    kind: str


Operand = Buffer | Single | str  # str: GRADIENT or SCRATCH


# ---------------------------------------------------------------------- the steps
class Gather(NamedTuple):
    """``out <- the chunk's rows of the block in slot `block```."""

    out: Buffer
    block: int


class Gradient(NamedTuple):
    """``GRADIENT <- the chunk's clients' gradients at `point``` (None: at zero)."""

    point: Buffer | None


class Reduce(NamedTuple):
    """``outer row `row` += sum over the chunk's nodes of coef * source`` (a buffer, or
    :data:`GRADIENT`: the chunk's gradients)."""

    row: int
    source: Buffer | str
    coef: Coef


class Check(NamedTuple):
    """Every entry of ``value`` must be finite (else the round has diverged). ``unless``:
    ``(Coef, bound)`` pairs; a writer may skip the check when every such coefficient is
    at least its bound (then a NaN or Inf of ``value`` shows in a value checked
    elsewhere: see :func:`~stochmix.engine.plan.schedule.plan_schedule`); empty: never."""

    value: Buffer
    unless: tuple = ()


class Negate(NamedTuple):
    """``out <- -out``."""

    out: Buffer


class Scale(NamedTuple):
    """``out <- coef * out``."""

    out: Buffer
    coef: Coef


class Copy(NamedTuple):
    """``out <- source``."""

    out: Buffer
    source: Operand


class Multiply(NamedTuple):
    """``out <- coef * source``."""

    out: Buffer
    source: Operand
    coef: Coef


class Add(NamedTuple):
    """``out <- out + source``."""

    out: Buffer
    source: Operand


class Subtract(NamedTuple):
    """``out <- out - source``."""

    out: Buffer
    source: Operand


class AddScaled(NamedTuple):
    """``out <- out + coef * source``; ``scratch`` (SCRATCH or GRADIENT, when nothing
    reads the gradients again) may hold the product."""

    out: Buffer
    source: Operand
    coef: Coef
    scratch: str


class Kernel(NamedTuple):
    """``out <- kernel(source, *more)`` entry by entry, ``kernel`` an element-wise row
    kernel of :data:`~stochmix.engine.model.kernels.KERNELS` with its round scalars
    ``coefs`` (a tuple of :class:`Coef`) and the buffers of its further sources ``more``;
    ``out`` may be ``source`` (in place), never one of ``more``."""

    out: Buffer
    source: Buffer
    kernel: str
    coefs: tuple
    more: tuple = ()


class Zero(NamedTuple):
    """``out <- 0`` (a block known to be zero, given a buffer before a :class:`Guard`
    region that writes it: nodes that skip the region keep the zeros)."""

    out: Buffer


class Guard(NamedTuple):
    """The steps up to the matching :class:`EndGuard` run only at the nodes that make a
    repetition number ``level`` (0 the first) of a phase repeated a per-node number of
    times (see :mod:`stochmix.engine.model.trips`): in a run bound by count, the nodes
    whose count exceeds ``level``; bound by prefix, the nodes whose place is below the
    run's extent number ``level``. A guarded region leaves every block in the buffer that
    held it before the region."""

    level: int


class EndGuard(NamedTuple):
    """The end of the region a :class:`Guard` opened."""


Step = (
    Gather
    | Gradient
    | Reduce
    | Check
    | Negate
    | Scale
    | Copy
    | Multiply
    | Add
    | Subtract
    | AddScaled
    | Kernel
    | Zero
    | Guard
    | EndGuard
)


class Store(NamedTuple):
    """After the chunk: the block in slot ``block`` is scattered from ``value`` (None:
    its rows become zero)."""

    block: int
    value: Buffer | None


class OuterSingle(NamedTuple):
    """After every chunk: ``z[row] += coef * (row ref as it was when the run started)``."""

    row: int
    ref: int
    slot: int


class TailEntry(NamedTuple):
    """One term of a tail phase: ``z[row]`` is rewritten as the sum of its entries, each
    ``coef * z[ref]`` (kind "row"), ``z[row]`` itself (kind "keep", no coefficient: slot
    -1) or nothing (kind "zero"); or, alone on its row, ``kernel(z[ref], *(z[m] for m in
    more); coefs[slot], ..., coefs[slot + scalars - 1])`` (kind "kernel": an element-wise
    kernel of :data:`~stochmix.engine.model.kernels.KERNELS`, its further sources' rows and
    its round scalars)."""

    row: int
    kind: str
    ref: int | None
    slot: int
    kernel: str = ""
    scalars: int = 0
    more: tuple = ()


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
    "Operand",
    "OuterSingle",
    "Reduce",
    "Scale",
    "Single",
    "Step",
    "Store",
    "Subtract",
    "TailEntry",
    "Zero",
]

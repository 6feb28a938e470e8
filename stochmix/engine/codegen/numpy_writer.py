"""The NumPy writer: a run's schedule emitted as straight-line NumPy code.

A run of node-local phases is planned once per structure by
:func:`~stochmix.engine.plan.schedule.plan_schedule` (pure data: a
:class:`~stochmix.engine.plan.schedule.Schedule` of steps on dense buffers).
:class:`NumpyWriter` emits that schedule as one Python function, ``chunk``, of plain NumPy
calls on preallocated buffers, one statement per step, its arguments declared once by
:class:`~stochmix.engine.codegen.chunks.ChunkCall`; the chunk runtime
(:mod:`~stochmix.engine.codegen.chunks`) calls it once per chunk of a round's nodes, so a
round pays for its arithmetic and a handful of calls, not for interpreting the phases again.

Other dialects override the statement methods: the Torch program
(:mod:`~stochmix.engine.codegen.torch_program`) and Numba's row-wise loop
(:mod:`~stochmix.engine.codegen.rowwise`).
"""

from __future__ import annotations

import numpy as np

from ..model.kernels import KERNELS
from ..model.picked import is_product, product_index
from ..plan.schedule import (
    Add,
    AddScaled,
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
    Schedule,
    Single,
    Subtract,
    Zero,
)
from .chunks import CHUNK_PARAMETERS

__all__ = ["NumpyWriter", "SourceWriter"]


class SourceWriter:
    """The lines of a generated function being written, and what the emitter learnt on
    the way (which coefficient slots it used as per-node columns or vectors)."""

    def __init__(self, blocks: tuple[str, ...], indent: str = "    "):
        self.lines: list[str] = []
        self.slot = {b: i for i, b in enumerate(blocks)}
        self.columns: set[int] = set()  # coefficient slots used as (c, 1) columns
        self.vectors: set[int] = set()  # coefficient slots used as (c,) vectors
        self.indent = indent

    def emit(self, line: str) -> None:
        self.lines.append(self.indent + line)

    def open(self, line: str) -> None:
        """``line`` (an ``if``), and the lines after it one level in, until :meth:`close`."""
        self.emit(line)
        self.indent += "    "
        self.emit("pass")

    def close(self) -> None:
        self.indent = self.indent[:-4]


class NumpyWriter:
    """How a program writes its code (mixed into
    :class:`~stochmix.engine.codegen.program.LocalProgram`): :meth:`_emit` turns the
    schedule into source, one statement method per step type, and :meth:`_compile` makes
    it a function. See the module docstring."""

    # what the program sets up (see LocalProgram)
    schedule: Schedule
    blocks: list
    gather: list
    written: list

    def _compile(self, source: str):
        namespace = {"np": np, **{f"K_{k}": kernel.numpy for k, kernel in KERNELS.items()}}
        exec(compile(source, f"<stochmix program {id(self):x}>", "exec"), namespace)
        return namespace["chunk"]

    # ------------------------------------------------------------------ emission
    def _writer(self) -> SourceWriter:
        return SourceWriter(self.schedule.blocks)

    def _emit(self, schedule: Schedule) -> str:
        """The schedule's steps as code, one statement each (see the statement methods)."""
        w = self._writer()
        for step in schedule.steps:
            self._statement(w, step)
        return self._finish(w, schedule.stores, schedule.checks)

    def _statement(self, w: SourceWriter, step) -> None:
        if isinstance(step, Guard):
            w.open(f"if on[{step.level}]:")  # the chunk lies inside that prefix
        elif isinstance(step, EndGuard):
            w.close()
        elif isinstance(step, Zero):
            self._zero(w, step.out)
        elif isinstance(step, Gather):
            self._gather(w, step.out, step.block)
        elif isinstance(step, Gradient):
            self._gradient(w, step.point)
        elif isinstance(step, Reduce):
            self._reduce(w, step.row, step.source, step.coef.kind, step.coef.slot)
        elif isinstance(step, Check):
            if step.unless:  # skipped while the kernel's scalars keep NaN and Inf in view
                held = " and ".join(f"co[{c.slot}] >= {bound!r}" for c, bound in step.unless)
                w.open(f"if not ({held}):")
                self._check(w, step.value)
                w.close()
            else:
                self._check(w, step.value)
        elif isinstance(step, Negate):
            self._negate(w, step.out)
        elif isinstance(step, Scale):
            self._scale(w, step.out, self._coef(w, step.coef.kind, step.coef.slot))
        elif isinstance(step, Copy):
            self._copy(w, step.out, self._operand(step.source))
        elif isinstance(step, Multiply):
            coef = self._coef(w, step.coef.kind, step.coef.slot)
            self._multiply(w, step.out, self._operand(step.source), coef)
        elif isinstance(step, Add):
            self._add(w, step.out, self._operand(step.source))
        elif isinstance(step, Subtract):
            self._subtract(w, step.out, self._operand(step.source))
        elif isinstance(step, AddScaled):
            coef = self._coef(w, step.coef.kind, step.coef.slot)
            self._add_scaled(w, step.out, self._operand(step.source), coef, step.scratch)
        elif isinstance(step, Kernel):
            coefs = [self._coef(w, c.kind, c.slot) for c in step.coefs]
            sources = [step.source, *step.more]
            self._kernel(w, step.out, sources, step.kernel, coefs)
        else:  # pragma: no cover - a step type without a statement is a bug
            raise TypeError(f"no statement for schedule step {step!r}")

    def _operand(self, operand) -> str:
        return self._single(operand.row) if isinstance(operand, Single) else str(operand)

    # ------------------------------------------------------------------ NumPy statements
    # The dialect of the generated code: :class:`~stochmix.engine.codegen.rowwise.RowwiseProgram`
    # overrides these to write loops over one row instead.
    def _finish(self, w: SourceWriter, stores: tuple, checks: tuple) -> str:
        """Scatter the written blocks, check them, and put the function together.

        Rows go back through ``Z``/``V``: views of the state and buffers with one opaque
        element per row when the state is contiguous (a row-wise copy NumPy does about 3x
        faster than a fancy-indexed 2-d assignment of short rows)."""
        for slot, buffer in stores:
            if buffer is None:
                w.emit(f"Z[r{slot}] = zeros")
            else:
                w.emit(f"Z[r{slot}] = V[{2 * buffer.slot + buffer.k}][:c]")
        if checks:
            total = " + ".join(f"{v}.sum(dtype=np.float64)" for v in checks)
            w.emit(f"return finite and bool(np.isfinite({total}))")
        else:
            w.emit("return finite")
        head = self._chunk_head(w, CHUNK_PARAMETERS)
        head += ["    finite = True", "    zeros = zeros_full[:c]"]
        return "\n".join(head + w.lines) + "\n"

    def _chunk_head(self, w: SourceWriter, parameters: tuple[str, ...]) -> list[str]:
        """The first lines of a chunk function taking ``parameters``: the chunk's views
        of the buffers (``b{i}_0``, ``b{i}_1``), of its nodes' rows per block (``r{i}``),
        of the scratch and ones vectors, and of the per-node coefficients (``a{slot}``
        as columns, ``v{slot}`` as vectors)."""
        head = [f"def chunk({', '.join(parameters)}):"]
        for b in self.blocks:
            i = w.slot[b]
            head.append(f"    b{i}_0 = B[{2 * i}][:c]")
            head.append(f"    b{i}_1 = B[{2 * i + 1}][:c]")
            if b in self.gather or b in self.written:
                head.append(f"    r{i} = rows[{i}][lo:hi]")
        head.append("    tmp = tmp_full[:c]")
        head.append("    ones = ones_full[:c]")
        for slot in sorted(w.columns):
            head.append(f"    a{slot} = co[{slot}][lo:hi, None]")
        for slot in sorted(w.vectors):
            head.append(f"    v{slot} = co[{slot}][lo:hi]")
        return head

    def _gather(self, w: SourceWriter, var: str, slot: int) -> None:
        w.emit(f"np.take({self._gathered_from(slot)}, r{slot}, axis=0, out={var}, mode='clip')")

    def _gathered_from(self, slot: int) -> str:
        """The array the rows of slot ``slot`` are read from: the state, or for a mixing
        product (``@k``) its array ``P[k]``, one row per node of the run."""
        name = self.blocks[slot]
        return f"P[{product_index(name)}]" if is_product(name) else "z"

    def _gradient(self, w: SourceWriter, x: str | None) -> None:
        w.emit(f"g = grad_fn({x if x is not None else 'np.zeros_like(tmp)'})")

    def _reduce(self, w: SourceWriter, row: int, src: str, kind: str, slot: int) -> None:
        """``acc[row] += coef * (column sums of src)``."""
        if kind == "array":
            w.vectors.add(slot)
            w.emit(f"acc[{row}] += v{slot} @ {src}")
        elif kind == "one":
            w.emit(f"acc[{row}] += (ones @ {src})")
        else:
            w.emit(f"acc[{row}] += co[{slot}] * (ones @ {src})")

    def _check(self, w: SourceWriter, var: str) -> None:
        # summed in float64: float32 entries far from overflowing cannot overflow the sum
        w.emit(f"finite = finite and bool(np.isfinite({var}.sum(dtype=np.float64)))")

    def _single(self, row: int) -> str:
        return f"snap[{row}]"

    def _coef(self, w: SourceWriter, kind: str, slot: int) -> str:
        if kind == "array":
            w.columns.add(slot)
            return f"a{slot}"
        return f"co[{slot}]"

    def _zero(self, w: SourceWriter, out: str) -> None:
        w.emit(f"{out}.fill(0.0)")

    def _negate(self, w: SourceWriter, out: str) -> None:
        w.emit(f"np.negative({out}, out={out})")

    def _scale(self, w: SourceWriter, out: str, c: str) -> None:
        w.emit(f"{out} *= {c}")

    def _copy(self, w: SourceWriter, out: str, src: str) -> None:
        w.emit(f"np.copyto({out}, {src})")

    def _multiply(self, w: SourceWriter, out: str, src: str, c: str) -> None:
        w.emit(f"np.multiply({src}, {c}, out={out})")

    def _add(self, w: SourceWriter, out: str, src: str) -> None:
        w.emit(f"np.add({out}, {src}, out={out})")

    def _subtract(self, w: SourceWriter, out: str, src: str) -> None:
        w.emit(f"np.subtract({out}, {src}, out={out})")

    def _add_scaled(self, w: SourceWriter, out: str, src: str, c: str, scratch: str) -> None:
        """``out += c * src`` through ``scratch`` (which may be ``src`` itself)."""
        w.emit(f"np.multiply({src}, {c}, out={scratch})")
        w.emit(f"np.add({out}, {scratch}, out={out})")

    def _kernel(self, w: SourceWriter, out: str, sources: list, name: str, coefs: list) -> None:
        """``out <- kernel(*sources)`` (an element-wise row kernel; ``tmp`` its scratch)."""
        w.emit(f"K_{name}({', '.join(map(str, [*sources, *coefs]))}, out={out}, tmp=tmp)")

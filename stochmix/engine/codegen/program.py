"""Runs of node-local phases compiled to straight-line NumPy code.

A run of node-local phases (see :class:`~stochmix.engine.model.phase.LocalForm`) is applied to
the participants chunk by chunk: gather the chunk's rows of the blocks the run reads, apply
every phase to those dense buffers, scatter the rewritten rows back. What happens to which
buffer is planned once per structure by :func:`~stochmix.engine.plan.schedule.plan_schedule`
(pure data: a :class:`~stochmix.engine.plan.schedule.Schedule`); :class:`LocalProgram` *emits*
that schedule as one Python function of plain NumPy calls on preallocated buffers (its
arguments declared once, by :class:`ChunkCall`), so a round pays for its arithmetic and a
handful of calls, not for interpreting the phases again.

Outer rows are set when every chunk is done, from their sums and from a snapshot of the
single rows the run reads (taken at its start); then the run's tail (single rows from
single rows, such as a server step) is applied. Written rows are checked for NaN and Inf
as the schedule says.

Large rounds split their chunks over two threads (NumPy releases the GIL inside its
loops); each thread sums its own outer rows and the sums are added in a fixed order.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, fields
from functools import partial

import numpy as np

from ..model.phase import LocalForm
from ..plan.schedule import (
    Add,
    AddScaled,
    Check,
    Copy,
    Gather,
    Gradient,
    Multiply,
    Negate,
    Reduce,
    Scale,
    Schedule,
    Single,
    Subtract,
    plan_schedule,
)

__all__ = [
    "BUFFER_BYTES",
    "CHUNK_PARAMETERS",
    "ChunkCall",
    "LocalProgram",
    "MIN_CHUNK_ROWS",
    "PARALLEL_BUFFER_BYTES",
    "PARALLEL_MIN_ROWS",
    "ProgramCache",
    "SourceWriter",
]

MIN_CHUNK_ROWS = 16  # at d = 1000, fewer rows per chunk cost more in call overhead
BUFFER_BYTES = 1 << 20  # a chunk's working set (buffers + gathered data): about L2
# Threads pay off only with long NumPy calls (the GIL is held between them): chunks of
# this working set, at least PARALLEL_MIN_ROWS rows each and two per thread. Measured at
# N = 10^6, d = 10 (FOCUS, 125k participants): 43 ms a round on one thread, 33 on two;
# no gain at d >= 100 or with 1000 participants, where rounds stay on one thread.
PARALLEL_BUFFER_BYTES = 1 << 22
PARALLEL_MIN_ROWS = 1024


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


@dataclass
class ChunkCall:
    """The arguments of a generated NumPy chunk function, in the order it takes them
    (the generated ``def`` line is written from these fields)."""

    z: np.ndarray  #: the state, (m, d)
    Z: np.ndarray  #: the state with one opaque element per row (or ``z`` itself)
    rows: list  #: per block slot, the state rows of the run's nodes, (s,)
    lo: int  #: the chunk is nodes[lo:hi]
    hi: int
    c: int  #: hi - lo
    co: tuple  #: the coefficient values, by slot
    B: list  #: two buffers per block slot, (rows, d) each
    V: list  #: the same buffers with one opaque element per row
    tmp_full: np.ndarray  #: SCRATCH
    ones_full: np.ndarray  #: ones, for sums over the chunk's rows
    zeros_full: np.ndarray  #: zeros (opaque rows), for blocks that become zero
    grad_fn: object  #: x -> the chunk's clients' gradients at x
    snap: dict  #: row -> its snapshot
    acc: dict  #: outer row -> its running sum


CHUNK_PARAMETERS = tuple(f.name for f in fields(ChunkCall))


class LocalProgram:
    """One run structure compiled: call :meth:`run` with the round's nodes and values.

    The run is planned once into a :class:`~stochmix.engine.plan.schedule.Schedule`, which
    this class *emits* as straight-line NumPy code (one statement per step); subclasses
    emit the same schedule in other languages by overriding the statement methods.

    Args:
        forms: the run's local forms, in order.
        model_block: where gradients are taken.
        tail: how many of the last forms only set single rows from single rows.
        zero: blocks whose rows at the run's nodes are zero when it starts (see
            :func:`~stochmix.engine.plan.schedule.plan_schedule`).
        scratch: blocks whose node rows the state does not keep (never stored).
    """

    def __init__(
        self,
        forms: list[LocalForm],
        model_block: str,
        tail: int = 0,
        *,
        zero: frozenset = frozenset(),
        scratch: frozenset = frozenset(),
    ):
        self.model = model_block
        self.forms, self.tail_length = forms, tail  # what a program of another dialect needs
        self.key = None  # what the engine caches the program under (its full structure)
        self.schedule = plan_schedule(forms, model_block, tail, zero, scratch)
        self.zero, self.scratch = self.schedule.zero, self.schedule.scratch
        schedule = self.schedule
        self.blocks = list(schedule.blocks)
        self.gather = list(schedule.gather)
        self.written = list(schedule.written)
        self.singles = list(schedule.singles)
        self.outer_rows = list(schedule.outer_rows)
        self.outer_singles = list(schedule.outer_singles)
        self.tail = [list(entries) for entries in schedule.tail]
        self.needs_gradients = schedule.needs_gradients
        self.source = self._emit(schedule)
        self._function = self._compile(self.source)  # the generated function
        self._buffers: dict = {}

    def _compile(self, source: str):
        namespace = {"np": np}
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
        if isinstance(step, Gather):
            self._gather(w, step.out, step.block)
        elif isinstance(step, Gradient):
            self._gradient(w, step.point)
        elif isinstance(step, Reduce):
            self._reduce(w, step.row, step.source, step.coef.kind, step.coef.slot)
        elif isinstance(step, Check):
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
            total = " + ".join(f"(ones @ {v})" for v in checks)
            w.emit(f"return finite and bool(np.isfinite({total}).all())")
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
        w.emit(f"np.take(z, r{slot}, axis=0, out={var}, mode='clip')")

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
        w.emit(f"finite = finite and bool(np.isfinite(ones @ {var}).all())")

    def _single(self, row: int) -> str:
        return f"snap[{row}]"

    def _coef(self, w: SourceWriter, kind: str, slot: int) -> str:
        if kind == "array":
            w.columns.add(slot)
            return f"a{slot}"
        return f"co[{slot}]"

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

    # ------------------------------------------------------------------ execution
    def _buffer_set(self, rows: int, d: int, dtype, worker: int = 0) -> dict:
        key = (rows, d, np.dtype(dtype), worker)
        bufs = self._buffers.get(key)
        if bufs is None:
            if len(self._buffers) > 16:
                self._buffers.clear()
            blocks = [np.empty((rows, d), dtype) for _ in range(2 * len(self.blocks))]
            zeros = np.zeros((rows, d), dtype)
            row = np.dtype((np.void, d * np.dtype(dtype).itemsize))
            bufs = {
                "blocks": blocks,
                "tmp": np.empty((rows, d), dtype),
                "ones": np.ones(rows, dtype),
                "rows": ([b.view(row)[:, 0] for b in blocks], zeros.view(row)[:, 0]),
                "plain": (blocks, zeros),
                "row": row,
            }
            self._buffers[key] = bufs
        return bufs

    def chunk_rows(self, d: int, itemsize: int, data_per_row: int, budget=None) -> int:
        """Rows per chunk so that buffers, temporaries and gathered data fit in
        ``budget`` bytes (default :data:`BUFFER_BYTES`, about the L2 cache)."""
        per_row = itemsize * (d * (2 * len(self.blocks) + 3) + data_per_row)
        return max(MIN_CHUNK_ROWS, (budget or BUFFER_BYTES) // max(1, per_row))

    def _split(self, size: int, d: int, itemsize: int, data_per_row: int, workers: int, whole):
        """(rows per chunk, threads) for a round of ``size`` nodes."""
        step = self.chunk_rows(d, itemsize, data_per_row)
        if whole:
            step, workers = size, 1
        if workers > 1:
            wide = self.chunk_rows(d, itemsize, data_per_row, PARALLEL_BUFFER_BYTES)
            if wide >= PARALLEL_MIN_ROWS and size >= 2 * workers * wide:
                step = wide
            else:
                workers = 1
        return -(-size // -(-size // step)), workers  # equal chunks, none tiny

    def _task(self, z, rows, starts, step, size, coefs, clients, bind, snapshot, acc, worker):
        """A callable that runs :meth:`_chunks` with these arguments (what a pool's worker
        runs; the row-wise programs build their call's arguments here instead)."""
        return partial(
            self._chunks, z, rows, starts, step, size, coefs, clients, bind, snapshot, acc, worker
        )

    @np.errstate(over="ignore", invalid="ignore")
    def _chunks(self, z, rows, starts, step, size, coefs, clients, bind, snapshot, acc, worker):
        """Run the chunks that begin at ``starts``; False if a written entry is not
        finite. ``worker`` numbers the part (0 on the calling thread)."""
        # buffers per thread: the pool's workers, and runs that users start on threads of
        # their own with the same compiled program, never share them
        # capacity rounded up to a power of two: chunk sizes vary from round to round (equal
        # chunks of each round's size), and a set per exact size would pile up sets
        capacity = 1 << (min(step, size) - 1).bit_length()
        bufs = self._buffer_set(capacity, z.shape[1], z.dtype, threading.get_ident())
        if z.flags.c_contiguous:
            state, (views, zeros) = z.view(bufs["row"])[:, 0], bufs["rows"]
        else:
            state, (views, zeros) = z, bufs["plain"]
        finite = True
        for lo in starts:
            hi = min(int(lo) + step, size)
            lo = int(lo)
            grad_fn = bind(clients[lo:hi], z) if self.needs_gradients else None
            call = ChunkCall(
                z=z,
                Z=state,
                rows=rows,
                lo=lo,
                hi=hi,
                c=hi - lo,
                co=coefs,
                B=bufs["blocks"],
                V=views,
                tmp_full=bufs["tmp"],
                ones_full=bufs["ones"],
                zeros_full=zeros,
                grad_fn=grad_fn,
                snap=snapshot,
                acc=acc,
            )
            ok = self._function(*[getattr(call, name) for name in CHUNK_PARAMETERS])
            finite = finite and ok
        return finite

    @np.errstate(over="ignore", invalid="ignore")
    def run(
        self,
        z,
        nodes,
        layout,
        coefs: tuple,
        clients,
        bind,
        data_per_row: int,
        workers: int = 1,
        whole: bool = False,
    ) -> bool:
        """Apply the run to ``z`` in place for ``nodes`` with the round's coefficient
        values ``coefs`` (in signature order) and gradient ``clients``; ``bind(clients,
        like)`` returns the chunk's gradient function. False if a written entry is not
        finite.

        With ``workers`` > 1 and enough chunks, the chunks are split into that many
        contiguous parts run on threads (NumPy releases the GIL inside its loops); each
        part sums its own outer rows and the parts are added in a fixed order, so results
        do not depend on timing. ``bind`` must then be safe to call from threads.
        ``whole`` runs every node in one chunk on one thread: for gradients that draw
        random numbers, so that they are drawn per phase for all nodes at once, in the
        order the general path draws them.

        It is three parts, each usable alone (the distributed backend runs
        :meth:`accumulate` once per segment of clients and :meth:`finish` once the
        segments' sums are added): :meth:`snapshot`, :meth:`accumulate`, :meth:`finish`.
        """
        snapshot = self.snapshot(z)
        finite, acc = self.accumulate(
            z,
            self.node_rows(nodes, layout),
            nodes.size,
            coefs,
            clients,
            bind,
            data_per_row,
            snapshot,
            workers,
            whole,
        )
        return self.finish(z, acc, snapshot, coefs) and finite

    def snapshot(self, z, at=None) -> dict:
        """The single rows the run reads, as they are now (row -> copy); ``at(row)``
        gives where a row lives in ``z`` (the row itself by default)."""
        if at is None:
            return {r: z[r].copy() for r in self.singles}
        return {r: z[at(r)].copy() for r in self.singles}

    def node_rows(self, nodes, layout) -> list:
        """Per block slot, the rows of ``z`` that hold ``nodes``."""
        rows = []
        for b in self.blocks:
            offset = layout.node_offset(b)
            rows.append(nodes + offset if offset else nodes)
        return rows

    @np.errstate(over="ignore", invalid="ignore")
    def accumulate(
        self,
        z,
        rows: list,
        size: int,
        coefs: tuple,
        clients,
        bind,
        data_per_row: int,
        snapshot: dict,
        workers: int = 1,
        whole: bool = False,
    ) -> tuple[bool, dict]:
        """Run the chunks over ``size`` nodes whose rows per block slot are ``rows`` (see
        :meth:`node_rows`), writing their rows of ``z``; returns (whether every written
        entry is finite, the outer rows' sums over these nodes: row -> vector). Per-node
        coefficient values and ``clients`` are those of these nodes, in their order."""
        d = z.shape[1]
        acc = {r: np.zeros(d, dtype=z.dtype) for r in self.outer_rows}
        finite = True
        if size:
            step, workers = self._split(size, d, z.dtype.itemsize, data_per_row, workers, whole)
            starts = list(range(0, size, step))
            if workers > 1:
                parts = np.array_split(np.asarray(starts), workers)
                jobs = [
                    (part, {r: np.zeros(d, dtype=z.dtype) for r in self.outer_rows}, w)
                    for w, part in enumerate(parts)
                ]
                pool = _pool(workers)
                futures = [
                    pool.submit(
                        self._task(
                            z, rows, part, step, size, coefs, clients, bind, snapshot, part_acc, w
                        )
                    )
                    for part, part_acc, w in jobs
                ]
                for future, (_, part_acc, _) in zip(futures, jobs, strict=True):
                    finite = future.result() and finite
                    for r in acc:
                        acc[r] += part_acc[r]
            else:
                finite = self._chunks(
                    z, rows, starts, step, size, coefs, clients, bind, snapshot, acc, 0
                )
        return finite, acc

    @np.errstate(over="ignore", invalid="ignore")
    def finish(self, z, acc: dict, snapshot: dict, coefs: tuple, at=None) -> bool:
        """Set the outer rows from their sums ``acc`` and the snapshot's single-row terms,
        then apply the tail; False if a written entry is not finite. ``at(row)`` gives
        where a row lives in ``z`` (the row itself by default)."""
        d = z.shape[1]
        at = _same if at is None else at
        finite = True
        if self.outer_rows:
            for r in self.outer_rows:
                z[at(r)] = acc[r]
            for row, ref, slot in self.outer_singles:
                z[at(row)] += coefs[slot] * snapshot[ref]
            finite = bool(np.isfinite(z[[at(r) for r in self.outer_rows]].sum()))
        for entries in self.tail:  # single rows from single rows, all at once
            new = {}
            for row, kind, source, slot in entries:
                if row not in new:
                    new[row] = np.zeros(d, dtype=z.dtype)
                if kind == "row":
                    new[row] += coefs[slot] * z[at(source)]
            for row, value in new.items():
                z[at(row)] = value
                finite = finite and bool(np.isfinite(value).all())
        return finite


def _same(row: int) -> int:
    return row


class ProgramCache(dict):
    """Programs by structure key (at most ``size``; all are dropped when it is full),
    each built once even when runs on several threads ask for it at the same time."""

    _lock = threading.RLock()  # one for every cache: building a program may build another

    def __init__(self, size: int = 64):
        super().__init__()
        self.size = size

    def built(self, key, build):
        """The program under ``key``, built by ``build()`` the first time (its ``key``
        attribute set to ``key``)."""
        found = self.get(key)
        if found is None:
            with self._lock:
                found = self.get(key)
                if found is None:
                    if len(self) >= self.size:
                        self.clear()
                    found = build()
                    found.key = key
                    self[key] = found
        return found


_POOLS: dict = {}


def _pool(workers: int) -> ThreadPoolExecutor:
    """The process's pool of ``workers`` threads (a forked child, whose copy of the
    parent's pool has no threads, gets its own)."""
    key = (workers, os.getpid())
    pool = _POOLS.get(key)
    if pool is None:
        pool = _POOLS[key] = ThreadPoolExecutor(workers, thread_name_prefix="stochmix")
    return pool

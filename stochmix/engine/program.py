"""Runs of node-local phases compiled to straight-line NumPy code.

A run of node-local phases (see :class:`~stochmix.engine.phase.LocalForm`) is applied to
the participants chunk by chunk: gather the chunk's rows of the blocks the run reads, apply
every phase to those dense buffers, scatter the rewritten rows back. Which buffer holds
which block after each phase, which blocks are zero, and which updates can be done in
place are the same in every round: they depend on the run's *structure* (its signature),
not on its nodes or coefficient values. :class:`LocalProgram` works them out once and
writes the chunk's work as one Python function of plain NumPy calls on preallocated
buffers, so a round pays for its arithmetic and a handful of calls, not for interpreting
the phases again.

Per phase, in order: gradients at the current model rows; the sums of outer rows over the
chunk (from the values before the phase); then the new rows of every target block, out of
place into the block's spare buffer, or in place when the target keeps its own value and
no other target still needs the old one. Outer rows are set when every chunk is done, from
their sums and from a snapshot of the single rows the run reads (taken at its start); then
the run's tail (single rows from single rows, such as a server step) is applied. Written
rows are checked for NaN and Inf: each block's final rows (unless an outer row summed
them, which carries a NaN on), and any value a phase drops before anything read it.

Large rounds split their chunks over two threads (NumPy releases the GIL inside its
loops); each thread sums its own outer rows and the sums are added in a fixed order.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .phase import LocalForm, _kind

MIN_CHUNK_ROWS = 16  # at d = 1000, fewer rows per chunk cost more in call overhead
BUFFER_BYTES = 1 << 20  # a chunk's working set (buffers + gathered data): about L2
# Threads pay off only with long NumPy calls (the GIL is held between them): chunks of
# this working set, at least PARALLEL_MIN_ROWS rows each and two per thread. Measured at
# N = 10^6, d = 10 (FOCUS, 125k participants): 43 ms a round on one thread, 33 on two;
# no gain at d >= 100 or with 1000 participants, where rounds stay on one thread.
PARALLEL_BUFFER_BYTES = 1 << 22
PARALLEL_MIN_ROWS = 1024


class _Writer:
    """Source lines of the chunk function, and the static state of the buffers."""

    def __init__(self, blocks: list[str]):
        self.lines: list[str] = []
        self.slot = {b: i for i, b in enumerate(blocks)}
        self.cur: dict[str, str | None] = {}  # block -> variable holding it (None: zero)
        self.columns: set[int] = set()  # coefficient slots used as (c, 1) columns
        self.vectors: set[int] = set()  # coefficient slots used as (c,) vectors
        self.version: dict[str, int] = {}  # times a buffer variable has been written
        self.reduced: set[tuple] = set()  # (variable, version) summed into an outer row
        self.unread: set[str] = set()  # variables written and not read since
        self.indent = "    "

    def wrote(self, var: str) -> None:
        self.version[var] = self.version.get(var, 0) + 1
        self.unread.add(var)

    def read(self, var: str | None) -> None:
        """A later value now depends on ``var`` (NaN and Inf carry over into it)."""
        self.unread.discard(var)

    def emit(self, line: str) -> None:
        self.lines.append(self.indent + line)

    def buffer(self, block: str, k: int) -> str:
        return f"b{self.slot[block]}_{k}"

    def spare(self, block: str) -> str:
        first = self.buffer(block, 0)
        return self.buffer(block, 1) if self.cur.get(block) == first else first


class LocalProgram:
    """One run structure compiled: call :meth:`run` with the round's nodes and values.

    Args:
        forms: the run's local forms, in order.
        model_block: where gradients are taken.
    """

    def __init__(self, forms: list[LocalForm], model_block: str, tail: int = 0):
        self.model = model_block
        self.forms, self.tail_length = forms, tail  # what a program of another dialect needs
        self.key = None  # what the engine caches the program under (its full structure)
        self.tail = []  # (phase's outer entries with coefficient slots), applied at the end
        slot = sum(len(lf.coefficients) for lf in forms[: len(forms) - tail])
        for lf in forms[len(forms) - tail :]:
            entries = []
            for row, kind, ref, _ in lf.outer:
                entries.append((row, kind, ref, slot))
                slot += 1
            self.tail.append(entries)
        forms = forms[: len(forms) - tail]
        blocks: list[str] = []
        gather: list[str] = []
        written: set[str] = set()
        for lf in forms:
            reads = [s for _, s, _ in lf.terms] + [s for _, k, s, _ in lf.outer if k == "sum"]
            if lf.gradients:
                reads.append(model_block)
            for b in reads:
                if b not in written and b not in gather:
                    gather.append(b)
            for b in [*reads, *lf.targets]:
                if b not in blocks:
                    blocks.append(b)
            written.update(lf.targets)
        self.blocks = blocks
        self.gather = gather
        self.written = [b for b in blocks if b in written]
        self.singles = sorted({r for lf in forms for r in lf.single_reads})
        self.outer_rows = sorted({r for lf in forms for r in lf.outer_rows})
        self.outer_singles: list[tuple] = []  # (row, ref, slot): row += co * snapshot[ref]
        self.needs_gradients = any(lf.gradients for lf in forms)
        self.source = self._generate(forms)
        self._function = self._compile(self.source)  # the generated function
        self._buffers: dict = {}

    def _compile(self, source: str):
        namespace = {"np": np}
        exec(compile(source, f"<stochmix program {id(self):x}>", "exec"), namespace)
        return namespace["chunk"]

    # ------------------------------------------------------------------ generation
    def _generate(self, forms: list[LocalForm]) -> str:
        return self._generate_with(_Writer(self.blocks), forms)

    def _generate_with(self, w: _Writer, forms: list[LocalForm]) -> str:
        for b in self.gather:
            var = w.buffer(b, 0)
            self._gather(w, var, w.slot[b])
            w.wrote(var)
            w.read(var)  # the state's own values, checked when they were written
            w.cur[b] = var
        base = 0
        for lf in forms:
            self._phase(w, lf, base)
            base += len(lf.coefficients)
        # Written rows must be finite: each block's final rows unless an outer row has
        # summed them in their final state (NaN and Inf survive a sum).
        stores, check = [], []
        for b in self.written:
            var = w.cur[b]
            stores.append((w.slot[b], var))
            if var is not None and (var, w.version.get(var, 0)) not in w.reduced:
                check.append(var)
        return self._finish(w, stores, check)

    # ------------------------------------------------------------------ NumPy statements
    # The dialect of the generated code: :class:`~stochmix.engine.rowwise.RowwiseProgram`
    # overrides these to write loops over one row instead.
    def _finish(self, w: _Writer, stores: list, check: list) -> str:
        """Scatter the written blocks, check them, and put the function together.

        Rows go back through ``Z``/``V``: views of the state and buffers with one opaque
        element per row when the state is contiguous (a row-wise copy NumPy does about 3x
        faster than a fancy-indexed 2-d assignment of short rows)."""
        for slot, var in stores:
            if var is None:
                w.emit(f"Z[r{slot}] = zeros")
            else:
                i, k = var[1:].split("_")
                w.emit(f"Z[r{slot}] = V[{2 * int(i) + int(k)}][:c]")
        if check:
            checks = " + ".join(f"(ones @ {v})" for v in check)
            w.emit(f"return finite and bool(np.isfinite({checks}).all())")
        else:
            w.emit("return finite")
        head = [
            "def chunk(z, Z, rows, lo, hi, c, co, B, V, tmp_full, ones_full, zeros_full, "
            "grad_fn, snap, acc):"
        ]
        for b in self.blocks:
            i = w.slot[b]
            head.append(f"    b{i}_0 = B[{2 * i}][:c]")
            head.append(f"    b{i}_1 = B[{2 * i + 1}][:c]")
            if b in self.gather or b in self.written:
                head.append(f"    r{i} = rows[{i}][lo:hi]")
        head.append("    tmp = tmp_full[:c]")
        head.append("    ones = ones_full[:c]")
        head.append("    finite = True")
        head.append("    zeros = zeros_full[:c]")
        for slot in sorted(w.columns):
            head.append(f"    a{slot} = co[{slot}][lo:hi, None]")
        for slot in sorted(w.vectors):
            head.append(f"    v{slot} = co[{slot}][lo:hi]")
        return "\n".join(head + w.lines) + "\n"

    def _gather(self, w: _Writer, var: str, slot: int) -> None:
        w.emit(f"np.take(z, r{slot}, axis=0, out={var}, mode='clip')")

    def _gradient(self, w: _Writer, x: str | None) -> None:
        w.emit(f"g = grad_fn({x if x is not None else 'np.zeros_like(tmp)'})")

    def _reduce(self, w: _Writer, row: int, src: str, kind: str, slot: int) -> None:
        """``acc[row] += coef * (column sums of src)``."""
        if kind == "array":
            w.vectors.add(slot)
            w.emit(f"acc[{row}] += v{slot} @ {src}")
        elif kind == "one":
            w.emit(f"acc[{row}] += (ones @ {src})")
        else:
            w.emit(f"acc[{row}] += co[{slot}] * (ones @ {src})")

    def _check(self, w: _Writer, var: str) -> None:
        w.emit(f"finite = finite and bool(np.isfinite(ones @ {var}).all())")

    def _single(self, row: int) -> str:
        return f"snap[{row}]"

    def _coef(self, w: _Writer, kind: str, slot: int) -> str:
        if kind == "array":
            w.columns.add(slot)
            return f"a{slot}"
        return f"co[{slot}]"

    def _negate(self, w: _Writer, out: str) -> None:
        w.emit(f"np.negative({out}, out={out})")

    def _scale(self, w: _Writer, out: str, c: str) -> None:
        w.emit(f"{out} *= {c}")

    def _copy(self, w: _Writer, out: str, src: str) -> None:
        w.emit(f"np.copyto({out}, {src})")

    def _multiply(self, w: _Writer, out: str, src: str, c: str) -> None:
        w.emit(f"np.multiply({src}, {c}, out={out})")

    def _add(self, w: _Writer, out: str, src: str) -> None:
        w.emit(f"np.add({out}, {src}, out={out})")

    def _subtract(self, w: _Writer, out: str, src: str) -> None:
        w.emit(f"np.subtract({out}, {src}, out={out})")

    def _add_scaled(self, w: _Writer, out: str, src: str, c: str, scratch: str) -> None:
        """``out += c * src`` through ``scratch`` (which may be ``src`` itself)."""
        w.emit(f"np.multiply({src}, {c}, out={scratch})")
        w.emit(f"np.add({out}, {scratch}, out={out})")

    # ------------------------------------------------------------------ structure
    def _phase(self, w: _Writer, lf: LocalForm, base: int) -> None:
        slots = iter(range(base, base + len(lf.coefficients)))
        exprs: dict[str, list] = {t: [] for t in lf.targets}
        for target, source, coef in lf.terms:
            exprs[target].append(("block", source, _kind(coef), next(slots)))
        for target, row, coef in lf.external:
            exprs[target].append(("row", row, _kind(coef), next(slots)))
        for target, coef in lf.gradients:
            exprs[target].append(("grad", None, _kind(coef), next(slots)))
        reductions = []
        for row, kind, ref, coef in lf.outer:
            slot = next(slots)
            if kind == "sum":
                reductions.append((row, ref, _kind(coef), slot))
            elif kind == "row":
                self.outer_singles.append((row, ref, slot))

        if lf.gradients:
            # not a read for the NaN/Inf bookkeeping: a gradient need not carry a NaN or
            # Inf of its point on (a logistic loss saturates), so a point that nothing
            # else reads is still checked when it is dropped
            self._gradient(w, w.cur.get(self.model))
        for row, source, kind, slot in reductions:
            src = w.cur.get(source)
            if src is None:
                continue
            w.reduced.add((src, w.version.get(src, 0)))
            w.read(src)
            self._reduce(w, row, src, kind, slot)

        # In place: a target with a term from itself. It goes after every other in-place
        # target that reads its old value; out-of-place targets go first (they read the
        # old values and write spare buffers). A cycle sends one target out of place.
        inplace = {
            t
            for t, ex in exprs.items()
            if sum(k == "block" and ref == t for k, ref, _, _ in ex) == 1
            and w.cur.get(t) is not None
        }
        order: list[str] = []
        pending = set(inplace)
        while pending:
            ready = sorted(
                t for t in pending if not any(_reads(exprs[u], t) for u in pending - {t})
            )
            if not ready:
                t = min(pending)
                pending.discard(t)
                inplace.discard(t)
                continue
            order += ready
            pending.difference_update(ready)
        grad_uses = sum(1 for ex in exprs.values() for k, _, _, _ in ex if k == "grad")
        new = {}
        for target in [t for t in exprs if t not in inplace] + order:
            new[target] = self._target(w, target, exprs[target], target in inplace, grad_uses)
        for target, value in new.items():
            # A value replaced before anything read it would take a NaN or Inf with it:
            # check it here, as the sparse path checks every phase's output.
            old = w.cur.get(target)
            if old is not None and old != value and old in w.unread:
                self._check(w, old)
                w.read(old)
        w.cur.update(new)

    def _target(self, w: _Writer, target: str, ex: list, in_place: bool, grad_uses: int):
        """Emit the new rows of one target block; returns the variable holding them."""
        if in_place:
            out = w.cur[target]
            w.read(out)
            own = next(e for e in ex if e[0] == "block" and e[1] == target)
            kind, slot = own[2], own[3]
            if kind == "minus_one":
                self._negate(w, out)
            elif kind != "one":
                self._scale(w, out, self._coef(w, kind, slot))
            ex = [e for e in ex if e is not own]
            first = False
        else:
            out = w.spare(target)
            first = True
        for k, ref, kind, slot in ex:
            if k == "block":
                src = w.cur.get(ref)
                w.read(src)
                if src is None:
                    continue
            elif k == "row":
                src = self._single(ref)
            else:
                src = "g"
            c = self._coef(w, kind, slot)
            if first:
                if kind == "one":
                    self._copy(w, out, src)
                else:
                    self._multiply(w, out, src, c)
                first = False
            elif kind == "one":
                self._add(w, out, src)
            elif kind == "minus_one":
                self._subtract(w, out, src)
            else:
                scratch = "g" if k == "grad" and grad_uses == 1 else "tmp"
                self._add_scaled(w, out, src, c, scratch)
        if first:
            return None
        w.wrote(out)
        return out

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

    @np.errstate(over="ignore", invalid="ignore")
    def _chunks(self, z, rows, starts, step, size, coefs, clients, bind, snapshot, acc, worker):
        """Run the chunks that begin at ``starts``; False if a written entry is not
        finite. ``worker`` numbers the part (0 on the calling thread)."""
        # buffers per thread: the pool's workers, and runs that users start on threads of
        # their own with the same compiled program, never share them
        bufs = self._buffer_set(min(step, size), z.shape[1], z.dtype, threading.get_ident())
        if z.flags.c_contiguous:
            state, (views, zeros) = z.view(bufs["row"])[:, 0], bufs["rows"]
        else:
            state, (views, zeros) = z, bufs["plain"]
        finite = True
        for lo in starts:
            hi = min(int(lo) + step, size)
            lo = int(lo)
            grad_fn = bind(clients[lo:hi], z) if self.needs_gradients else None
            ok = self._function(
                z,
                state,
                rows,
                lo,
                hi,
                hi - lo,
                coefs,
                bufs["blocks"],
                views,
                bufs["tmp"],
                bufs["ones"],
                zeros,
                grad_fn,
                snapshot,
                acc,
            )
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
        """
        d = z.shape[1]
        snapshot = {r: z[r].copy() for r in self.singles}
        acc = {r: np.zeros(d, dtype=z.dtype) for r in self.outer_rows}
        finite = True
        if nodes.size:
            step, workers = self._split(
                nodes.size, d, z.dtype.itemsize, data_per_row, workers, whole
            )
            starts = list(range(0, nodes.size, step))
            rows = []
            for b in self.blocks:
                offset = layout.start(b) - layout.first_node(b)
                rows.append(nodes + offset if offset else nodes)
            if workers > 1:
                parts = np.array_split(np.asarray(starts), workers)
                jobs = [
                    (part, {r: np.zeros(d, dtype=z.dtype) for r in self.outer_rows}, w)
                    for w, part in enumerate(parts)
                ]
                pool = _pool(workers)
                futures = [
                    pool.submit(
                        self._chunks,
                        z,
                        rows,
                        part,
                        step,
                        nodes.size,
                        coefs,
                        clients,
                        bind,
                        snapshot,
                        part_acc,
                        w,
                    )
                    for part, part_acc, w in jobs
                ]
                for future, (_, part_acc, _) in zip(futures, jobs, strict=True):
                    finite = future.result() and finite
                    for r in acc:
                        acc[r] += part_acc[r]
            else:
                finite = self._chunks(
                    z, rows, starts, step, nodes.size, coefs, clients, bind, snapshot, acc, 0
                )
        if self.outer_rows:
            for r in self.outer_rows:
                z[r] = acc[r]
            for row, ref, slot in self.outer_singles:
                z[row] += coefs[slot] * snapshot[ref]
            finite = finite and bool(np.isfinite(z[self.outer_rows].sum()))
        for entries in self.tail:  # single rows from single rows, all at once
            new = {}
            for row, kind, ref, slot in entries:
                if row not in new:
                    new[row] = np.zeros(d, dtype=z.dtype)
                if kind == "row":
                    new[row] += coefs[slot] * z[ref]
            for row, value in new.items():
                z[row] = value
                finite = finite and bool(np.isfinite(value).all())
        return finite


def _reads(exprs: list, block: str) -> bool:
    return any(k == "block" and ref == block for k, ref, _, _ in exprs)


_POOLS: dict = {}


def _pool(workers: int) -> ThreadPoolExecutor:
    """The process's pool of ``workers`` threads (a forked child, whose copy of the
    parent's pool has no threads, gets its own)."""
    key = (workers, os.getpid())
    pool = _POOLS.get(key)
    if pool is None:
        pool = _POOLS[key] = ThreadPoolExecutor(workers, thread_name_prefix="stochmix")
    return pool

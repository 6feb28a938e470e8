"""Runs of node-local phases compiled with Numba, one node at a time.

:class:`RowwiseProgram` plans a run exactly as
:class:`~stochmix.engine.codegen.program.LocalProgram`
does (which buffer holds which block after each phase, what is done in place, what must be
checked for NaN and Inf) but writes each statement as a loop over one row of length d, and
the whole run as one loop over the nodes: gather a node's rows, apply every phase to them,
add its share into the outer rows, write its rows back. A node's rows stay in the L1 cache
through all K local steps, there are no temporaries and no per-call overhead, and the
function releases the GIL, so a large round is split over two threads.

Compiled programs are kept on disk (:func:`cache_dir`), so a structure is compiled once per
machine, not once per process.

Gradients come from the problem as a compiled one-client function
``kernel(data, client, x, out)`` (``Problem.row_gradient``); problems without one, and
stochastic gradients, use the NumPy programs. Entry by entry the arithmetic is the NumPy
program's (same operations, same order, no fused multiply-add); sums over nodes (outer
rows) and over a gradient's terms are added in another order, so the two paths agree to
rounding, not bit for bit. Each path is deterministic on its own.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from ..model.phase import LocalForm
from ..model.picked import is_product, product_index
from ..plan.gradients import numba_available, numba_unavailable
from ..plan.steps import EndGuard, Guard
from .chunks import WIDE_KERNEL_ROWS, ByCount, work_before
from .disk_cache import cache_dir, compiled_rows
from .program import LocalProgram, SourceWriter
from .row_statements import Call, Loop, Names, Put, Row, Sum, lower

# Rounds of fewer node entries (nodes x d) than this stay on one thread.
PARALLEL_MIN_ENTRIES = 1 << 17
# How many nodes ahead a node's rows (state and problem data) are prefetched. At N = 10^6,
# d = 10, FedAvg: 14 ms a round with none and 9 ms with 4-32 for 10^5 participants; 0.36 ms
# with none, 0.25 ms with 8 and 0.27 ms with 64 for 1000. Prefetching the next block of
# nodes all at once instead was as slow as none.
AHEAD = 16
# Nodes per block of the blocked loop (see RowwiseProgram); 0: the node loop. Measured
# (benchmarks/bench_rowwise.py, FedAvg, N = 10^6, d = 10, 10^5 participants, one thread,
# AMD EPYC): the node loop prefetching 8 nodes ahead 12 ms a round; blocks of 8-1024 nodes
# gathered (or prefetched) first, then computed, 31-85 ms: a gathering pass stalls on
# every block's loads, where prefetching ahead keeps a steady stream of them in flight.
BLOCK = 0
# Whether programs are written from the lowered schedule (see row_statements); False writes
# one loop per step (the same numbers, bit for bit). FOCUS at N = 10^6, d = 10, 10^5
# participants, K = 3: 2.5 ms a round's loop one loop per step, 1.7 ms lowered.
LOWERED = True


@dataclass
class RowsCall:
    """The arguments of a generated row-wise function, in the order it takes them (the
    generated ``def`` line is written from these fields)."""

    z: np.ndarray  #: the state, (m, d)
    rows: tuple  #: per block slot, the state rows of the run's nodes, (s,)
    lo: int  #: the call runs nodes[lo:hi]
    hi: int
    cs: np.ndarray  #: the scalar coefficient values, by slot (0 for per-node ones)
    ca: np.ndarray  #: the per-node coefficient values, one row per array slot, (a, s)
    clients: np.ndarray  #: the gradient client of each node, (s,)
    S: np.ndarray  #: the snapshot of the single rows, (singles, d)
    A: np.ndarray  #: the outer rows' sums, (outer rows, d)
    gd: tuple  #: the problem's data, as its compiled gradient takes it
    cnt: np.ndarray  #: per node, its trips: a phase of level j runs where cnt > j (or empty)
    P: tuple  #: the run's mixing products, one row per node of the run (``RunRows``)


ROWS_PARAMETERS = tuple(f.name for f in fields(RowsCall))


class RowwiseProgram(LocalProgram):
    """One run structure compiled by Numba; see the module docstring. A kernel in the
    run's tail is computed in float64, as the loop's kernels are (``row_ops``).

    Args:
        forms: the run's local forms, in order.
        model_block: where gradients are taken.
        tail: how many of the last forms only set single rows from single rows.
        gradient: the problem's compiled ``(kernel, fetch)`` (see
            ``Problem.row_gradient``); the program calls them directly, each inlined by
            Numba at every call (:func:`stochmix._compiled.inlined`).
        block: nodes per block (default :data:`BLOCK`): the loop first gathers a block's
            rows of the blocks it reads into contiguous buffers (and prefetches the rows
            it only writes and the clients' data), then computes node by node from them.
            0 computes straight from the state, node by node (prefetching a few nodes
            ahead). Both give the same numbers, bit for bit.
        lowered: whether the code is written from the lowered schedule (default
            :data:`LOWERED`; see :mod:`~stochmix.engine.codegen.row_statements`) or one loop per
            step. Both give the same numbers, bit for bit.
    """

    row_ops = WIDE_KERNEL_ROWS

    def __init__(
        self,
        forms: list[LocalForm],
        model_block: str,
        tail: int = 0,
        gradient=None,
        block: int | None = None,
        lowered: bool | None = None,
        *,
        zero: frozenset = frozenset(),
        scratch: frozenset = frozenset(),
        levels: tuple = (),
    ):
        self.array_slots: list[int] = []
        self.gradient = gradient
        self.block = BLOCK if block is None else int(block)
        self.lowered = LOWERED if lowered is None else bool(lowered)
        # (coefs, snapshot, what _values built from them)
        self._last_values: tuple | None = None
        super().__init__(forms, model_block, tail, zero=zero, scratch=scratch, levels=levels)

    def _compile(self, source: str):
        return compiled_rows(source, self.gradient, f"<stochmix rowwise program {id(self):x}>")

    # ------------------------------------------------------------------ emission
    def _emit(self, schedule) -> str:
        """The schedule lowered to loops over one row (:mod:`.row_statements`: gradients
        written where they are kept, copies forwarded, element-wise steps on one buffer
        fused, unchanged rows not stored), each statement written as one line or one loop
        over ``j``."""
        w = self._writer()
        names = Names(
            buffer=lambda b: Row(str(b), f"{b}[j]"),
            single=lambda row: Row(self._single(row), f"{self._single(row)}[j]"),
            gathered=self._gathered,
            gradient=Row("g", "g[j]"),
            origin=Row("origin", "origin[j]"),
            coef=lambda kind, slot: self._coef(w, kind, slot),
            outer=self.outer_rows.index,
            rounded=lambda expression: f"rounded_as(z, {expression})",
        )
        plain = not self.lowered
        for statement in lower(schedule.steps, schedule.stores, schedule.checks, names, plain):
            if isinstance(statement, Guard):
                w.open(f"if cnt[t] > {statement.level}:")
            elif isinstance(statement, EndGuard):
                w.close()
            elif isinstance(statement, Loop):
                self._loop(w, f"{statement.out.entry} = {statement.value}")
            elif isinstance(statement, Call):
                w.emit(f"grad(gd, client, {statement.point.row}, {statement.out.row})")
            elif isinstance(statement, Sum):
                self._loop(w, f"A[{statement.index}, j] += {statement.value}")
            elif isinstance(statement, Put):
                self._loop(w, f"z[n{statement.slot}, j] = {statement.value}")
            else:  # Finite: x - x is 0 for finite x and NaN otherwise (an OR that vectorizes)
                tests = [f"({e} - {e} != 0.0)" for e in statement.entries]
                self._loop(w, f"bad |= {' | '.join(tests)}")
        return self._finish_loop(w)

    def _gathered(self, slot: int) -> Row:
        """The node's row of the block in ``slot``, where the loop reads it."""
        if self.block:
            return Row(f"G{slot}[k]", f"G{slot}[k, j]")
        source = self._source(slot)
        return Row(f"{source}[n{slot}]", f"{source}[n{slot}, j]")

    def _source(self, slot: int) -> str:
        """The array holding the rows of ``slot``: the state, or a mixing product's."""
        name = self.schedule.blocks[slot]
        return f"P{product_index(name)}" if is_product(name) else "z"

    def _loop(self, w: SourceWriter, statement: str) -> None:
        w.emit("for j in range(d):")
        w.emit(f"    {statement}")

    def _finish_loop(self, w: SourceWriter) -> str:
        w.emit("")
        self.array_slots = sorted(w.columns | w.vectors)
        gathered = {w.slot[b] for b in self.gather}
        used = {store.block for store in self.schedule.stores} | gathered
        head = [f"def rows({', '.join(ROWS_PARAMETERS)}):", "    d = z.shape[1]"]
        vectors = [f"b{w.slot[b]}_{k}" for b in self.blocks for k in (0, 1)]
        head += _aligned_vectors([*vectors, "g", "origin"])
        for b in self.blocks:
            i = w.slot[b]
            if i in used:
                head.append(f"    r{i} = rows[{i}]")
        for k, slot in enumerate(self.array_slots):
            head.append(f"    a{slot} = ca[{k}]")
        for k in range(len(self.singles)):
            head.append(f"    S{k} = S[{k}]")
        for k in map(product_index, filter(is_product, self.blocks)):
            head.append(f"    P{k} = P[{k}]")
        head.append("    bad = False")
        if self.block:
            head += self._blocked_loop(gathered, used)
        else:
            head += self._node_loop(gathered, used)
        for i in sorted(used):
            head.append(f"{w.indent}n{i} = r{i}[t]")
        if self.needs_gradients:
            head.append(f"{w.indent}client = clients[t]")
        return "\n".join(head + w.lines + ["    return not bad"]) + "\n"

    def _node_loop(self, gathered: set, used: set) -> list[str]:
        """Node after node, prefetching the rows and data of the node AHEAD nodes on."""
        lines = ["    for t in range(lo, hi):"]
        ahead = []
        for i in sorted(used):
            kind = "read" if i in gathered else "write"
            ahead.append(f"            prefetch_{kind}({self._source(i)}, r{i}[t + {AHEAD}])")
        if self.needs_gradients:
            ahead.append(f"            fetch(gd, clients[t + {AHEAD}])")
        if ahead:
            lines += [f"        if t + {AHEAD} < hi:", *ahead]
        return [*lines, "        pass"]

    def _blocked_loop(self, gathered: set, used: set) -> list[str]:
        """Block after block of nodes: a gathering pass (loads of many nodes in flight at
        once, where the node loop waits for each node's rows), then the nodes from the
        block's buffers ``G{i}`` (``k`` is the node's place in its block)."""
        lines = [f"    G{i} = np.empty(({self.block}, d), z.dtype)" for i in sorted(gathered)]
        lines += [
            f"    for t0 in range(lo, hi, {self.block}):",
            f"        t1 = min(t0 + {self.block}, hi)",
            "        for t in range(t0, t1):",
            "            k = t - t0",
        ]
        for i in sorted(used):
            if i in gathered:
                lines.append(f"            n = r{i}[t]")
                lines.append("            for j in range(d):")
                lines.append(f"                G{i}[k, j] = {self._source(i)}[n, j]")
            else:
                lines.append(f"            prefetch_write(z, r{i}[t])")
        if self.needs_gradients:
            lines.append("            fetch(gd, clients[t])")
        return [*lines, "        for t in range(t0, t1):", "            k = t - t0"]

    def _writer(self) -> SourceWriter:
        # inside the node loop (which is inside the loop over blocks when blocked)
        return SourceWriter(self.schedule.blocks, indent=" " * (12 if self.block else 8))

    def _single(self, row: int) -> str:
        return f"S{self.singles.index(row)}"

    def _coef(self, w: SourceWriter, kind: str, slot: int) -> str:
        if kind == "array":
            w.columns.add(slot)
            return f"a{slot}[t]"
        return f"cs[{slot}]"

    # ------------------------------------------------------------------ execution
    def _split(self, size: int, d: int, itemsize: int, data_per_row: int, workers: int, whole):
        """One call per thread: the nodes in ``workers`` contiguous parts when the round
        is large, else in one."""
        if workers > 1 and size >= workers and size * d >= PARALLEL_MIN_ENTRIES:
            return -(-size // workers), workers
        return max(size, 1), 1

    def _by_count(self, counts) -> ByCount:
        return ByCount(counts)

    def _bounds(self, size: int, step: int, extents) -> list[tuple[int, int]]:
        """One call per ``step`` nodes (the loop tests each node's trips itself); with
        repeated phases, the cuts balance the work instead (nodes with more trips weigh
        more: :func:`~stochmix.engine.codegen.chunks.work_before`)."""
        calls = -(-size // step)
        if not isinstance(extents, ByCount):  # bound by prefix: the same, by count
            extents = _counted(size, extents)
        if not extents.counts.size or calls < 2:
            return [(lo, min(lo + step, size)) for lo in range(0, size, step)]
        total = work_before(size, extents)
        cuts = [0]
        for k in range(1, calls):
            goal = total * k // calls
            lo, hi = cuts[-1], size  # the first node count whose work reaches the goal
            while lo < hi:
                mid = (lo + hi) // 2
                if work_before(mid, extents) < goal:
                    lo = mid + 1
                else:
                    hi = mid
            cuts.append(lo)
        cuts.append(size)
        return [(a, b) for a, b in zip(cuts, cuts[1:], strict=False) if b > a]

    def _chunks(self, z, rows, bounds, extents, coefs, clients, bind, snapshot, acc, worker):
        run = self._task(z, rows, bounds, extents, coefs, clients, bind, snapshot, acc, worker)
        return run()

    def _task(self, z, rows, bounds, extents, coefs, clients, bind, snapshot, acc, worker):
        """The call of the compiled function over the nodes of ``bounds`` (consecutive
        ``(lo, hi)`` pairs), its arguments built here (on the calling thread, so that a
        pool's worker only makes the call, which releases the GIL at once)."""
        if not len(bounds):
            return _finite
        lo, hi = int(bounds[0][0]), int(bounds[-1][1])
        if not isinstance(extents, ByCount):
            extents = _counted(hi, extents)
        d = z.shape[1]
        scalars, arrays, singles = self._values(coefs, snapshot, d, z.dtype)
        sums = np.zeros((len(self.outer_rows), d), dtype=z.dtype)
        call = RowsCall(
            z=z,
            rows=tuple(rows),
            lo=lo,
            hi=hi,
            cs=scalars,
            ca=arrays,
            clients=clients if clients is not None else rows[0],
            S=singles,
            A=sums,
            gd=bind[2],
            cnt=extents.counts,
            P=getattr(rows, "products", ()),
        )
        arguments = [getattr(call, name) for name in ROWS_PARAMETERS]
        function, outer = self._function, self.outer_rows

        def run() -> bool:
            ok = function(*arguments)
            for k, r in enumerate(outer):
                acc[r] += sums[k]
            return bool(ok)

        return run

    def _values(self, coefs: tuple, snapshot: dict, d: int, dtype) -> tuple:
        """The round's coefficient values and snapshot as the compiled function takes them
        (``cs``, ``ca``, ``S``): built once per round, every thread's part reads them. Found
        again by the identity of ``coefs`` and ``snapshot``: every run of a program takes
        its snapshot afresh, so two rounds never share one."""
        last = self._last_values
        if last is not None and last[0] is coefs and last[1] is snapshot:
            return last[2]
        scalars = np.array([c if np.ndim(c) == 0 else 0.0 for c in coefs], dtype=np.float64)
        if self.array_slots:
            arrays = np.stack([np.asarray(coefs[s], dtype=np.float64) for s in self.array_slots])
        else:
            arrays = np.empty((0, 0))
        if self.singles:
            singles = np.stack([snapshot[r] for r in self.singles])
        else:
            singles = np.empty((0, d), dtype)
        values = (scalars, arrays, singles)
        self._last_values = (coefs, snapshot, values)  # one tuple: read whole by any thread
        return values


def _finite() -> bool:
    return True


def _aligned_vectors(names: list[str]) -> list[str]:
    """Source lines that give each of ``names`` a vector of d zeros of z's dtype, each
    starting on a cache line of its own (one allocation per call). Separately allocated
    vectors land wherever the heap puts them; the loops' vector loads of a buffer that the
    previous loop stored then straddle cache lines at some addresses and not at others,
    and a program ran twice as slow or not by where its buffers happened to fall (FOCUS
    at 10^6 clients: 10.8 against 5.1 ms a round's loop, for the same code). How Numba
    types the buffers matters as much, and not the same way for every program: rows of a
    2-d pool made FedAvg's rounds at 10^4 clients 2.6x faster (full state) and at 10^6
    clients 2.4x slower; these slices of a 1-d pool, with compact states
    (``storage="auto"`` compacts every compiled run), were the fastest or within 10% of it
    in each of FedAvg and FOCUS at 10^4 and 10^6 clients."""
    lines = [
        "    line = 64 // z.itemsize",
        "    w = (d + line - 1) // line * line",
        f"    pool = np.zeros({len(names)} * w + line, z.dtype)",
        "    at = (-(pool.ctypes.data // z.itemsize)) % line",
    ]
    lines += [f"    {name} = pool[at + {k} * w : at + {k} * w + d]" for k, name in enumerate(names)]
    return lines


__all__ = ["RowwiseProgram", "cache_dir", "numba_available", "numba_unavailable"]


_NONE = ByCount(np.empty(0, dtype=np.int64))


def _counted(size: int, extents) -> ByCount:
    """A run's prefixes (``extents``, each a limited phase's) as each node's trips."""
    if not len(extents):
        return _NONE
    place = np.arange(size)
    return ByCount(sum((place < int(e)).astype(np.int64) for e in extents))

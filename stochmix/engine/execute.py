"""Applying a round's phases to the state.

The general path applies each phase through its sparse rows (``backend.apply``). Runs of
consecutive node-local phases over the same nodes (see :class:`~stochmix.engine.phase.
LocalForm`) take a faster path when the backend supports it: the nodes are processed in
cache-sized chunks, and for each chunk every block row the run reads is gathered once into
a small dense buffer, all the run's phases are applied to the buffer (gradients and
reductions into outer rows included), and the rewritten rows are scattered back. A round
then streams each participant's rows through memory once instead of once per phase, which
is what a hand-written kernel does, but for any method whose phases have this shape.

This is exact, not an approximation: within such a run each node's rows depend only on
the same node's rows and on single rows no phase of the run has written yet (read from a
snapshot taken when the run starts), and an outer row is a sum over the nodes that can be
accumulated chunk by chunk and written when the run ends. Runs are cut where these
conditions would fail.

A run is compiled once per *structure* (which blocks each phase writes from which, which
coefficients are +-1, numbers or per-node arrays) into a :class:`LocalProgram`: a list of
in-place NumPy operations on preallocated buffers. Later rounds with the same structure
(every round of a method, whatever its participants) reuse the program and its buffers and
only bind the round's nodes and coefficients.
"""

from __future__ import annotations

import numpy as np

from .method import Method, RunContext
from .phase import LocalForm, Phase, _kind

MIN_CHUNK_ROWS = 16  # at d = 1000, fewer rows per chunk cost more in call overhead
BUFFER_BYTES = 1 << 19  # a chunk's working set (buffers + gathered data): about L2
PROGRAMS = 64  # compiled programs kept (one per distinct structure of a run of phases)


def _block_of(layout, row: int) -> tuple[str, int]:
    for block in layout.blocks:
        start = layout.start(block.name)
        if start <= row < start + block.rows:
            return block.name, row - start + block.first_node
    raise ValueError(f"row {row} is outside the state")  # pragma: no cover


class _Run:
    """A run of node-local phases being assembled (see :func:`_plan`)."""

    def __init__(self, phase: Phase):
        self.phases = [phase]
        self.nodes = phase.local.nodes
        self.node_targets = set(phase.local.targets)
        self.outer_written = set(phase.local.outer_rows)

    def accepts(self, lf: LocalForm) -> bool:
        nodes = lf.nodes
        if nodes.size and self.nodes.size:
            if not (nodes is self.nodes or np.array_equal(nodes, self.nodes)):
                return False
        elif nodes.size != self.nodes.size and (nodes.size or not lf.outer):
            return False
        if lf.single_reads & self.outer_written or lf.outer_rows & self.outer_written:
            return False
        return True

    def add(self, phase: Phase) -> None:
        lf = phase.local
        self.phases.append(phase)
        if not self.nodes.size:
            self.nodes = lf.nodes
        self.node_targets.update(lf.targets)
        self.outer_written.update(lf.outer_rows)


def _local_ok(lf: LocalForm, method: Method, ctx: RunContext, memo: dict) -> bool:
    """Whether a node-local phase can run on the chunked path at all: gradients taken at
    the method's default points. (Which rows it may read and write one at a time is
    checked per run: :func:`_rows_ok`.)"""
    if not lf.gradients:
        return True
    if type(method).points is not Method.points:
        return False
    key = ("clients", id(lf.clients), id(lf.nodes))
    if key not in memo:
        offset = method.model_offset + ctx.layout.first_node(method.model_block)
        memo[key] = lf.clients.shape == lf.nodes.shape and np.array_equal(
            lf.clients + offset, lf.nodes
        )
    return memo[key]


def _plan(phases: list[Phase], local_ok: bool, method, ctx) -> list:
    """Split a round's phases into runs to chunk (``_Run``) and single phases."""
    out, run, memo = [], None, {}
    for ph in phases:
        if ph.is_identity:
            continue
        lf = ph.local if local_ok else None
        if lf is not None and not _local_ok(lf, method, ctx, memo):
            lf = None
        if lf is not None and run is not None and run.accepts(lf):
            run.add(ph)
            continue
        if run is not None:
            out.append(run)
            run = None
        if lf is not None:
            run = _Run(ph)
        else:
            out.append(ph)
    if run is not None:
        out.append(run)
    checked = []
    for item in out:
        if isinstance(item, _Run) and not _rows_ok(item, ctx, memo):
            checked += item.phases  # one at a time through the sparse path
        else:
            checked.append(item)
    return checked


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

    for ph in run.phases:
        for row in ph.local.outer_rows:
            if among_nodes(row)[1]:
                return False
        for row in ph.local.single_reads:
            block, inside = among_nodes(row)
            if inside and block in run.node_targets:
                return False
    return True


# =================================================================== compiled programs


class LocalProgram:
    """The operations of one run structure, compiled once and run chunk by chunk.

    Per chunk of nodes: gather the blocks the run reads before writing them, then for
    each phase (i) take the gradients at the model rows, (ii) add the outer rows' sums
    over the chunk into accumulators, (iii) compute every target block's new rows, out of
    place into a spare buffer or in place when the target keeps its own value, in an
    order where no target is overwritten before another target has read it; then scatter
    the written blocks. When every chunk is done, outer rows are set from their sums and
    from the snapshot of the single rows they read.
    """

    def __init__(self, forms: list[LocalForm], model_block: str):
        self.model = model_block
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
        self.singles = sorted(
            {r for lf in forms for r in lf.single_reads}
        )  # rows snapshotted at the start
        self.outer_rows = sorted({r for lf in forms for r in lf.outer_rows})
        self.steps = []
        self.vector_slots: set[int] = set()  # per-node coefficients of reductions: (c,)
        self.outer_singles = []  # (row, ref, slot): row += coef * snapshot[ref] at the end
        offset = 0
        for lf in forms:
            self.steps.append(self._compile(lf, offset))
            offset += len(lf.coefficients)
        self.n_coefficients = offset
        self.needs_gradients = any(lf.gradients for lf in forms)
        self._buffers: dict = {}

    # ------------------------------------------------------------------ compilation
    def _compile(self, lf: LocalForm, base: int):
        """The closure that applies one phase to a chunk's buffers."""
        index = iter(range(base, base + len(lf.coefficients)))
        exprs: dict[str, list] = {t: [] for t in lf.targets}
        for target, source, coef in lf.terms:
            exprs[target].append(("block", source, _kind(coef), next(index)))
        for target, row, coef in lf.external:
            exprs[target].append(("row", row, _kind(coef), next(index)))
        grad_targets = []
        for target, coef in lf.gradients:
            exprs[target].append(("grad", None, _kind(coef), next(index)))
            grad_targets.append(target)
        reductions = []
        for row, kind, ref, coef in lf.outer:
            slot = next(index)
            if kind == "sum":
                reductions.append((row, ref, _kind(coef), slot))
                self.vector_slots.add(slot)
            elif kind == "row":
                self.outer_singles.append((row, ref, slot))

        # In place: a target whose terms include itself (times a number). It must come
        # after every other in-place target that reads its old value; cycles go out of
        # place.
        inplace = {t for t, ex in exprs.items() if _reads(ex, t)}
        readers = {t: {u for u, ex in exprs.items() if u != t and _reads(ex, t)} for t in exprs}
        order: list[str] = []
        pending = set(inplace)
        while pending:
            ready = [t for t in pending if not (readers[t] & pending)]
            if not ready:
                t = min(pending)
                pending.discard(t)
                inplace.discard(t)
                continue
            for t in sorted(ready):
                order.append(t)
                pending.discard(t)
        fresh = [t for t in exprs if t not in inplace]
        plan = [(t, False) for t in fresh] + [(t, True) for t in order]
        gradients = bool(lf.gradients)
        model = self.model

        def step(cur, spare, scratch, coefs, rows_vec, grad_fn, acc):
            grad = None
            if gradients:
                x = cur[model]
                grad = grad_fn(x if x is not None else np.zeros_like(scratch(0)))
            for row, source, kind, slot in reductions:
                s = cur[source]
                if s is None:
                    continue
                c = coefs[slot]
                if kind == "array":
                    acc[row] += c @ s
                else:
                    total = s.sum(axis=0)
                    acc[row] += total if kind == "one" else c * total
            new = {}
            for target, in_place in plan:
                ex = exprs[target]
                if in_place and cur[target] is not None:
                    out = cur[target]
                    first = False
                    for k, ref, kind, slot in ex:
                        if k == "block" and ref == target:
                            if kind == "minus_one":
                                np.negative(out, out=out)
                            elif kind != "one":
                                out *= coefs[slot]
                            break
                    skip_self = True
                else:
                    out = spare(target, cur)
                    first = True
                    skip_self = False
                for k, ref, kind, slot in ex:
                    if k == "block":
                        if skip_self and ref == target:
                            skip_self = False
                            continue
                        src = cur[ref]
                        if src is None:
                            continue
                    elif k == "row":
                        src = rows_vec[ref]
                    else:
                        src = grad
                    c = coefs[slot]
                    if first:
                        if kind == "one":
                            np.copyto(out, src)
                        else:
                            np.multiply(src, c, out=out)
                        first = False
                    elif kind == "one":
                        np.add(out, src, out=out)
                    elif kind == "minus_one":
                        np.subtract(out, src, out=out)
                    else:
                        tmp = scratch(out.shape[0])
                        np.multiply(src, c, out=tmp)
                        np.add(out, tmp, out=out)
                new[target] = None if first else out
            cur.update(new)

        return step

    # ------------------------------------------------------------------ execution
    def _buffer_set(self, rows: int, d: int, dtype):
        key = (rows, d, np.dtype(dtype))
        bufs = self._buffers.get(key)
        if bufs is None:
            if len(self._buffers) > 4:
                self._buffers.clear()
            bufs = {
                "blocks": {
                    b: (np.empty((rows, d), dtype), np.empty((rows, d), dtype)) for b in self.blocks
                },
                "scratch": np.empty((rows, d), dtype),
            }
            self._buffers[key] = bufs
        return bufs

    def chunk_rows(self, d: int, itemsize: int, data_per_row: int) -> int:
        per_row = itemsize * (d * (2 * len(self.blocks) + 2) + data_per_row)
        return max(MIN_CHUNK_ROWS, BUFFER_BYTES // max(1, per_row))

    @np.errstate(over="ignore", invalid="ignore")
    def run(self, z, nodes, layout, coefs: list, clients, bind, data_per_row: int) -> bool:
        d = z.shape[1]
        snapshot = {r: z[r].copy() for r in self.singles}
        acc = {r: np.zeros(d, dtype=z.dtype) for r in self.outer_rows}
        finite = True
        if nodes.size:
            chunk = self.chunk_rows(d, z.dtype.itemsize, data_per_row)
            bufs = self._buffer_set(min(chunk, nodes.size), d, z.dtype)
            owned, scratch_buf = bufs["blocks"], bufs["scratch"]
            offsets = {b: layout.start(b) - layout.first_node(b) for b in self.blocks}
            for lo in range(0, nodes.size, chunk):
                nd = nodes[lo : lo + chunk]
                c = nd.size
                part = slice(lo, lo + c)
                rows = {b: nd + offsets[b] if offsets[b] else nd for b in self.blocks}
                cur: dict = {}
                for b in self.gather:
                    out = owned[b][0][:c]
                    np.take(z, rows[b], axis=0, out=out)
                    cur[b] = out
                for b in self.blocks:
                    cur.setdefault(b, None)

                def spare(target, cur, c=c):
                    a, b = owned[target]
                    x = cur[target]
                    if x is not None and x.base is a:
                        return b[:c]
                    return a[:c]

                def scratch(n, c=c):
                    return scratch_buf[:n] if n else scratch_buf[:c]

                chunk_coefs = [
                    co
                    if not isinstance(co, np.ndarray)
                    else co[part]
                    if i in self.vector_slots
                    else co[part, None]
                    for i, co in enumerate(coefs)
                ]
                grad_fn = bind(clients[part], z) if self.needs_gradients else None
                for step in self.steps:
                    step(cur, spare, scratch, chunk_coefs, snapshot, grad_fn, acc)
                for b in self.written:
                    value = cur[b]
                    if value is None:
                        z[rows[b]] = 0.0
                    else:
                        z[rows[b]] = value
                        finite = finite and bool(np.isfinite(value.sum()))
        if self.outer_rows:
            for r in self.outer_rows:
                z[r] = acc[r]
            for row, ref, slot in self.outer_singles:
                z[row] += coefs[slot] * snapshot[ref]
            finite = finite and bool(np.isfinite(z[self.outer_rows].sum()))
        return finite


def _reads(exprs, block: str) -> bool:
    return any(k == "block" and ref == block for k, ref, _, _ in exprs)


# =================================================================== the round


_PROGRAMS: dict = {}


def _program(forms: list[LocalForm], model_block: str) -> LocalProgram:
    key = (model_block, tuple(lf.signature for lf in forms))
    program = _PROGRAMS.get(key)
    if program is None:
        if len(_PROGRAMS) >= PROGRAMS:
            _PROGRAMS.clear()
        program = _PROGRAMS[key] = LocalProgram(forms, model_block)
    return program


def _chunk_gradients(problem):
    """A function ``(clients, like) -> (x -> gradients of those clients at x)`` for the
    chunks, which ask the same clients once per local step. Problems whose ``gradients`` is
    only a checked wrapper of their formula gather the clients' data once
    (``bind_clients``); others are called as they are."""
    if getattr(type(problem).gradients, "checks_then_calls_unchecked", False):
        return problem.bind_clients
    return lambda clients, like: lambda x: problem.gradients(clients, x)


def _run_local(run: _Run, z, problem, method: Method, ctx: RunContext) -> bool:
    forms = [ph.local for ph in run.phases]
    program = _program(forms, method.model_block)
    coefs = [c for lf in forms for c in lf.coefficients]
    clients = next((lf.clients for lf in forms if lf.gradients), None)
    data = problem._chunk_cost() if hasattr(problem, "_chunk_cost") else z.shape[1]
    return program.run(
        z, run.nodes, ctx.layout, coefs, clients, _chunk_gradients(problem), 2 * data
    )


def apply_round(phases: list[Phase], z, backend, problem, method: Method, ctx: RunContext) -> bool:
    """Apply a round's phases in order; False if a rewritten entry is not finite."""
    finite = True
    local_ok = getattr(backend, "runs_local_phases", False)
    for item in _plan(phases, local_ok, method, ctx):
        if isinstance(item, _Run):
            finite = _run_local(item, z, problem, method, ctx) and finite
            continue
        grads = None
        if item.clients.size:
            grads = problem.gradients(item.clients, method.points(z, ctx, item.clients))
        finite = backend.apply(z, item, grads) and finite
    return finite

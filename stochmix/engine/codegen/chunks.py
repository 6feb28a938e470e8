"""The chunk runtime: how a compiled run of node-local phases is applied to a round.

A program's generated chunk function (written by
:class:`~stochmix.engine.codegen.numpy_writer.NumpyWriter`) applies the run to the nodes
``nodes[lo:hi]`` of a round: gather their rows into dense buffers, apply every phase,
scatter the rewritten rows back, add their shares into the outer rows' sums.
:class:`ChunkRuntime` drives it over a round in three parts, each usable alone:

* :meth:`~ChunkRuntime.snapshot`: the single rows the run reads, as they are when it starts;
* :meth:`~ChunkRuntime.accumulate`: the chunks (rows per chunk from the cache budget,
  :data:`BUFFER_BYTES`, equal chunks, none tiny), on the calling thread or, for large
  rounds, on two threads (NumPy releases the GIL inside its loops); each thread sums its
  own outer rows and the sums are added in a fixed order;
* :meth:`~ChunkRuntime.finish`: the outer rows set from their sums and the snapshot's
  single-row terms, then the run's tail (single rows from single rows, such as a server
  step), with written rows checked for NaN and Inf.

The per-round steps (snapshot, sums, finish) and the chunk-splitting arithmetic are written
once for every dialect: what differs between arrays (NumPy's here, tensors in
:mod:`~stochmix.engine.codegen.torch_program`) is a :class:`RowOps`, the few operations on
single rows those steps need. The chunk loop itself is per dialect: it is the hot path and
each dialect's chunk function takes other arguments.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, fields
from functools import partial
from typing import Any

import numpy as np

from ..._pool import thread_pool
from ..model.kernels import KERNELS
from ..model.picked import is_product

__all__ = [
    "BUFFER_BYTES",
    "CHUNK_PARAMETERS",
    "ChunkCall",
    "ChunkRuntime",
    "MIN_CHUNK_ROWS",
    "NUMPY_ROWS",
    "PARALLEL_BUFFER_BYTES",
    "PARALLEL_MIN_ROWS",
    "RowOps",
    "RunRows",
    "WIDE_KERNEL_ROWS",
    "WideKernelRows",
]

MIN_CHUNK_ROWS = 16  # at d = 1000, fewer rows per chunk cost more in call overhead
BUFFER_BYTES = 1 << 20  # a chunk's working set (buffers + gathered data): about L2
# Threads pay off only with long NumPy calls (the GIL is held between them): chunks of
# this working set, at least PARALLEL_MIN_ROWS rows each and two per thread. Measured at
# N = 10^6, d = 10 (FOCUS, 125k participants): 43 ms a round on one thread, 33 on two;
# no gain at d >= 100 or with 1000 participants, where rounds stay on one thread.
PARALLEL_BUFFER_BYTES = 1 << 22
PARALLEL_MIN_ROWS = 1024


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
    on: tuple  #: per extent of the run, whether the chunk lies inside it (see `Guard`)
    P: tuple  #: the run's mixing products, one row per node of the run (`RunRows`)


class RunRows(list):
    """Per block slot, the rows that hold the run's nodes (:meth:`ChunkRuntime.node_rows`),
    with the run's mixing products ``products`` (``@k``, one row per node of the run, in
    the run's order: their slot's rows are the nodes' places)."""

    products: tuple = ()


CHUNK_PARAMETERS = tuple(f.name for f in fields(ChunkCall))


class RowOps:
    """The operations on single rows of the state that the per-round steps take (the
    snapshot, the outer rows' sums, :meth:`ChunkRuntime.finish`): NumPy's. Another array
    library's dialect subclasses it (see
    :class:`~stochmix.engine.codegen.torch_program.TorchRows`).

    Finiteness is reported by :meth:`rows_finite` and :meth:`finite`; a dialect that
    gathers it elsewhere (a device vector read once a round) may return True from both."""

    def copy(self, row):
        """A copy of ``row`` (a snapshot)."""
        return row.copy()

    def sums(self, z, rows) -> dict:
        """Zero sums of ``d`` entries for each of ``rows`` (row -> vector)."""
        return {r: np.zeros(z.shape[1], dtype=z.dtype) for r in rows}

    def zeros(self, z):
        """A vector of ``d`` zeros of ``z``'s dtype."""
        return np.zeros(z.shape[1], dtype=z.dtype)

    def put(self, z, row: int, value) -> None:
        """``z[row] = value``."""
        z[row] = value

    def add_scaled(self, out, src, c) -> None:
        """``out += c * src`` in place (``out`` a vector or a row of the state)."""
        out += c * src

    def kernel(self, name: str, row, params: list, more=()):
        """A new vector: the element-wise kernel ``name`` of
        :data:`~stochmix.engine.model.kernels.KERNELS` on ``row`` (and its further
        sources' rows ``more``) with round scalars ``params`` (its NumPy form, the
        programs' operations)."""
        out, tmp = np.empty_like(row), np.empty_like(row)
        KERNELS[name].numpy(row, *more, *params, out=out, tmp=tmp)
        return out

    def rows_finite(self, z, rows: list) -> bool:
        """Whether every entry of ``z``'s ``rows`` is finite."""
        return bool(np.isfinite(z[rows].sum()))

    def finite(self, value) -> bool:
        """Whether every entry of ``value`` is finite."""
        return bool(np.isfinite(value).all())


NUMPY_ROWS = RowOps()


class WideKernelRows(RowOps):
    """NumPy's row operations with kernels computed in float64 and rounded once to the
    state's dtype: what the Numba loop's inlined kernels do (their round scalars are
    float64), so a kernel in a run's tail gives the loop's bits in float32 too."""

    def kernel(self, name: str, row, params: list, more=()):
        wide = [np.asarray(r, dtype=np.float64) for r in (row, *more)]
        return super().kernel(name, wide[0], params, wide[1:]).astype(row.dtype, copy=False)


WIDE_KERNEL_ROWS = WideKernelRows()


class ByCount:
    """A run's repeated phases bound by count (see :mod:`stochmix.engine.model.trips`):
    each node's trips, ``counts`` (int64, one per node of the run, in its order)."""

    def __init__(self, counts):
        self.counts = np.ascontiguousarray(counts, dtype=np.int64)
        self._done: np.ndarray | None = None

    #: steps of the table of trips done (:meth:`work_before`), at most
    STEPS = 512

    def work_before(self, t: int) -> int:
        """The trips of the first ``t`` nodes: exact at multiples of the table's step (a
        table of at most :attr:`STEPS` sums, made once), pro rata between them; work is
        balanced to a fraction of a percent."""
        size = self.counts.size
        grid = max(1, size // self.STEPS)
        if self._done is None:
            edges = np.arange(0, size, grid)
            sums = np.add.reduceat(self.counts, edges) if size else np.zeros(0, np.int64)
            self._done = np.concatenate(([0], np.cumsum(sums)))
        whole, part = divmod(min(t, size), grid)
        done = int(self._done[min(whole, self._done.size - 1)])
        if part and whole + 1 < self._done.size:  # the rest of its step, pro rata
            length = min(grid, size - whole * grid)
            done += (int(self._done[whole + 1]) - done) * part // length
        return done


class ChunkRuntime:
    """How a program runs (mixed into :class:`~stochmix.engine.codegen.program.LocalProgram`):
    its generated chunk function applied over a round's nodes, then the outer rows and the
    tail set. See the module docstring."""

    # what the program sets up (see LocalProgram)
    blocks: list
    singles: list
    outer_rows: list
    outer_singles: list
    tail: list
    needs_gradients: bool
    _function: Callable[..., Any]  # the generated chunk function
    _buffers: dict
    #: the working set of a chunk in bytes; None: :data:`BUFFER_BYTES` (read when used)
    chunk_budget: int | None = None

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

    def _bounds(self, size: int, step: int, extents) -> list[tuple[int, int]]:
        """The chunks ``(lo, hi)`` of a round of ``size`` nodes: ``step`` nodes each, also
        cut at each of the run's ``extents`` (so that a chunk lies inside a prefix the run
        limits a phase to, or outside it)."""
        cuts = set(range(0, size, step))
        cuts.update(int(e) for e in extents if 0 < e < size)
        starts = sorted(cuts)
        return list(zip(starts, [*starts[1:], size], strict=True))

    def _split(self, size: int, d: int, itemsize: int, data_per_row: int, workers: int, whole):
        """(rows per chunk, threads) for a round of ``size`` nodes: chunks of
        :attr:`chunk_budget` bytes (all nodes in one with ``whole``), wider ones when the
        round is split over ``workers`` threads."""
        step = self.chunk_rows(d, itemsize, data_per_row, self.chunk_budget)
        if whole:
            step, workers = size, 1
        if workers > 1:
            wide = self.chunk_rows(d, itemsize, data_per_row, PARALLEL_BUFFER_BYTES)
            if wide >= PARALLEL_MIN_ROWS and size >= 2 * workers * wide:
                step = wide
            else:
                workers = 1
        return -(-size // -(-size // step)), workers  # equal chunks, none tiny

    def _task(self, z, rows, bounds, extents, coefs, clients, bind, snapshot, acc, worker):
        """A callable that runs :meth:`_chunks` with these arguments (what a pool's worker
        runs; the row-wise programs build their call's arguments here instead)."""
        return partial(
            self._chunks, z, rows, bounds, extents, coefs, clients, bind, snapshot, acc, worker
        )

    @np.errstate(over="ignore", invalid="ignore")
    def _chunks(self, z, rows, bounds, extents, coefs, clients, bind, snapshot, acc, worker):
        """Run the chunks ``bounds`` (``(lo, hi)`` pairs); False if a written entry is not
        finite. ``extents``: the run's prefixes (see :meth:`_bounds`). ``worker`` numbers
        the part (0 on the calling thread)."""
        # buffers per thread: the pool's workers, and runs that users start on threads of
        # their own with the same compiled program, never share them
        # capacity rounded up to a power of two: chunk sizes vary from round to round (equal
        # chunks of each round's size), and a set per exact size would pile up sets
        capacity = 1 << (max(hi - lo for lo, hi in bounds) - 1).bit_length()
        bufs = self._buffer_set(capacity, z.shape[1], z.dtype, threading.get_ident())
        if z.flags.c_contiguous:
            state, (views, zeros) = z.view(bufs["row"])[:, 0], bufs["rows"]
        else:
            state, (views, zeros) = z, bufs["plain"]
        finite = True
        for lo, hi in bounds:
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
                on=tuple(hi <= e for e in extents),
                P=getattr(rows, "products", ()),
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
        extents: tuple = (),
        counts=None,
        views: tuple = (),
        products: tuple = (),
    ) -> bool:
        """Apply the run to ``z`` in place for ``nodes`` with the round's coefficient
        values ``coefs`` (in signature order) and gradient ``clients``; ``bind(clients,
        like)`` returns the chunk's gradient function. False if a written entry is not
        finite. ``extents``: the prefixes of ``nodes`` that the run's limited phases run
        at (its program's ``levels`` number them); ``counts``: instead, each node's trips
        (a run bound by count, which only the row-wise programs take; see
        :mod:`stochmix.engine.model.trips`); ``views``: the rows picked by index,
        ``(name, block, rows)`` (:attr:`~stochmix.engine.plan.round_plan.LocalStep.views`);
        ``products``: the run's mixing products, one row per node of ``nodes``, computed
        when the run starts (:mod:`stochmix.engine.model.product_form`).

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
            self.node_rows(nodes, layout, views, products),
            nodes.size,
            coefs,
            clients,
            bind,
            data_per_row,
            snapshot,
            workers,
            whole,
            extents if counts is None else self._by_count(counts),
        )
        return self.finish(z, acc, snapshot, coefs) and finite

    def _by_count(self, counts):
        """What :meth:`accumulate` takes for a run bound by count (see :meth:`run`)."""
        raise ValueError(
            "counts: these programs run repeated phases on prefixes of the nodes; bind the "
            "step by prefix (LocalStep.by_prefix)"
        )

    def snapshot(self, z, at=None, ops: RowOps = NUMPY_ROWS) -> dict:
        """The single rows the run reads, as they are now (row -> copy); ``at(row)``
        gives where a row lives in ``z`` (the row itself by default)."""
        copy = ops.copy
        if at is None:
            return {r: copy(z[r]) for r in self.singles}
        return {r: copy(z[at(r)]) for r in self.singles}

    def node_rows(self, nodes, layout, views: tuple = (), products: tuple = ()) -> RunRows:
        """Per block slot, the rows of ``z`` that hold ``nodes`` (an array or a tensor);
        for rows picked by index (``views``: ``(name, block, rows)``, rows aligned with
        ``nodes``), the rows of ``z`` they pick; for a mixing product, the nodes' places
        (its rows in ``products``, kept as :attr:`RunRows.products`)."""
        rows = RunRows()
        rows.products = tuple(products)
        span = None
        picked = {name: (block, at) for name, block, at in views}
        for b in self.blocks:
            if is_product(b):
                places = np.arange(len(nodes), dtype=np.int64)
                rows.append(nodes.new_tensor(places) if hasattr(nodes, "cpu") else places)
                continue
            if b in picked:
                found = layout.rows(*picked[b])
                if hasattr(nodes, "cpu"):  # a tensor's rows as a tensor where it lives
                    found = nodes.new_tensor(found)
                rows.append(found)
                continue
            offset = layout.node_offset(b)
            apart = layout.apart_nodes(b)
            if apart is not None and len(nodes):
                if span is None:
                    span = int(nodes.min()), int(nodes.max())
                if span[1] < apart[0] or span[0] >= apart[1]:  # no client: a kept row
                    host = nodes.cpu().numpy() if hasattr(nodes, "cpu") else nodes
                    kept = layout.rows(b, np.asarray(host, dtype=np.int64) - layout.first_node(b))
                    if hasattr(nodes, "cpu"):  # a tensor's rows as a tensor where it lives
                        kept = nodes.new_tensor(kept)
                    rows.append(kept)
                    continue
                if span[0] < apart[0] or span[1] >= apart[1]:
                    raise ValueError(
                        f"a run over nodes {span[0]}..{span[1]} both inside and outside the "
                        f"rows of {b!r} the state does not keep"
                    )
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
        extents: tuple | ByCount = (),
    ) -> tuple[bool, dict]:
        """Run the chunks over ``size`` nodes whose rows per block slot are ``rows`` (see
        :meth:`node_rows`), writing their rows of ``z``; returns (whether every written
        entry is finite, the outer rows' sums over these nodes: row -> vector). Per-node
        coefficient values and ``clients`` are those of these nodes, in their order."""
        acc = NUMPY_ROWS.sums(z, self.outer_rows)
        finite = True
        if size:
            d = z.shape[1]
            step, workers = self._split(size, d, z.dtype.itemsize, data_per_row, workers, whole)
            bounds = self._bounds(size, step, extents)
            if workers > 1:
                parts = _parts(bounds, workers, extents)
                jobs = [
                    (part, NUMPY_ROWS.sums(z, self.outer_rows), w) for w, part in enumerate(parts)
                ]
                pool = thread_pool(workers)
                futures = [
                    pool.submit(
                        self._task(
                            z, rows, part, extents, coefs, clients, bind, snapshot, part_acc, w
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
                    z, rows, bounds, extents, coefs, clients, bind, snapshot, acc, 0
                )
        return finite, acc

    #: the row operations of :meth:`finish` (a program whose kernels compute otherwise
    #: says so: the Numba loop's, in float64 whatever the state's dtype)
    row_ops: RowOps = NUMPY_ROWS

    @np.errstate(over="ignore", invalid="ignore")
    def finish(self, z, acc: dict, snapshot: dict, coefs: tuple, at=None) -> bool:
        """Set the outer rows from their sums ``acc`` and the snapshot's single-row terms,
        then apply the tail; False if a written entry is not finite. ``at(row)`` gives
        where a row lives in ``z`` (the row itself by default)."""
        return self._settle(z, acc, snapshot, coefs, at, self.row_ops)

    def _settle(self, z, acc: dict, snapshot: dict, coefs: tuple, at, ops: RowOps) -> bool:
        """:meth:`finish` with the row operations ``ops`` (any dialect's)."""
        at = _same if at is None else at
        finite = True
        if self.outer_rows:
            for r in self.outer_rows:
                ops.put(z, at(r), acc[r])
            for row, ref, slot in self.outer_singles:
                ops.add_scaled(z[at(row)], snapshot[ref], coefs[slot])
            finite = ops.rows_finite(z, [at(r) for r in self.outer_rows])
        for entries in self.tail:  # single rows from single rows, all at once
            new = {}
            for row, kind, source, slot, kernel, scalars, more in entries:
                if kind == "kernel":  # alone on its row
                    values = [coefs[slot + k] for k in range(scalars)]
                    others = [z[at(m)] for m in more]
                    new[row] = ops.kernel(kernel, z[at(source)], values, others)
                    continue
                if row not in new:
                    new[row] = ops.zeros(z)
                if kind == "row":
                    ops.add_scaled(new[row], z[at(source)], coefs[slot])
                elif kind == "keep":
                    ops.add_scaled(new[row], z[at(source)], 1.0)
            for row, value in new.items():
                ops.put(z, at(row), value)
                finite = ops.finite(value) and finite
        return finite


def _same(row: int) -> int:
    return row


def work_before(t: int, extents) -> int:
    """The work of a run's first ``t`` nodes, in node-phases: each node once, and once
    more for each of the run's prefixes (``extents``, a repeated phase's) it lies in, or
    for each of its trips (``extents`` a :class:`ByCount`)."""
    if isinstance(extents, ByCount):
        return t + extents.work_before(t)
    return t + sum(min(t, int(e)) for e in extents)


def _parts(bounds: list, workers: int, extents: tuple | ByCount) -> list:
    """``bounds`` (consecutive chunks) cut into at most ``workers`` contiguous parts of
    about equal work (:func:`work_before`: with prefixes, the first nodes repeat more)."""
    total = work_before(bounds[-1][1], extents)
    parts: list = [[] for _ in range(workers)]
    for lo, hi in bounds:
        middle = work_before((lo + hi) // 2, extents)
        parts[min(workers - 1, middle * workers // max(total, 1))].append((lo, hi))
    return [part for part in parts if part]



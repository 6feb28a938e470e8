"""The ``distributed`` backend: one run spread over the ranks of a torch.distributed group.

Client rows are sharded over the ranks in contiguous ranges; the other rows (the server's
and every single row: a federated method's server model, its aggregates) are replicated
on every rank. Each rank stores only its rows: memory per rank is O((N / ranks + singles)
d). The method, its phases and the plan of each round are the ones a single process makes
(every rank draws the same participation stream from the run's seed and plans the whole
round, O(participants) per rank); what differs is how a plan is applied.

**Bit-identical for any number of ranks.** The clients are cut into a fixed grid of
:data:`SEGMENTS` segments of consecutive clients (it depends on N alone, never on the
number of ranks), and a rank holds a contiguous range of whole segments. A node-local run
(:class:`~stochmix.engine.plan.round_plan.LocalStep`) writes each participant's rows where they
live, and its sums into outer rows (the server's aggregates) are taken per segment
(:meth:`LocalProgram.accumulate <stochmix.engine.codegen.program.LocalProgram.accumulate>`): a
segment's sum is the same numbers whatever rank computes it. The segments' sums are added
as a fixed binary tree over the grid: a rank whose segments form an aligned subtree (a
power-of-two number of ranks) sends the subtree's sum, one (outer rows, d) array, others
send each of their segments' sums; every rank adds what it receives along the same tree
and sets the outer rows and the tail itself (:meth:`~stochmix.engine.codegen.program.LocalProgram.
finish`). One ``all_gather`` of O(d) per outer row per rank and round, the same bits on 1,
2, 4, ... ranks.

Phases outside node-local runs (rounds of one participant, whose rows the planner treats
one at a time) run on every rank for the rows it holds: the client rows they read from
other shards are gathered first (exactly those, one ``all_gather``), their gradients
computed on every rank for all their clients (the same batch as on one process). A
node-local run whose single rows include one client's rows (SCAFFOLD's server step in a
round of one participant) runs on the rank that holds that client, which then broadcasts
the replicated rows it wrote.

**Decentralized methods** (``client_node`` 0: node i is row i of every block, and every
block has one row per node) are sharded the same way: a rank holds rows ``[lo, hi)`` of
every block. Their mixing phases rewrite whole blocks (:mod:`stochmix.engine.model.blockwise`)
and are applied as the NumPy backend applies them, on the rank's rows: a product
``W @ S`` becomes ``local @ [own rows of S; halo rows]``, where ``local`` is the rank's
rows of ``W`` with its columns renamed onto its own rows and the *halo*, the rows of other
ranks those rows of ``W`` read (a :class:`HaloPlan`, made once per distinct matrix: a
static or periodic graph is planned once per matrix, a random sequence once per step).
Renaming columns keeps every row's entries in ``W``'s stored order, and SciPy adds a row's
products in stored order, so each new row is the same sum of the same products in the
same order as on one process: **the state is bit-identical to the NumPy backend's** (run
with ``compiled=False``: the shards run the NumPy programs), on any number of ranks. Only
the halo moves (``isend``/``irecv``; gloo has no ``all_to_all``), in one message per pair
of ranks for a phase and the whole-block phases after it whose sources are not rewritten
before they read them (gradient tracking's x and y products: one exchange a round): a
ring moves 2 rows a rank and product (:func:`ring_halo_rows`), a one-peer graph at hop h
``min(m, h) - max(0, m + h - n)`` rows (:func:`shift_halo_rows`; the one-peer exponential
graph's long hops reach a whole shard). Node-local runs (gradient steps on every node)
run per segment, as above. The reported model, the mean of the method's ``node_models``
over all nodes, and the consensus error are sums over the nodes taken per segment and
added along the same tree: bit-identical across ranks, and equal to the NumPy backend's
(which adds them in another order) to rounding (tested to 1e-12).

The end of each round all-reduces one finiteness flag (divergence stops every rank at the
same round). Every collective goes through :class:`Traffic`, which counts the bytes each
rank puts in and gets out.

Not yet: nonlinear row maps (channel noise, compression: refused, naming the method),
methods that report an output of their own other than a server row or the mean of their
``node_models``, problems whose gradients draw random numbers (each rank would draw its
own), the compiled (Numba) and Torch programs on the shards (the shards run the NumPy
programs; NCCL groups move the sums through the GPU, the state stays on the host).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import scipy.sparse as sp

from ..._arrays import row_sums
from ..._validate import as_float_dtype
from ..codegen.cache import program_for
from ..model.blockwise import BlockTarget, BlockwiseForm, apply_blockwise_numpy
from ..model.layout import Block, Layout
from ..model.method import Method, RunContext
from ..model.phase import Phase

SEGMENTS = 64  #: the fixed grid of client segments (a power of two): at most this many ranks
PLANS = 64  #: halo plans kept per shard (one per distinct mixing matrix, by identity)

__all__ = [
    "SEGMENTS",
    "DistributedBackend",
    "HaloPlan",
    "Shard",
    "Traffic",
    "closed_form_bytes",
    "halo_plan",
    "ring_halo_rows",
    "shift_halo_rows",
]


# ===================================================================== communication
@dataclass
class Traffic:
    """What one rank passed through the process group: bytes it put in (``sent``: its
    input to each collective) and bytes it got from the other ranks (``received``), and
    the number of collectives, in total and per kind."""

    sent: int = 0
    received: int = 0
    calls: int = 0
    by_kind: dict = field(default_factory=dict)

    def add(self, kind: str, sent: int, received: int) -> None:
        self.sent += sent
        self.received += received
        self.calls += 1
        k = self.by_kind.setdefault(kind, [0, 0, 0])
        k[0] += sent
        k[1] += received
        k[2] += 1

    def snapshot(self) -> tuple[int, int, int]:
        return self.sent, self.received, self.calls


class DistributedBackend:
    """The state of one rank of a torch.distributed group: its shard of client rows and
    every replicated row, as a NumPy array (see the module docstring).

    Args:
        dtype: float64 (default) or float32.
        group: the process group (default: the world).
        segments: the grid of client segments, a power of two >= the number of ranks;
            the same grid must be used to compare runs bit for bit (default
            :data:`SEGMENTS`).

    Raises:
        ValueError: torch.distributed is not available or no process group is initialised
            (start the processes with ``torchrun``, or call
            ``torch.distributed.init_process_group`` first).
    """

    name = "distributed"
    runs_local_phases = True  # node-local runs: sharded, segment by segment
    runs_sharded = True  # run() hands the whole run to run_sharded
    compiled = False  # the shards run the NumPy programs

    def __init__(self, dtype=np.float64, group=None, segments: int = SEGMENTS):
        try:
            import torch
            import torch.distributed as dist
        except ImportError:
            raise ValueError(
                'backend="distributed" needs PyTorch: pip install "stochmix[torch]"'
            ) from None
        if not dist.is_available() or not dist.is_initialized():
            raise ValueError(
                'backend="distributed" needs an initialised torch.distributed process group: '
                "start the processes with torchrun (python -m stochmix run under torchrun "
                "does it for you), or call torch.distributed.init_process_group first"
            )
        self.dtype = as_float_dtype(dtype)
        if isinstance(segments, bool) or not isinstance(segments, (int, np.integer)):
            raise TypeError(f"segments must be a power of two, got {segments!r}")
        segments = int(segments)
        if segments < 1 or segments & (segments - 1):
            raise ValueError(f"segments must be a power of two, got {segments}")
        self.torch, self.dist, self.group = torch, dist, group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        if self.size > segments:
            raise ValueError(
                f"{self.size} ranks but {segments} client segments: each rank needs at least "
                "one segment (pass segments= a larger power of two)"
            )
        self.segments = segments
        nccl = str(dist.get_backend(group)).lower() == "nccl"
        self.device = torch.device("cuda", torch.cuda.current_device()) if nccl else None
        self.traffic = Traffic()
        self.shard: Shard | None = None

    def __repr__(self) -> str:
        return f"DistributedBackend(rank={self.rank}, ranks={self.size}, segments={self.segments})"

    # ------------------------------------------------------------------ arrays
    def asarray(self, array) -> np.ndarray:
        return np.asarray(array, dtype=self.dtype)

    def to_numpy(self, array) -> np.ndarray:
        return np.asarray(array)

    def apply(self, z, phase, gradients) -> bool:
        """Not used: a sharded state is applied through :meth:`execute`."""
        raise TypeError(
            "DistributedBackend applies whole rounds (execute); a phase alone cannot be "
            "applied to a shard"
        )

    def apply_blockwise(self, z, phase, gradients) -> bool:
        """Not used either (a shard applies whole-block phases through :meth:`execute`,
        with halo exchanges); it is here so that rounds are planned with whole-block
        phases, exactly as the NumPy backend plans them."""
        return self.apply(z, phase, gradients)

    # ------------------------------------------------------------------ collectives
    def _tensor(self, array: np.ndarray):
        t = self.torch.from_numpy(np.ascontiguousarray(array))
        return t if self.device is None else t.to(self.device)

    def all_gather(self, array: np.ndarray, kind: str = "all_gather") -> list[np.ndarray]:
        """Every rank's ``array`` (all the same shape and dtype), in rank order."""
        if self.size == 1:
            return [array]
        mine = self._tensor(array)
        out = [self.torch.empty_like(mine) for _ in range(self.size)]
        self.dist.all_gather(out, mine, group=self.group)
        self.traffic.add(kind, array.nbytes, array.nbytes * (self.size - 1))
        return [t.cpu().numpy() for t in out]

    def broadcast(self, array: np.ndarray, src: int, kind: str = "broadcast") -> np.ndarray:
        """``array`` of rank ``src`` on every rank (others pass an array of its shape)."""
        if self.size == 1:
            return array
        t = self._tensor(array)
        self.dist.broadcast(t, src=self.dist.get_global_rank(self.group, src)
                            if self.group is not None else src, group=self.group)  # fmt: skip
        mine = self.rank == src
        self.traffic.add(kind, array.nbytes if mine else 0, 0 if mine else array.nbytes)
        return t.cpu().numpy()

    def _global(self, rank: int) -> int:
        """The global rank of ``rank`` of the group."""
        return rank if self.group is None else self.dist.get_global_rank(self.group, rank)

    def exchange(self, outgoing: list, incoming, dim: int, dtype) -> list:
        """Pairwise messages: ``outgoing[q]`` (an (rows, dim) array, or None) goes to rank
        q, and ``incoming[q]`` rows of ``dim`` values come from rank q; returns what
        arrived, by rank (None where nothing did). Only the ranks with something to move
        take part (``isend``/``irecv``: gloo has no ``all_to_all``); counted as one
        "halo" collective."""
        got: list = [None] * self.size
        if self.size == 1:
            return got
        requests, buffers, kept = [], {}, []
        sent = received = 0
        for q in range(self.size):
            if q != self.rank and int(incoming[q]):
                buffers[q] = self._tensor(np.empty((int(incoming[q]), dim), dtype=dtype))
                requests.append(self.dist.irecv(buffers[q], src=self._global(q), group=self.group))
                received += buffers[q].numel() * buffers[q].element_size()
        for q in range(self.size):
            rows = outgoing[q]
            if q != self.rank and rows is not None and len(rows):
                kept.append(self._tensor(rows))
                requests.append(self.dist.isend(kept[-1], dst=self._global(q), group=self.group))
                sent += rows.nbytes
        for request in requests:
            if request is not None:  # (None only for a rank outside the group)
                request.wait()
        self.traffic.add("halo", sent, received)
        for q, buffer in buffers.items():
            got[q] = buffer.cpu().numpy()
        return got

    def all_true(self, flag: bool) -> bool:
        """Whether ``flag`` holds on every rank (one all-reduce of one number)."""
        if self.size == 1:
            return bool(flag)
        t = self._tensor(np.array([1.0 if flag else 0.0]))
        self.dist.all_reduce(t, op=self.dist.ReduceOp.MIN, group=self.group)
        self.traffic.add("all_reduce", 8, 8)
        return bool(t.cpu().numpy()[0] > 0.5)

    def common(self, value: int) -> int:
        """Rank 0's ``value`` (a non-negative integer) on every rank."""
        return int(self.broadcast(np.array([value], dtype=np.int64), 0, "setup")[0])

    # ------------------------------------------------------------------ rounds
    def execute(self, plan: list, z: np.ndarray, problem, method: Method, ctx: RunContext) -> bool:
        """Apply a planned round to this rank's state ``z``; False if a rewritten entry
        is not finite on any rank (the same answer on every rank)."""
        from ..model.rowmap import RowMap
        from ..plan.gradients import chunk_gradients as _chunk_gradients
        from ..plan.round_plan import LocalStep

        shard = self.shard
        if shard is None:
            raise RuntimeError("DistributedBackend.execute before the run made its shard")
        bind = _chunk_gradients(problem)
        data = 2 * (problem.chunk_cost() if hasattr(problem, "chunk_cost") else z.shape[1])
        finite = True
        shard.halos = {}  # halo rows fetched ahead for later phases of the round
        for i, item in enumerate(plan):
            if isinstance(item, LocalStep):
                ok = shard.local_step(item, z, bind, data, ctx)
            elif isinstance(item, RowMap):
                raise NotImplementedError(
                    f'backend="distributed": method {method.name} applies a nonlinear row '
                    f"map (phase {item.label!r}); row maps do not run on shards yet"
                )
            else:
                done = shard.whole_blocks(item, z, problem, method, plan[i + 1 :])
                if done is None:  # not a whole-block phase over the sharded nodes
                    done = shard.general(item, z, problem, method, ctx)
                ok = done
            finite = ok and finite
        return self.all_true(finite)


def _tree(parts: np.ndarray) -> np.ndarray:
    """The sum of ``parts`` (a power-of-two count along axis 0) as a binary tree:
    neighbours first, the same additions whatever split the parts came from."""
    while parts.shape[0] > 1:
        parts = parts[0::2] + parts[1::2]
    return parts[0]


# ===================================================================== halo plans
@dataclass(frozen=True, eq=False)
class HaloPlan:
    """How one rank multiplies its rows of an ``(n, n)`` mixing matrix ``W`` with a block
    of which it holds rows ``[lo, hi)`` (m rows): what it gets from the others (the halo)
    and what it sends them.

    Attributes:
        local: CSR of shape ``(m, m + h)``: rows ``lo..hi-1`` of ``W`` with each column
            ``c`` renamed ``c - lo`` when the rank holds it and ``m + t`` when ``c`` is
            ``halo[t]``. Every row keeps its entries in ``W``'s stored order, so that
            ``local @ [own rows; halo rows]`` adds the same products in the same order as
            ``W @ X`` does on one process (SciPy sums a row's entries in stored order):
            the same bits on any number of ranks.
        halo: the nodes whose rows it receives, shape (h,), sorted (so grouped by the
            rank that holds them, in rank order).
        receive: rows it receives from each rank, shape (R,).
        send: for each rank q, the rows it sends q, as offsets into ``[lo, hi)``, sorted
            (q expects them in that order); empty for itself and ranks that need none.
    """

    local: sp.csr_array
    halo: np.ndarray
    receive: np.ndarray
    send: tuple

    @property
    def rows(self) -> int:
        """Remote rows received per product (h)."""
        return int(self.halo.size)


def halo_plan(matrix, lo: int, hi: int, owner: np.ndarray) -> HaloPlan:
    """The :class:`HaloPlan` of the rank holding rows ``[lo, hi)`` of every block, for the
    ``(n, n)`` CSR ``matrix``; ``owner[c]`` is the rank holding node c, shape (n,).

    Costs one pass over the matrix's entries (a rank finds what the others need of it
    from the matrix itself, which every rank has: no messages)."""
    n = matrix.shape[0]
    size = int(owner.max()) + 1 if owner.size else 1
    if lo == 0 and hi == n:  # one rank holds every node: W's arrays, nothing moves
        nothing = np.zeros(0, dtype=np.int64)
        # a new matrix object on the same arrays: the plan must not keep W itself alive
        local = sp.csr_array((matrix.data, matrix.indices, matrix.indptr), shape=matrix.shape)
        return HaloPlan(local, nothing, np.zeros(size, dtype=np.int64), (nothing,) * size)
    indptr = np.asarray(matrix.indptr, dtype=np.int64)
    indices = np.asarray(matrix.indices)
    m, a, b = hi - lo, int(indptr[lo]), int(indptr[hi])
    cols = indices[a:b].astype(np.int64)
    outside = (cols < lo) | (cols >= hi)
    halo = np.unique(cols[outside])
    renamed = cols - lo
    renamed[outside] = m + np.searchsorted(halo, cols[outside])
    local = sp.csr_array(
        (matrix.data[a:b], renamed, indptr[lo : hi + 1] - a), shape=(m, m + halo.size)
    )
    receive = np.bincount(owner[halo], minlength=size).astype(np.int64)
    # what the others need of [lo, hi): the entries in those columns, outside those rows
    at = np.flatnonzero((indices >= lo) & (indices < hi))
    rows = np.searchsorted(indptr, at, side="right") - 1
    foreign = (rows < lo) | (rows >= hi)
    pairs = np.unique(owner[rows[foreign]].astype(np.int64) * n + indices[at[foreign]])
    dest, col = np.divmod(pairs, n)
    send = tuple(col[dest == q] - lo for q in range(size))
    return HaloPlan(local, halo, receive, send)


def shift_halo_rows(n: int, m: int, shift: int) -> int:
    """Closed form of :attr:`HaloPlan.rows` for a matrix whose row i reads node i and
    node ``(i + shift) mod n`` (a one-peer graph: the one-peer exponential graph at hop
    ``2^k``, a directed ring), on a rank holding m consecutive nodes: the shifted range
    minus the rank's own, ``min(m, s) - max(0, m + s - n)`` rows with ``s = shift mod
    n`` (whatever the range's position)."""
    s = int(shift) % n
    return min(m, s) - max(0, m + s - n)


def ring_halo_rows(n: int, m: int) -> int:
    """Closed form of :attr:`HaloPlan.rows` for an undirected ring (row i reads nodes
    i - 1, i, i + 1 mod n) on a rank holding m >= 1 consecutive nodes: one row from each
    side, ``min(2, n - m)``."""
    return min(2, n - m) if m else 0


@dataclass(frozen=True, eq=False)
class _Mixed:
    """A product of a whole-block phase on a shard: its matrix, the matrix's halo plan,
    the source block and the shard's rows of it."""

    matrix: object
    plan: HaloPlan
    source: str
    rows: slice

    @property
    def key(self) -> tuple:
        """What its halo rows are kept under: (id(matrix), source)."""
        return id(self.matrix), self.source


class _ByIdentity:
    """Values cached by the identity of an object (a mixing matrix, a phase), dropped when
    that object is garbage collected (a time-varying sequence's matrices go as soon as
    the sequence lets them go) and all at once past ``size`` entries."""

    def __init__(self, size: int):
        self.size = size
        self.found: dict = {}  # id(obj) -> (weak reference to obj, value)

    def get(self, obj):
        entry = self.found.get(id(obj))
        return None if entry is None or entry[0]() is not obj else entry[1]

    def put(self, obj, value):
        if len(self.found) >= self.size:
            self.found.clear()
        key = id(obj)
        found = self.found

        def forget(_, key=key):
            entry = found.get(key)
            if entry is not None and entry[0]() is None:
                del found[key]

        self.found[key] = (weakref.ref(obj, forget), value)
        return value

    def __len__(self) -> int:
        return len(self.found)


# ===================================================================== the shard
class Shard:
    """Which rows of the stacked state a rank holds, and the rank's part of each round.

    Client ``c`` is node ``c + K`` of every block (``K = client_node + first_node`` of
    the model block); the clients are cut into ``segments`` consecutive segments
    (``floor(j N / segments)`` ...) and rank ``k`` of ``R`` holds segments ``[k G / R,
    (k + 1) G / R)``. Rows of nodes outside the clients are replicated. In a block of one
    row per client (every block of a decentralized method) the rank's rows are one slice
    of its state (:attr:`node_blocks`); whole-block phases over such blocks run through
    :meth:`whole_blocks`, with a :class:`HaloPlan` per distinct mixing matrix
    (:attr:`plans`, :attr:`plans_built`).
    """

    def __init__(
        self, backend: DistributedBackend, layout: Layout, n_clients: int, method, dim: int = 0
    ):
        self.backend = backend
        self.layout, self.n = layout, int(n_clients)
        self.first = int(method.client_node + layout.first_node(method.model_block))
        G, R, k = backend.segments, backend.size, backend.rank
        self.bounds = np.array([(j * self.n) // G for j in range(G + 1)], dtype=np.int64)
        self.seg_rank = np.array([(j * R) // G for j in range(G)], dtype=np.int64)
        # rank k's segments: those j with floor(j R / G) == k
        mine = np.flatnonzero(self.seg_rank == k)
        self.seg_lo, self.seg_hi = int(mine[0]), int(mine[-1]) + 1
        self.lo, self.hi = int(self.bounds[self.seg_lo]), int(self.bounds[self.seg_hi])
        self.aligned = G % R == 0 and (R & (R - 1)) == 0  # a subtree per rank
        keep = []
        for b in layout.blocks:
            nodes = np.arange(b.first_node, b.first_node + b.rows)
            client = (nodes >= self.first) & (nodes < self.first + self.n)
            own = (nodes >= self.first + self.lo) & (nodes < self.first + self.hi)
            keep.append(layout.start(b.name) + np.flatnonzero(~client | own))
        self.keep = np.concatenate(keep).astype(np.int64)
        self.row_node = np.empty(layout.size, dtype=np.int64)  # global row -> node
        for b in layout.blocks:
            self.row_node[layout.slice(b.name)] = np.arange(b.first_node, b.first_node + b.rows)
        # blocks of one row per client (every block of a decentralized method): a rank
        # holds their rows [lo, hi), a slice of its state; whole-block phases over them
        # run on the shard with halo exchanges
        self.node_blocks = {
            b.name: self._own_slice(b) for b in layout.blocks if self._one_row_per_client(b)
        }
        self.client_rank = np.repeat(self.seg_rank, np.diff(self.bounds))  # client -> rank
        self.plans = _ByIdentity(PLANS)  # mixing matrix -> HaloPlan
        self.forms = _ByIdentity(4 * PLANS)  # phase -> its form on the shard
        self.plans_built = 0
        self.halos: dict = {}  # halo rows fetched ahead (see whole_blocks), per round
        self.local_ctx = None  # the shard's own rows as a context (decentralized methods)
        if len(self.node_blocks) == len(layout.blocks) and self.hi > self.lo:
            local = Layout([Block(b.name, self.hi - self.lo, b.init, 0) for b in layout.blocks])
            self.local_ctx = RunContext(local, self.hi - self.lo, int(dim))

    def _one_row_per_client(self, block) -> bool:
        return block.first_node == self.first and block.rows == self.n

    def _own_slice(self, block) -> slice:
        """Where this rank's rows of a block of one row per client live in its state."""
        start = int(np.searchsorted(self.keep, self.layout.start(block.name) + self.lo))
        return slice(start, start + self.hi - self.lo)

    # ------------------------------------------------------------------ rows
    def owner(self, rows) -> np.ndarray:
        """The rank holding each global row, -1 for replicated rows."""
        rows = np.asarray(rows, dtype=np.int64)
        client = self.row_node[rows] - self.first
        inside = (client >= 0) & (client < self.n)
        out = np.full(rows.shape, -1, dtype=np.int64)
        if inside.any():
            seg = np.searchsorted(self.bounds, client[inside], side="right") - 1
            out[inside] = self.seg_rank[np.minimum(seg, len(self.seg_rank) - 1)]
        return out

    def local(self, rows) -> np.ndarray:
        """Where global ``rows`` (held by this rank) live in its state."""
        rows = np.asarray(rows, dtype=np.int64)
        at = np.searchsorted(self.keep, rows)
        if rows.size and (at.max() >= self.keep.size or (self.keep[at] != rows).any()):
            raise RuntimeError(f"rank {self.backend.rank} does not hold rows {rows}")
        return at

    def at(self, row: int) -> int:
        return int(self.local(np.array([row]))[0])

    def initial(self, x0: np.ndarray, dtype) -> np.ndarray:
        """This rank's rows of the initial state (``x0``: shape (d,), or (n, d) with a
        row per node for decentralized methods)."""
        z = np.zeros((self.keep.size, x0.shape[0]), dtype=dtype)
        for b in self.layout.blocks:
            sl = self.layout.slice(b.name)
            inside = (self.keep >= sl.start) & (self.keep < sl.stop)
            if b.init == "model" and x0.ndim == 2:  # one row per node
                z[inside] = x0[self.keep[inside] - sl.start]
            elif b.init == "model":
                z[inside] = x0
            elif b.init == "ones":
                z[inside] = 1.0
        return z

    # ------------------------------------------------------------------ sums
    def reduce(self, parts: np.ndarray, kind: str = "sums") -> np.ndarray:
        """The sum over every segment of the grid of per-segment values, on every rank:
        ``parts`` holds this rank's segments' values, shape (its segments, ...). The
        segments are added as one fixed binary tree (:func:`_tree`), whatever the number
        of ranks: a rank whose segments form an aligned subtree sends its subtree's sum,
        others send each segment's (one ``all_gather``)."""
        back = self.backend
        if self.aligned:
            pieces = back.all_gather(_tree(parts)[None], kind)
            return _tree(np.concatenate(pieces))
        # every segment's value, padded to the most segments a rank holds
        most = -(-back.segments // back.size)
        padded = np.zeros((most, *parts.shape[1:]), dtype=parts.dtype)
        padded[: parts.shape[0]] = parts
        pieces = back.all_gather(padded, kind)
        counts = np.bincount(self.seg_rank, minlength=back.size)
        return _tree(np.concatenate([p[:c] for p, c in zip(pieces, counts, strict=True)]))

    def segment_sums(self, rows: np.ndarray) -> np.ndarray:
        """Per segment of this rank, the sum of its nodes' ``rows`` (this rank's nodes in
        order, shape (m, ...)) over the nodes: shape (its segments, ...)."""
        cuts = self.bounds[self.seg_lo : self.seg_hi + 1] - self.lo
        out = np.zeros((cuts.size - 1, *rows.shape[1:]), dtype=rows.dtype)
        for i in range(cuts.size - 1):
            if cuts[i + 1] > cuts[i]:
                out[i] = row_sums(rows[cuts[i] : cuts[i + 1]])
        return out

    # ------------------------------------------------------------------ node-local runs
    def local_step(self, item, z, bind, data, ctx) -> bool:
        program, nodes = program_for(item.structure), item.nodes
        singles = set(program.singles) | set(program.outer_rows)
        singles |= {r for row, ref, _ in program.outer_singles for r in (row, ref)}
        singles |= {r for e in program.tail for row, _, ref, _ in e for r in (row, ref)}
        singles.discard(None)
        single_rows = np.array(sorted(singles), dtype=np.int64)
        owners = set(self.owner(single_rows).tolist()) - {-1}
        if not owners:
            return self._segments(program, item, z, bind, data, ctx)
        node_owners = set(self.seg_rank_of_clients(nodes - self.first).tolist())
        if len(owners | node_owners) > 1:
            raise NotImplementedError(
                "distributed: a node-local run that reads single rows of clients held by "
                "several ranks is not supported yet"
            )
        return self._on_owner(program, item, z, bind, data, ctx, owners.pop(), single_rows)

    def seg_rank_of_clients(self, clients) -> np.ndarray:
        seg = np.searchsorted(self.bounds, clients, side="right") - 1
        return self.seg_rank[np.minimum(seg, len(self.seg_rank) - 1)]

    def _partials(self, program, item, z, bind, data, ctx, segs) -> tuple[bool, np.ndarray]:
        """The outer rows' sums of segments ``segs`` (an (s, outer rows, d) array), the
        segments' rows of the nodes written."""
        nodes, d = item.nodes, z.shape[1]
        out = np.zeros((len(segs), len(program.outer_rows), d), dtype=z.dtype)
        finite = True
        cuts = np.searchsorted(nodes, self.first + self.bounds[segs[0] : segs[-1] + 2])
        snapshot = self._snap
        for i in range(len(segs)):
            a, b = int(cuts[i]), int(cuts[i + 1])
            if a == b:
                continue
            part = nodes[a:b]
            rows = [self.local(r) for r in program.node_rows(part, self.layout)]
            coefs = tuple(
                c[a:b] if np.ndim(c) and np.shape(c)[0] == nodes.size else c for c in item.coefs
            )
            clients = None if item.clients is None else item.clients[a:b]
            ok, acc = program.accumulate(
                z, rows, b - a, coefs, clients, bind, data, snapshot, whole=False
            )
            finite = finite and ok
            for j, r in enumerate(program.outer_rows):
                out[i, j] = acc[r]
        return finite, out

    def _segments(self, program, item, z, bind, data, ctx) -> bool:
        self._snap = program.snapshot(z, self.at)
        segs = list(range(self.seg_lo, self.seg_hi))
        finite, parts = self._partials(program, item, z, bind, data, ctx, segs)
        acc = {}
        if program.outer_rows:
            total = self.reduce(parts, "sums")
            acc = {r: total[j] for j, r in enumerate(program.outer_rows)}
        ok = program.finish(z, acc, self._snap, item.coefs, self.at)
        self._snap = None
        return finite and ok

    def _on_owner(self, program, item, z, bind, data, ctx, owner, singles) -> bool:
        back = self.backend
        rows = set(program.outer_rows) | {row for e in program.tail for row, *_ in e}
        written = np.array(sorted(rows), dtype=np.int64)
        shared = written[self.owner(written) == -1]
        values = np.zeros((shared.size, z.shape[1]), dtype=z.dtype)
        finite = True
        if back.rank == owner:
            self._snap = program.snapshot(z, self.at)
            segs = list(range(back.segments))  # the owner holds every node of the run
            finite, parts = self._partials(program, item, z, bind, data, ctx, segs)
            acc = {r: v for r, v in zip(program.outer_rows, _tree(parts), strict=True)}
            finite = program.finish(z, acc, self._snap, item.coefs, self.at) and finite
            self._snap = None
            values[:] = z[self.local(shared)]
        if shared.size:
            values = back.broadcast(values, owner, "owner rows")
            if back.rank != owner:
                z[self.local(shared)] = values
        return finite

    # ------------------------------------------------------------------ whole blocks
    def whole_blocks(self, phase, z, problem, method, following=()) -> bool | None:
        """Apply a whole-block phase (a decentralized mixing step, see
        :mod:`stochmix.engine.model.blockwise`) to this rank's rows, as the NumPy backend applies
        it to all of them: each product ``W @ S`` as this rank's rows of ``W`` times its
        rows of S and the halo rows it receives (:class:`HaloPlan`), the other terms row by
        row, gradients for its own nodes. Returns False if a new entry is not finite, None
        when the phase is not a whole-block phase over blocks of one row per client (the
        general path then).

        One exchange carries the halos of every product of the phase and of the
        ``following`` phases of the round (the rest of the plan) that can be fetched now:
        those of the whole-block phases up to the first other item, whose source blocks
        no phase before them rewrites (gradient tracking's two products a round, x's and
        y's, move in one exchange)."""
        local, mixed = self._form_of(phase)
        if local is None:
            return None
        halos = self.halos  # (id(matrix), source) -> [rows, phases still to read them]
        if self.backend.size > 1 and any(m.key not in halos for m in mixed):
            ahead = [*mixed, *self._ahead(local, following)]
            wanted = [m for m in ahead if m.key not in halos]
            got = self._exchange(wanted, z)
            for m in wanted:
                halos.setdefault(m.key, [got[m.key], 0])[1] += 1
        plans = {id(m.matrix): m.plan for m in mixed}
        grads = None
        if local.clients is not None:
            grads = self._gradients(local.clients, z, problem, method)

        def product(term, state):
            own = state[term.rows]
            plan = plans[id(term.matrix)]
            if not plan.rows:
                return plan.local @ own
            return plan.local @ np.concatenate((own, halos[id(term.matrix), term.source][0]))

        finite = apply_blockwise_numpy(z, local, grads, product)
        for m in mixed:  # read: dropped once every phase counted on it has read it
            entry = halos.get(m.key)
            if entry is not None:
                entry[1] -= 1
                if entry[1] <= 0:
                    del halos[m.key]
        return finite

    def _form_of(self, phase) -> tuple:
        """:meth:`_local_form` of ``phase``'s whole-block form, kept per phase object."""
        found = self.forms.get(phase)
        if found is None:
            form = phase.blockwise if isinstance(phase, Phase) else None
            found = self.forms.put(phase, self._local_form(form))
        return found

    def _ahead(self, local, following) -> list:
        """The products (:class:`_Mixed`) of the whole-block phases among ``following``
        (up to the first other item) whose source blocks neither ``local`` nor a phase
        between rewrites: their halos hold now what those phases will read."""
        from ..plan.round_plan import LocalStep

        written = {t.block for t in local.targets}
        ahead = []
        for item in following:
            if isinstance(item, LocalStep) or type(item) is not Phase:
                break
            form, mixed = self._form_of(item)
            if form is None:
                break
            ahead += [m for m in mixed if m.source not in written]
            written |= {t.block for t in form.targets}
        return ahead

    def _local_form(self, form) -> tuple:
        """``form`` on this rank's rows (targets, sources and per-row coefficients cut to
        its nodes), with the products' matrices, plans and sources (:class:`_Mixed`, one
        per distinct pair); (None, ()) when the form is not one this shard can run
        (blocks other than one row per client, or gradients of clients other than the
        target rows' own nodes)."""
        if form is None:
            return None, ()
        blocks = self.node_blocks
        used = {t.block for t in form.targets} | {
            term.source for t in form.targets for term in t.terms if term.source is not None
        }
        clients = form.clients
        if not used <= blocks.keys() or (
            clients is not None and not (form.consecutive and int(clients[0]) == 0)
        ):
            return None, ()
        lo, hi = self.lo, self.hi
        mixed, targets = {}, {}
        for target in form.targets:
            terms = []
            for term in target.terms:
                rows = None if term.source is None else blocks[term.source]
                coef = term.coef[lo:hi] if np.ndim(term.coef) else term.coef
                terms.append(replace(term, rows=rows, coef=coef))
                if term.kind == "mix":
                    assert rows is not None  # a product reads a source block
                    key = (id(term.matrix), term.source)
                    if key not in mixed:
                        plan = self._plan(term.matrix)
                        mixed[key] = _Mixed(term.matrix, plan, term.source, rows)
            targets[target.block] = BlockTarget(target.block, blocks[target.block], tuple(terms))
        local = BlockwiseForm(
            tuple(targets[t.block] for t in form.targets),
            None if clients is None else clients[lo:hi],
            form.consecutive,
            tuple((targets[t.block], direct, check) for t, direct, check in form.order),
        )
        return local, tuple(mixed.values())

    def _plan(self, matrix) -> HaloPlan:
        """The halo plan of ``matrix``, made once per distinct matrix (by identity: a
        static or periodic graph sequence hands the same matrix back every time)."""
        plan = self.plans.get(matrix)
        if plan is None:
            if matrix.shape != (self.n, self.n):
                raise ValueError(
                    f"distributed: a mixing matrix of shape {matrix.shape} over blocks of "
                    f"{self.n} nodes"
                )
            plan = self.plans.put(matrix, halo_plan(matrix, self.lo, self.hi, self.client_rank))
            self.plans_built += 1
        return plan

    def _exchange(self, mixed: Sequence[_Mixed], z) -> dict:
        """The halo rows of every product (:class:`_Mixed`) from the ranks that hold them:
        one message per pair of ranks, carrying the rows of every product. Returns
        ``(id(matrix), source) -> (h, d)`` rows in the order of ``plan.halo``."""
        back = self.backend
        if back.size == 1 or not mixed:
            return {}
        mixed = tuple({m.key: m for m in mixed}.values())
        d = z.shape[1]
        outgoing, incoming = [], np.zeros(back.size, dtype=np.int64)
        for q in range(back.size):
            rows = [m.rows.start + m.plan.send[q] for m in mixed if m.plan.send[q].size]
            outgoing.append(z[np.concatenate(rows)] if rows else None)
            incoming[q] = sum(int(m.plan.receive[q]) for m in mixed)
        got = back.exchange(outgoing, incoming, d, z.dtype)
        halos, at = {}, np.zeros(back.size, dtype=np.int64)
        for m in mixed:
            pieces = []
            for q in np.flatnonzero(m.plan.receive).tolist():
                count = int(m.plan.receive[q])
                pieces.append(got[q][at[q] : at[q] + count])
                at[q] += count
            halos[id(m.matrix), m.source] = (
                np.concatenate(pieces) if pieces else np.zeros((0, d), dtype=z.dtype)
            )
        return halos

    def _gradients(self, clients, z, problem, method):
        """The gradients of this rank's ``clients`` (its own nodes, in order) at the
        method's points, as :func:`~stochmix.engine.backends.dispatch._apply_blockwise`
        takes them."""
        from ..plan.gradients import gradients_at as _gradients_at

        if type(method).points is Method.points:
            model = self.node_blocks[method.model_block]
            return _gradients_at(problem, clients, z[model])
        if self.local_ctx is None:
            raise NotImplementedError(
                f"distributed: {type(method).__name__} takes gradients at its own points "
                "(Method.points overridden) over blocks that are not one row per node"
            )
        local = np.arange(self.hi - self.lo)
        return _gradients_at(problem, clients, method.points(z, self.local_ctx, local))

    # ------------------------------------------------------------------ general phases
    def general(self, phase, z, problem, method, ctx) -> bool:
        """``z[rows] <- mix @ z + inject @ G`` for the rows this rank holds, with the
        client rows read from other shards gathered first."""
        back = self.backend
        rows = np.asarray(phase.rows, dtype=np.int64)
        row_own = self.owner(rows)
        held = np.flatnonzero((row_own == -1) | (row_own == back.rank))
        mix = phase.mix.tocsr()
        clients = np.asarray(phase.clients, dtype=np.int64)
        points_rows = np.zeros(0, dtype=np.int64)
        if clients.size:
            if type(method).points is not Method.points:
                raise NotImplementedError(
                    f"distributed: {type(method).__name__} takes gradients at its own points "
                    "(Method.points overridden); not supported yet"
                )
            points_rows = ctx.layout.rows(method.model_block, clients + method.client_node)
        # the client rows some rank reads but does not hold: gathered for everyone
        entry_row = np.repeat(row_own, np.diff(mix.indptr))
        col_own = self.owner(mix.indices)
        need = (col_own >= 0) & ((entry_row == -1) | (entry_row != col_own))
        wanted = np.union1d(mix.indices[need], points_rows[self.owner(points_rows) >= 0])
        fetched = self._fetch(wanted, z) if back.size > 1 else None

        def values(global_rows):
            out = np.empty((global_rows.size, z.shape[1]), dtype=z.dtype)
            own = self.owner(global_rows)
            here = (own == -1) | (own == back.rank)
            out[here] = z[self.local(global_rows[here])]
            if (~here).any():
                out[~here] = fetched[np.searchsorted(wanted, global_rows[~here])]
            return out

        sub = mix if held.size == rows.size else mix[held]
        cols = np.unique(sub.indices)
        compact = sp.csr_matrix(
            (sub.data, np.searchsorted(cols, sub.indices), sub.indptr),
            shape=(held.size, cols.size),
        )
        new = compact @ values(cols)
        if phase.inject is not None and clients.size:
            grads = problem.gradients(clients, values(points_rows))
            inject = phase.inject if held.size == rows.size else phase.inject.tocsr()[held]
            new += inject @ grads
        new = np.asarray(new).astype(z.dtype, copy=False)
        z[self.local(rows[held])] = new
        return bool(np.isfinite(new.sum()))

    def _fetch(self, wanted: np.ndarray, z) -> np.ndarray:
        """The values of global client rows ``wanted`` (sorted), gathered from their
        owners."""
        back = self.backend
        own = self.owner(wanted)
        counts = np.bincount(own, minlength=back.size) if wanted.size else np.zeros(back.size, int)
        out = np.empty((wanted.size, z.shape[1]), dtype=z.dtype)
        if not wanted.size:
            return out
        padded = np.zeros((int(counts.max()), z.shape[1]), dtype=z.dtype)
        mine = wanted[own == back.rank]
        padded[: mine.size] = z[self.local(mine)]
        for r, piece in enumerate(back.all_gather(padded, "rows")):
            out[own == r] = piece[: counts[r]]
        return out


# ===================================================================== the run
class _Reported:
    """What the recorder asks of a federated method, on a shard: the server row of the
    model block (replicated), and no consensus error (federated methods have none)."""

    def __init__(self, method, row: int):
        self.method, self.row = method, row

    def output(self, z, ctx):
        return z[self.row]

    def consensus_error(self, z, ctx):
        return None


class _NetworkAverage:
    """What the recorder asks of a decentralized method, on a shard: the mean of the
    method's ``node_models`` over all nodes, shape (d,), and their mean squared distance
    to it (what :class:`~stochmix.algorithms.decentralized.DecentralizedMethod` reports
    on one process).

    Both are sums over the nodes taken per segment of the fixed grid and added as one
    binary tree (:meth:`Shard.reduce`): **the same bits on any number of ranks**. One
    process adds the same numbers in another order (NumPy's blocked and pairwise sums),
    so against the NumPy backend they agree to rounding (about 1e-15 relative), not bit
    for bit; the state itself is bit-identical."""

    def __init__(self, method, shard: Shard):
        self.method, self.shard = method, shard
        self._mean = None

    def _models(self, z):
        return self.method.node_models(z, self.shard.local_ctx)

    def output(self, z, ctx):
        shard = self.shard
        self._mean = shard.reduce(shard.segment_sums(self._models(z)), "output") / shard.n
        return self._mean

    def consensus_error(self, z, ctx):
        """Called after :meth:`output` for the same state (as the recorder does)."""
        shard = self.shard
        spread = ((self._models(z) - self._mean) ** 2).sum(axis=1)
        return float(shard.reduce(shard.segment_sums(spread), "consensus") / shard.n)


def _reports_network_average(method) -> bool:
    """Whether ``method`` reports the mean of its ``node_models``: a method with a node
    per row (``client_node`` 0) that declares ``reports_node_average`` (see
    :attr:`stochmix.engine.Method.reports_node_average`; a subclass may change the node
    models, as push-sum does, but not the output without declaring it again)."""
    return (
        getattr(method, "client_node", None) == 0
        and callable(getattr(method, "node_models", None))
        and bool(getattr(method, "reports_node_average", False))
    )


def _reporter(method, shard: Shard, layout: Layout):
    """The recorder's view of ``method`` on ``shard`` (see :func:`_refuse` for what is
    refused)."""
    if type(method).output is Method.output:
        return _Reported(method, shard.at(layout.start(method.model_block)))
    return _NetworkAverage(method, shard)


def _refuse(method, problem, shard: Shard) -> None:
    """Refuse, with an error naming the argument, what a shard cannot run."""
    from ..plan.gradients import pure_formula as _pure_formula

    name = type(method).__name__
    if type(method).output is not Method.output:
        if not _reports_network_average(method):
            raise NotImplementedError(
                f'backend="distributed": method {name} reports its own output; a shard '
                "reports the server row (federated methods, Method.output) or the mean of "
                "node_models over all nodes (decentralized methods: client_node 0, and "
                "output and consensus_error written with node_models)"
            )
        if shard.local_ctx is None:
            raise NotImplementedError(
                f'backend="distributed": method {name} is decentralized, and a shard runs '
                "decentralized methods whose every block has one row per node, at least "
                f"one node per rank ({shard.n} nodes on {shard.backend.size} ranks, blocks "
                f"{[(b.name, b.rows) for b in shard.layout.blocks]})"
            )
    if not _pure_formula(problem):
        raise ValueError(
            f'backend="distributed" needs gradients that are a pure formula of the data; '
            f"problem {type(problem).__name__}'s draw random numbers (each rank would draw "
            "its own)"
        )


def closed_form_bytes(outer_rows: int, dim: int, ranks: int, itemsize: int = 8) -> dict:
    """The bytes one rank moves in a federated round whose node-local run has
    ``outer_rows`` aggregates (power-of-two ``ranks``): its subtree's sums in (one
    (outer_rows, d) array), the other ranks' out, plus the finiteness flag."""
    if ranks == 1:
        return {"sent": 0, "received": 0}
    piece = outer_rows * dim * itemsize
    return {"sent": piece + 8, "received": piece * (ranks - 1) + 8}

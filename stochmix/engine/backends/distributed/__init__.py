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

**One engine.** The backend is a backend of the one engine, not a run loop of its own:
:func:`stochmix.run` sets the run up once (its shard hook, ``make_shard``, makes this
rank's :class:`Shard`), and the one dispatcher
(:func:`~stochmix.engine.backends.dispatch.execute`) sends each planned item to the
shard's item hooks (:class:`~.items.ShardItems`). Every option of a run on one process
works here too: participation and activation processes, the virtual clock (every rank
runs the same clock), checkpoints (a file per rank), composite problems and other
nonlinear row maps (a map's source rows are gathered on every rank, which computes the
map whole and keeps the rows it holds: the same values, random draws included).
Refused at the start, with an error naming the argument: ``storage="compact"`` (a shard
keeps its rows), methods that report an output of their own other than a server row or
the mean of their ``node_models``, problems whose gradients draw random numbers (each
rank would draw its own). Not used on shards: the compiled (Numba) and Torch programs
(the shards run the NumPy programs; NCCL groups move the sums through the GPU, the state
stays on the host), and the compiled segments of small rounds.
"""

from __future__ import annotations

from .collectives import SEGMENTS, DistributedBackend, Traffic, closed_form_bytes
from .halo import HaloPlan, halo_plan, ring_halo_rows, shift_halo_rows
from .items import ShardItems
from .shard import Shard

# more names of the single module this package was, for the modules that import them
from .halo import PLANS as PLANS  # isort: skip
from .halo import _ByIdentity as _ByIdentity  # isort: skip
from .halo import _Mixed as _Mixed  # isort: skip
from .reporting import _NetworkAverage as _NetworkAverage  # isort: skip
from .reporting import _refuse as _refuse  # isort: skip
from .reporting import _Reported as _Reported  # isort: skip
from .reporting import _reporter as _reporter  # isort: skip
from .reporting import _reports_network_average as _reports_network_average  # isort: skip
from .shard import _tree as _tree  # isort: skip

__all__ = [
    "SEGMENTS",
    "DistributedBackend",
    "HaloPlan",
    "Shard",
    "ShardItems",
    "Traffic",
    "closed_form_bytes",
    "halo_plan",
    "ring_halo_rows",
    "shift_halo_rows",
]

"""What a round costs in the units of the literature: gradient evaluations, messages,
floats sent and sample gradients, read off the phases' own terms.

A phase ``Z[rows] <- M Z + B G`` sends a message from node j to node i for every
nonzero ``M[r, s]`` with row r of node i and row s of node j != i. Messages are counted
per mixing operator (the same operator applied to several blocks in one phase sends one
message per (sender, receiver) pair, carrying a row of each block; two different
operators of a phase count apart, as do rows copied between nodes), each row costing
``d`` floats, or what the method says a row of that block costs on the wire
(:meth:`~stochmix.engine.model.method.Method.sent_floats`, e.g. a compressed copy). The
gradient evaluations of a phase are the clients of each distinct client array ``G`` is
taken for. A round is the sum of its phases. A nonlinear row map
(:mod:`stochmix.engine.model.rowmap`) sends a message for every (sender, receiver) pair of
nodes among its source rows and its target rows (exact FedProx's clients read the server
model: one message each; :func:`map_traffic`), and the gradients it asks of the problem
are counted as it asks (:class:`CountedProblem`). Rows of a block placed after every node
(a per-sample table: :class:`~stochmix.engine.model.layout.Block` with ``first_node`` past
the nodes) are the memory of the node that reads them, and reading them sends nothing.

Gradient evaluations and sample gradients. A *gradient evaluation* is one node's
gradient oracle called at one point: its full local gradient grad f_i (a gradient term), or
a stochastic or variance-reduced estimate drawn from some of its samples (a sampled
gradient term, ``grad(S, samples=...)``, or the ``sampled_gradients`` a row map asks
for). A *sample gradient* is one component gradient
grad f_{i,j} of a finite sum f_i = (1/m_i) sum_j f_{i,j} (the "incremental first-order
oracle" calls by which variance-reduced methods are compared): a full local gradient costs
m_i of them (:func:`sample_counts`: the problem's ``rows_per_client``, or the
``samples_per_gradient`` a minibatch problem declares; 1 for a problem without samples),
a minibatch of b drawn samples costs b.

So FedAvg's round with participants S sends 2|S| messages (the pull of the server model
and the push of the update) and takes K|S| gradients; a decentralized iteration sends one
message per off-diagonal nonzero of W_k in each phase that mixes with it; under
activation only the active nodes' pulls and pushes count.
"""

from __future__ import annotations

import weakref
from functools import partial

import numpy as np

from ...mixing.activation import column_rows
from ...mixing.rowsparse import rows_entries

__all__ = [
    "NO_TRAFFIC",
    "CountedProblem",
    "PhaseTraffic",
    "map_traffic",
    "phase_traffic",
    "round_traffic",
    "sample_counts",
    "samples_of",
]

#: The costs of a round, in the order of every traffic tuple: (gradient evaluations,
#: messages, floats, sample gradients).
COSTS = ("gradients", "messages", "floats", "sample_gradients")


class PhaseTraffic:
    """One phase's cost: ``gradients`` (gradient evaluations), ``messages``, ``rows``
    (block -> the rows of that block sent), ``clients`` (the distinct client arrays
    whose full local gradients it takes) and ``drawn`` (the sample gradients of its
    sampled gradients: b per client), counted as the module docstring says."""

    __slots__ = ("clients", "drawn", "gradients", "messages", "rows")

    def __init__(
        self, gradients: int, messages: int, rows: dict, clients: tuple = (), drawn: int = 0
    ):
        self.gradients, self.messages, self.rows = gradients, messages, rows
        self.clients = clients
        self.drawn = drawn  # sample gradients of sampled gradient terms


NO_TRAFFIC = PhaseTraffic(0, 0, {})


def sample_counts(problem) -> np.ndarray:
    """The sample gradients one full local gradient of each client costs, shape (N,)
    int64: ``problem.samples_per_gradient`` where a problem declares it (a minibatch
    problem: its batch size), else its ``rows_per_client`` (a finite sum), else 1 each
    (a wrapper without either is looked through, ``problem.problem``)."""
    n = int(problem.n_clients)
    seen = problem
    for _ in range(8):  # wrappers of wrappers, a few deep at most
        for name in ("samples_per_gradient", "rows_per_client"):
            found = getattr(seen, name, None)
            if found is not None:
                counts = np.asarray(found, dtype=np.int64).reshape(-1)
                if counts.size == 1 or (counts.size and (counts == counts[0]).all()):
                    return np.broadcast_to(counts[:1], (n,))  # one count: read-only, stride 0
                return counts
        seen = getattr(seen, "problem", None)
        if seen is None:
            break
    return np.broadcast_to(np.ones(1, dtype=np.int64), (n,))


def samples_of(samples, clients: np.ndarray) -> int:
    """The sample gradients of one full local gradient of each of ``clients``, summed:
    ``samples[clients].sum()`` for the run's :func:`sample_counts` (one per gradient when
    None), without reading ``clients`` when every client has the same count."""
    if samples is None:
        return int(clients.size)
    if samples.ndim == 1 and samples.strides[0] == 0:  # one count for everyone
        return int(clients.size) * int(samples[0]) if samples.size else 0
    return int(samples[clients].sum())


class CountedProblem:
    """The run's problem as row maps see it (``MapInfo.problem``): every member of the
    problem, with the gradients asked of it counted. ``gradients(clients, points)`` costs
    one evaluation and m_i sample gradients per row (:func:`sample_counts`);
    ``sampled_gradients(clients, points, picks, scale)`` one evaluation per row and one
    sample gradient per pick. :meth:`take` gives the counts since the last take."""

    def __init__(self, problem, counts: np.ndarray):
        self.__dict__.update(problem=problem, _counts=counts, _taken=[0, 0])

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.__dict__["problem"], name)

    @property
    def uncounted(self):
        """The run's problem itself (for messages that name its class)."""
        return self.__dict__["problem"]

    def gradients(self, clients, points):
        rows = np.asarray(clients, dtype=np.int64).reshape(-1)
        self._taken[0] += rows.size
        self._taken[1] += samples_of(self._counts, rows)
        return self.problem.gradients(clients, points)

    def sampled_gradients(self, clients, points, picks, scale):
        self._taken[0] += int(np.size(clients))
        self._taken[1] += int(np.size(picks))
        return self.problem.sampled_gradients(clients, points, picks, scale)

    def take(self) -> tuple[int, int]:
        """``(gradient evaluations, sample gradients)`` asked since the last call."""
        taken = tuple(self._taken)
        self._taken[:] = [0, 0]
        return taken[0], taken[1]


def _cross(op, shift: int) -> int:
    """Nonzero entries of ``op`` between two nodes (target node != source node, with
    target row r at node r + shift relative to the source), kept on the operator. An
    operator that is ``hops`` rounds over the edges of a ``base`` operator (a polynomial
    of W: :class:`~stochmix.mixing.PolynomialMixing`) counts ``hops`` times ``base``'s."""
    memo = op.__dict__.setdefault("_cross", {})
    found = memo.get(shift)
    if found is None and getattr(op, "hops", None) is not None:
        found = memo[shift] = int(op.hops) * _cross(op.base, shift)
    parent = getattr(op, "parent", None)
    if found is None and parent is not None and shift == 0:
        # rows of a whole operator (an activated pull): its per-row counts, unsliced
        found = memo[shift] = int(row_cross(parent.values)[op.rows].sum())
    if found is None:
        rows, cols, vals = op.entries()
        found = memo[shift] = int(np.count_nonzero((rows + shift != cols) & (vals != 0)))
    return found


_ROW_CROSS: dict = {}  # id(matrix) -> (a weak reference to it, its counts)


def row_cross(matrix) -> np.ndarray:
    """Per row of a square CSR ``matrix`` (a mixing matrix over every node), its nonzero
    entries off the diagonal: the messages its row i receives. Kept while the matrix
    lives (matrices are not changed in place once made)."""
    key = id(matrix)
    found = _ROW_CROSS.get(key)
    if found is not None and found[0]() is matrix:
        return found[1]
    rows = np.repeat(np.arange(matrix.shape[0]), np.diff(matrix.indptr))
    off = (matrix.indices != rows) & (matrix.data != 0)
    running = np.concatenate(([0], np.cumsum(off, dtype=np.int64)))
    counts = running[matrix.indptr[1:]] - running[matrix.indptr[:-1]]
    counts.flags.writeable = False
    _ROW_CROSS[key] = (weakref.ref(matrix, partial(_forget_row_cross, key)), counts)
    return counts


def _forget_row_cross(key: int, _reference) -> None:
    _ROW_CROSS.pop(key, None)


def phase_traffic(layout, deferred: list, draws=None, owners=None) -> PhaseTraffic:
    """The traffic of a phase from its builder's terms (``PhaseBuilder._deferred``).

    Counted without sorting: an operator applied to several blocks in one phase sends
    one message per pair and a row of each block; distinct operators, and rows copied
    between nodes, add up (a pair that two different operators of one phase use counts
    twice). Gradients: one per client of each distinct client array; with ``draws``
    (the phase's sampled gradients, :class:`~stochmix.engine.model.phase.Draws`) one per
    client of the draw, and b sample gradients each. ``owners``: rows picked by index
    (``x.at[...]``), ``id(rows) -> (rows, nodes)``: a row of a table past the nodes picked
    so is the picking node's (a message when another node writes or reads it); other rows
    past the nodes are the memory of the node that reads or writes them, and a node
    block's rows are their nodes' however they are picked."""

    def nodes_of(block: str, block_rows) -> np.ndarray:
        found = owners.get(id(block_rows)) if owners else None
        first = layout.first_node(block)
        if found is not None and found[0] is block_rows and first >= _node_count(layout):
            return found[1]  # a table's rows: the memory of the client that picks them
        return np.asarray(block_rows, dtype=np.int64).reshape(-1) + first

    gradients: dict = {}  # id(clients) -> the client array
    messages: dict = {}  # id(op) or a term's index -> messages
    rows: dict = {}
    nodes = None  # (the layout's nodes: rows past them are the memory of their reader)
    for index, term in enumerate(deferred):
        kind = term[0]
        if kind == "gradient":
            clients = term[3]
            gradients[id(clients)] = clients
            continue
        if kind in ("apply", "push"):
            _, target, source, op, _ = term
            shift = layout.first_node(target) - layout.first_node(source)
            # an activated push's messages are its operator's active columns, counted once
            # whether it came as PushedColumns or split into the rows it reaches (one
            # equation of the round may take either)
            origin = (op.op, op.senders) if kind == "push" else getattr(op, "pushed_from", None)
            if origin is not None:
                whose = ("push", id(origin[0]), id(origin[1]), shift)
                if whose not in messages:
                    messages[whose] = pushed_cross(origin[0], origin[1], shift)
                count = messages[whose] if kind == "push" else _cross(op, shift)
                if count:
                    rows[source] = rows.get(source, 0) + count
                continue
            count = _cross(op, shift)
            key = id(op)
        elif kind == "combine":
            _, target, t_rows, source, s_rows, coef = term
            if np.ndim(coef) == 0 and coef == 0:
                continue
            t, s = nodes_of(target, t_rows), nodes_of(source, s_rows)
            if t.size == 0 or s.size == 0:
                continue
            if nodes is None:
                nodes = _node_count(layout)
            if int(t.max()) >= nodes or int(s.max()) >= nodes:  # a table's rows
                t, s = np.broadcast_arrays(t, s)
                inside = (t < nodes) & (s < nodes)
                t, s = t[inside], s[inside]
                if t.size == 0:
                    continue
            if t.size == s.size:  # row to row
                count = int(np.count_nonzero(t != s))
            elif t.size == 1:  # a reduction onto one row
                count = s.size - int(np.count_nonzero(s == t[0]))
            else:  # one row broadcast
                count = t.size - int(np.count_nonzero(t == s[0]))
            key = index
        else:  # clear
            continue
        if count:
            messages[key] = count
            rows[source] = rows.get(source, 0) + count
    taken = tuple(np.asarray(c, dtype=np.int64).reshape(-1) for c in gradients.values())
    total = sum(c.size for c in taken)
    drawn = 0
    if draws is not None and total:  # sampled: the draw's clients, b samples each
        total, taken, drawn = int(draws.clients.size), (), int(draws.picks.size)
    if not messages:
        return PhaseTraffic(total, 0, {}, taken, drawn) if total else NO_TRAFFIC
    return PhaseTraffic(total, sum(messages.values()), rows, taken, drawn)


def pushed_cross(op, senders: np.ndarray, shift: int = 0) -> int:
    """The messages of an activated push (:mod:`~stochmix.engine.model.pushed`): the
    nonzero entries ``op[i, j]`` of the columns ``senders`` between two nodes (target row
    i at node ``i + shift`` relative to the source)."""
    columns = column_rows(op)
    if shift == 0:  # per column, counted once per operator
        return int(row_cross(columns)[senders].sum())
    at, counts = rows_entries(columns, senders)
    rows, cols = columns.indices[at], np.repeat(senders, counts)
    return int(np.count_nonzero((rows + shift != cols) & (columns.data[at] != 0)))


def _node_count(layout) -> int:
    """The nodes of a layout: those of the blocks that start at node 0 or 1 (the server,
    the clients or the peers); a block placed after them holds no node's rows."""
    return max((b.first_node + b.rows for b in layout.blocks if b.first_node <= 1), default=0)


def map_traffic(layout, target: str, target_rows: np.ndarray, sources) -> PhaseTraffic:
    """The messages of a row map ``target[target_rows] <- f(sources...)`` (``sources``:
    ``(block, block rows, ...)`` as :class:`~stochmix.engine.model.rowmap.RowMap` keeps
    them): one per (sender, receiver) pair of distinct nodes, carrying a row of each
    source block read across; no gradients (those a map asks for are counted as it runs).
    A source read at the target's own nodes sends nothing."""
    nodes = _node_count(layout)
    receivers = np.asarray(target_rows, dtype=np.int64) + layout.first_node(target)
    pairs: list = []
    rows: dict = {}
    for name, block_rows, *_ in sources:
        if layout.first_node(name) == layout.first_node(target) and (
            block_rows is target_rows or np.array_equal(block_rows, target_rows)
        ):
            continue  # each node reads its own rows
        senders = np.broadcast_to(
            np.asarray(block_rows, dtype=np.int64) + layout.first_node(name), receivers.shape
        )
        cross = (senders != receivers) & (senders < nodes) & (receivers < nodes)
        count = int(np.count_nonzero(cross))
        if count:
            rows[name] = rows.get(name, 0) + count
            pairs.append(senders[cross] * nodes + receivers[cross])
    if not pairs:
        return NO_TRAFFIC
    return PhaseTraffic(0, int(np.unique(np.concatenate(pairs)).size), rows)


def round_traffic(phases, method, dim: int, samples=None) -> tuple[int, int, int, int]:
    """``(gradient evaluations, messages, floats, sample gradients)`` of a round's linear
    phases (a row map's gradients are counted as it runs: :class:`CountedProblem`).
    ``samples``: the run's :func:`sample_counts` (1 per gradient where None)."""
    gradients = messages = floats = sampled = 0
    counted: dict = {}  # id(clients) -> their sample gradients (K local steps: one array)
    for phase in phases:
        traffic = getattr(phase, "traffic", None)
        if traffic is None:  # an object without one (a user's phase-like item)
            continue
        gradients += traffic.gradients
        messages += traffic.messages
        for block, rows in traffic.rows.items():
            floats += rows * method.sent_floats(block, dim)
        for clients in traffic.clients:
            found = counted.get(id(clients))
            if found is None or found[0] is not clients:
                found = counted[id(clients)] = (clients, samples_of(samples, clients))
            sampled += found[1]
        sampled += traffic.drawn
    return gradients, messages, floats, sampled

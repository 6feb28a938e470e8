"""Activation processes for decentralized methods: asynchronous clocks and random gossip.

Every :class:`~stochmix.participation.ParticipationProcess` yields
:class:`~stochmix.participation.Activation` records from :meth:`activations`; a plain
participation process gives its participants as the active nodes, with no edges and no time.
The processes here draw more than a set of nodes:

* :class:`PoissonClocks`: one tick of the superposed Poisson clocks per round (one node, and
  the continuous time of the tick);
* :class:`RandomEdge`: one random edge of a graph per tick (randomized pairwise gossip);
* :class:`RandomMatching`: a random maximal matching of a graph per round;
* :class:`OnePeerPermutation`: a uniformly random permutation per round, each node
  receiving from one peer.

Their :meth:`~ParticipationProcess.participants`, :meth:`~ParticipationProcess.masks`,
``sample`` and ``estimate_probabilities`` are those of the same rounds (the active nodes),
and the same seed gives the identical stream. Clock-driven processes draw their ticks in
batches of 4096, so a stream fed a ``Generator`` advances it by whole batches.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import networkx as nx
import numpy as np
import scipy.sparse as sp
from jaxtyping import Float, Int, Real

from .._validate import as_float, as_int, as_real_array, choice, is_scalar, show
from ._record import Activation, ActivationStream, _activation
from .base import FloatLike, IntLike, ParticipationProcess, _mask_from, _show_vector

_BATCH = 4096  # ticks drawn at once by the clock-driven processes

#: The matrix of an edge-activated round (the processes' ``mixing``): "pairwise"
#: averaging over the activated edges, or the method's "weights" on them (the weight of
#: the other edges kept on the diagonal); see :mod:`stochmix.mixing.activation`.
MIXINGS = ("pairwise", "weights")


def _mixing_field(process) -> dict:
    return {} if process.mixing == "pairwise" else {"mixing": repr(process.mixing)}


class _EdgeProcess:
    """Marks the processes that activate edges (gossip): decentralized methods mix over
    the activated edges' matrix in their rounds."""

    activates = "edges"
    mixing: str = "pairwise"


class ActivationProcess(ParticipationProcess):
    """Base of the processes that draw :class:`Activation` records directly.

    Subclasses implement :meth:`_activation_stream`; the participants (sorted indices) and
    the masks of :class:`ParticipationProcess` are the records' ``nodes``, round by round.
    """

    @property
    def n_nodes(self) -> int:
        """The number of nodes, ``n_clients`` under its decentralized name."""
        return self.n_clients

    def _activation_stream(self, rng: np.random.Generator) -> Iterator[Activation]:
        raise NotImplementedError  # pragma: no cover  (every subclass draws its own)

    def _index_stream(self, rng: np.random.Generator) -> Iterator[np.ndarray]:
        for record in self._activation_stream(rng):
            yield record.nodes

    def _stream(self, rng: np.random.Generator) -> Iterator[np.ndarray]:
        n = self.n_clients
        for record in self._activation_stream(rng):
            yield _mask_from(record.nodes, n)


def _readonly(arr: np.ndarray) -> np.ndarray:
    arr.flags.writeable = False
    return arr


def _ticks(rng: np.random.Generator, rate: float) -> Iterator[np.ndarray]:
    """Batches of the cumulative times of a Poisson process of rate ``rate`` (i.i.d.
    ``Exp(rate)`` gaps), ``_BATCH`` at a time."""
    scale = 1.0 / rate
    now = 0.0
    while True:
        times = np.cumsum(rng.exponential(scale, _BATCH))
        times += now
        now = float(times[-1])
        yield times


def _choose(rng: np.random.Generator, cdf: np.ndarray | None, count: int) -> np.ndarray:
    """``_BATCH`` i.i.d. indices in ``[0, count)``: uniform when ``cdf`` is None, else with
    ``P(k) = cdf[k] - cdf[k - 1]`` (``cdf[-1] == 1``, so a zero-probability index is never
    drawn)."""
    if cdf is None:
        return rng.integers(count, size=_BATCH, dtype=np.int64)
    return np.searchsorted(cdf, rng.random(_BATCH), side="right").astype(np.int64, copy=False)


def _cdf(weights: np.ndarray) -> np.ndarray | None:
    """The cumulative distribution of ``weights`` (last entry exactly 1), or None when all
    weights are equal (uniform draws are faster)."""
    if np.all(weights == weights[0]):
        return None
    total = np.cumsum(weights)
    return total / total[-1]


class PoissonClocks(ActivationProcess):
    """Independent Poisson clocks, one per node; each round is one tick of their superposition.

    Node ``i`` has a Poisson clock of rate ``λ_i``. Their superposition is a Poisson process
    of rate ``Λ = Σ_i λ_i`` whose every tick belongs to node ``i`` with probability
    ``λ_i / Λ``, independently of the past. A round is one tick: ``nodes`` is the one node
    that ticks, ``edges`` is ``None`` and ``time`` is the tick's time, the sum of i.i.d.
    ``Exp(Λ)`` gaps since time 0 (the asynchronous time model of Boyd et al.).

    Probabilities (per tick) are ``λ_i / Λ``.

    Args:
        rates: the clock rates ``λ``: a positive number (every node alike; ``n_nodes`` is
            then required) or a vector of ``n`` positive finite numbers.
        n_nodes: the number of nodes n (with a vector of rates, its length if given).

    References:
        S. Boyd, A. Ghosh, B. Prabhakar, D. Shah, "Randomized gossip algorithms", IEEE
        Transactions on Information Theory 52(6):2508–2530, 2006 (Section II: the
        asynchronous time model).
    """

    def __init__(
        self,
        rates: FloatLike | Real[np.ndarray, " n"] | Sequence[float],
        n_nodes: IntLike | None = None,
    ):
        if is_scalar(rates):
            rate = as_float(rates, "rates", positive=True)
            if n_nodes is None:
                raise ValueError("n_nodes is required when rates is a number")
            n = as_int(n_nodes, "n_nodes", minimum=1)
            values = np.full(n, rate)
        else:
            values = as_real_array(rates, "rates", ndim=1, finite=False)
            if values.size == 0:
                raise ValueError("rates must not be empty, got shape (0,)")
            bad = ~(np.isfinite(values) & (values > 0))
            if bad.any():
                i = int(np.flatnonzero(bad)[0])
                raise ValueError(
                    f"rates must be positive and finite; entry {i} is {float(values[i])!r}"
                )
            if n_nodes is not None:
                n = as_int(n_nodes, "n_nodes", minimum=1)
                if n != values.size:
                    raise ValueError(f"n_nodes = {n} does not match len(rates) = {values.size}")
            values = values.copy()
        self.n_clients = int(values.size)
        self.rates = _readonly(values)
        self.total_rate = float(values.sum())
        if not np.isfinite(self.total_rate):
            raise ValueError(f"rates must have a finite sum, got {self.total_rate}")
        low = np.flatnonzero(values / self.total_rate < np.finfo(float).tiny)  # never ticks
        if low.size or self.total_rate < 1.0 / np.finfo(float).max:  # 1 / sum overflows
            i = int(low[0]) if low.size else int(np.argmin(values))
            raise ValueError(f"rates: entry {i} is {float(values[i])!r}, too small (subnormal, "
                             "or its share of the sum): that clock never ticks")  # fmt: skip
        self._cdf = _cdf(values)

    @property
    def probabilities(self) -> Float[np.ndarray, " n"]:
        """``λ_i / Λ``, the probability that a tick is node i's, shape ``(n,)``."""
        return self.rates / self.total_rate

    def _activation_stream(self, rng: np.random.Generator) -> Iterator[Activation]:
        return ActivationStream(self._blocks(rng))

    def _blocks(self, rng: np.random.Generator) -> Iterator[tuple]:
        n, cdf = self.n_clients, self._cdf
        for times in _ticks(rng, self.total_rate):
            nodes = _readonly(_choose(rng, cdf, n).reshape(_BATCH, 1))
            yield nodes, None, _readonly(times)

    def _fields(self):
        return {"rates": _show_vector(self.rates), "n_nodes": self.n_clients}


# ------------------------------------------------------------------------------ graphs


def _graph_edges(graph, attribute: str | None) -> tuple[int, np.ndarray, np.ndarray | None]:
    """``(n, edge_list, weights)``: the undirected edges ``{i, j}``, ``i < j``, of ``graph``
    sorted, self-loops dropped, each once (directions and parallel edges merged), and the
    value of the edge attribute ``attribute`` on each (None without one)."""
    if isinstance(graph, nx.Graph):
        n = graph.number_of_nodes()
        nodes = list(graph.nodes)
        bad = [v for v in nodes if isinstance(v, bool) or not isinstance(v, (int, np.integer))]
        if bad:
            raise TypeError(f"graph nodes must be the integers 0..n-1, got node {show(bad[0])}")
        if n and (min(nodes) != 0 or max(nodes) != n - 1):
            raise ValueError(
                f"graph nodes must be the integers 0..{n - 1}, got nodes in "
                f"[{min(nodes)}, {max(nodes)}]"
            )
        if attribute is None:
            m = graph.number_of_edges()
            pairs = np.fromiter(
                (x for edge in graph.edges() for x in edge[:2]), dtype=np.int64, count=2 * m
            )
            src, dst, values = pairs[0::2], pairs[1::2], None
        else:
            triples = [t for t in graph.edges(data=attribute, default=None) if t[0] != t[1]]
            missing = next((t for t in triples if t[2] is None), None)
            if missing is not None:
                raise ValueError(
                    f"weights: edge ({missing[0]}, {missing[1]}) has no attribute {attribute!r}"
                )
            src = np.array([t[0] for t in triples], dtype=np.int64)
            dst = np.array([t[1] for t in triples], dtype=np.int64)
            values = as_real_array([t[2] for t in triples], f"weights (attribute {attribute!r})")
    elif isinstance(graph, (sp.sparray, sp.spmatrix, np.ndarray)):
        if attribute is not None:
            raise TypeError(
                f"weights may name an edge attribute only for a networkx graph; graph is a "
                f"{type(graph).__name__}, so give weights as an array aligned with edge_list "
                f"(got {attribute!r})"
            )
        if graph.dtype.kind not in "biuf":
            raise TypeError(f"graph must hold real numbers or booleans, got dtype {graph.dtype}")
        if graph.ndim != 2 or graph.shape[0] != graph.shape[1]:
            raise ValueError(f"graph must be a square adjacency matrix, got shape {graph.shape}")
        coo = sp.coo_array(graph)
        data = coo.data
        if data.dtype.kind == "f" and not np.isfinite(data).all():
            i = int(np.flatnonzero(~np.isfinite(data))[0])
            raise ValueError(
                f"graph must be finite; entry ({coo.row[i]}, {coo.col[i]}) is {data[i]}"
            )
        keep = data != 0
        n = int(graph.shape[0])
        src = coo.row[keep].astype(np.int64)
        dst = coo.col[keep].astype(np.int64)
        values = None
    else:
        raise TypeError(
            "graph must be a networkx graph or a NumPy/SciPy adjacency matrix, got "
            f"{type(graph).__name__}: {show(graph)}"
        )
    low, high = np.minimum(src, dst), np.maximum(src, dst)
    off = low != high
    keys = low[off] * max(n, 1) + high[off]
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    first = np.ones(keys.size, dtype=bool)
    first[1:] = keys[1:] != keys[:-1]
    unique = keys[first]
    if unique.size == 0:
        raise ValueError(f"graph has no edges (self-loops are ignored); it has {n} nodes")
    edge_list = np.stack([unique // n, unique % n], axis=1)
    weights = None
    if values is not None:
        values = values[off][order]
        group = np.cumsum(first) - 1
        differ = values != values[first][group]
        if differ.any():
            k = int(group[np.flatnonzero(differ)[0]])
            i, j = edge_list[k]
            raise ValueError(
                f"weights: attribute {attribute!r} differs between the copies of edge "
                f"({i}, {j}) (directions or parallel edges); give one value per edge"
            )
        weights = values[first]
    return n, edge_list, weights


def _check_weights(weights, name: str, edge_list: np.ndarray) -> np.ndarray:
    m = edge_list.shape[0]
    w = as_real_array(weights, name, ndim=1, finite=False)
    if w.shape != (m,):
        raise ValueError(f"{name} must have shape ({m},), one per edge of edge_list, got {w.shape}")
    bad = ~(np.isfinite(w) & (w >= 0))
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        i, j = edge_list[k]
        raise ValueError(
            f"{name} must be nonnegative and finite; edge {k} ({i}, {j}) has {float(w[k])!r}"
        )
    if not (w > 0).any():
        raise ValueError(f"{name} must have a positive entry, got all zeros")
    return w


class RandomEdge(_EdgeProcess, ActivationProcess):
    """Randomized pairwise gossip: one random edge of a graph per round (a clock tick).

    Each round activates one undirected edge ``{i, j}`` of ``graph``, independently of the
    past: uniformly, or with probability ``p_e = w_e / Σ w`` for ``weights``. The record's
    ``nodes`` are ``[i, j]``, its ``edges`` both directions ``(i, j), (j, i)``, and its
    ``time`` the tick's time: the sum of i.i.d. ``Exp(rate)`` gaps since time 0. The
    pairwise average over the edge is ``W = I - (e_i - e_j)(e_i - e_j)ᵀ / 2``;
    :meth:`expected_matrix` gives ``E[W]``, whose second largest eigenvalue governs the
    averaging time (Boyd et al., Theorem 3).

    Probabilities (per tick) are ``P(i is an endpoint) = Σ_{e ∋ i} p_e``.

    Args:
        graph: an undirected networkx graph with nodes ``0..n-1``, or a NumPy or SciPy
            ``(n, n)`` adjacency matrix (its nonzero pattern; the values are not weights).
            Self-loops are ignored; a directed graph (or an asymmetric matrix) counts by its
            underlying undirected edges, parallel edges once.
        weights: ``None`` (uniform), a vector of nonnegative weights aligned with
            :attr:`edge_list`, or the name of a networkx edge attribute (every edge must
            have it, and the same value on every copy of an edge: both directions of a
            directed graph, parallel edges).
        rate: the rate of the ticks; default ``n``, as if every node's clock ticked at rate
            1 (Boyd's model; see :meth:`boyd`).
        mixing: the matrix a decentralized method mixes with in a round: ``"pairwise"``
            averaging over the activated edges (default), or ``"weights"``, the method's
            own W_k on them (the rest of each row on its diagonal).

    Attributes:
        edge_list: the undirected edges, int64 of shape ``(m, 2)`` with ``i < j``, sorted.
        edge_probabilities: ``p_e`` for each edge of :attr:`edge_list`, shape ``(m,)``.

    References:
        S. Boyd, A. Ghosh, B. Prabhakar, D. Shah, "Randomized gossip algorithms", IEEE
        Transactions on Information Theory 52(6):2508–2530, 2006.
    """

    def __init__(
        self,
        graph,
        weights: Real[np.ndarray, " m"] | Sequence[float] | str | None = None,
        rate: FloatLike | None = None,
        mixing: str = "pairwise",
    ):
        self.mixing = choice(mixing, "mixing", MIXINGS)
        attribute = weights if isinstance(weights, str) else None
        n, edge_list, values = _graph_edges(graph, attribute)
        self.n_clients = n
        self.edge_list = _readonly(edge_list)
        self._law = "uniform"
        if attribute is not None:
            assert values is not None
            w = _check_weights(values, f"weights (attribute {attribute!r})", edge_list)
            self._law = repr(attribute)
        elif weights is not None:
            w = _check_weights(weights, "weights", edge_list).copy()
            self._law = _show_vector(w)
        else:
            w = np.ones(edge_list.shape[0])
        self._set_weights(w)
        self.rate = float(n) if rate is None else as_float(rate, "rate", positive=True)
        if self.rate < 1.0 / np.finfo(float).max:
            raise ValueError(f"rate must be at least 1 / (largest float), got {self.rate!r}")

    def _set_weights(self, w: np.ndarray) -> None:
        self.weights = None if self._law == "uniform" else _readonly(w)
        self.edge_probabilities = _readonly(w / w.sum())
        self._cdf = _cdf(w)

    @classmethod
    def boyd(cls, graph, rate: FloatLike | None = None) -> RandomEdge:
        """Boyd et al.'s natural gossip: a node wakes (each at rate 1) and averages with a
        neighbour chosen uniformly.

        The edge ``{i, j}`` is then activated with probability proportional to
        ``1 / deg_i + 1 / deg_j`` (``(1/n)(1/deg_i + 1/deg_j)`` without isolated nodes).

        Args:
            graph: as for :class:`RandomEdge`.
            rate: the rate of the edge ticks; default the number of nodes with a neighbour
                (n for a graph without isolated nodes), as the ticks of an isolated node
                activate no edge.
        """
        process = cls(graph)
        degree = np.bincount(process.edge_list.ravel(), minlength=process.n_clients)
        w = (1.0 / degree[process.edge_list]).sum(axis=1)
        process._law = "boyd"
        process._set_weights(w)
        default = float(np.count_nonzero(degree))
        process.rate = default if rate is None else as_float(rate, "rate", positive=True)
        return process

    @property
    def probabilities(self) -> Float[np.ndarray, " n"]:
        """``P(node i is an endpoint of the tick's edge)``, shape ``(n,)``."""
        p = np.repeat(self.edge_probabilities, 2)
        return np.bincount(self.edge_list.ravel(), weights=p, minlength=self.n_clients)

    def expected_matrix(self) -> sp.csr_array:
        """``E[W]`` for the pairwise average ``W = I - (e_i - e_j)(e_i - e_j)ᵀ / 2`` over
        the tick's edge: ``I - L / 2`` with ``L`` the Laplacian of the edge probabilities.

        Returns:
            A symmetric doubly stochastic ``(n, n)`` CSR array: ``p_e / 2`` at ``(i, j)``
            and ``(j, i)`` for every edge, ``1 - P(i is an endpoint) / 2`` on the diagonal.
        """
        n, (i, j) = self.n_clients, self.edge_list.T
        half = self.edge_probabilities / 2
        nodes = np.arange(n, dtype=np.int64)
        rows = np.concatenate([i, j, nodes])
        cols = np.concatenate([j, i, nodes])
        values = np.concatenate([half, half, 1.0 - self.probabilities / 2])
        return sp.csr_array(sp.coo_array((values, (rows, cols)), shape=(n, n)))

    def _activation_stream(self, rng: np.random.Generator) -> Iterator[Activation]:
        return ActivationStream(self._blocks(rng))

    def _blocks(self, rng: np.random.Generator) -> Iterator[tuple]:
        pairs, cdf = self.edge_list, self._cdf
        both = np.stack([pairs, pairs[:, ::-1]], axis=1)  # (m, 2, 2): (i, j) then (j, i)
        m = pairs.shape[0]
        for times in _ticks(rng, self.rate):
            chosen = _choose(rng, cdf, m)
            yield _readonly(pairs[chosen]), _readonly(both[chosen]), _readonly(times)

    def _fields(self):
        return {
            "n_nodes": self.n_clients,
            "edges": self.edge_list.shape[0],
            "weights": self._law,
            "rate": f"{self.rate:g}",
            **_mixing_field(self),
        }


def _both_directions(pairs: np.ndarray) -> np.ndarray:
    """``(i, j)`` and ``(j, i)`` for each row of ``pairs``, interleaved, read-only."""
    out = np.empty((2 * pairs.shape[0], 2), dtype=np.int64)
    out[0::2] = pairs
    out[1::2] = pairs[:, ::-1]
    return _readonly(out)


def _greedy_matching(
    rank: np.ndarray, u: np.ndarray, v: np.ndarray, work: tuple[np.ndarray, np.ndarray]
) -> np.ndarray:
    """The sorted indices of the edges ``(u[e], v[e])`` that greedy matching takes when it
    scans them by increasing ``rank`` (distinct ranks in ``[0, m)``), vectorized.

    Each pass takes every remaining edge whose rank is the smallest among the remaining
    edges at both its endpoints (greedy would take it: every edge before it that touches it
    is out), then drops the edges touching a matched node; the smallest remaining rank is
    always taken, so the passes end. ``work``: per node, a rank buffer filled with ``m`` and
    a bool buffer of True, both left as found.
    """
    first, free = work
    m = rank.size
    alive = np.arange(m, dtype=np.int64)
    taken = []
    while alive.size:
        a, b, r = u[alive], v[alive], rank[alive]
        np.minimum.at(first, a, r)
        np.minimum.at(first, b, r)
        wins = alive[(first[a] == r) & (first[b] == r)]
        first[a] = m
        first[b] = m
        taken.append(wins)
        free[u[wins]] = False
        free[v[wins]] = False
        alive = alive[free[a] & free[b]]
    chosen = np.sort(np.concatenate(taken)) if taken else alive
    free[u[chosen]] = True
    free[v[chosen]] = True
    return chosen


class RandomMatching(_EdgeProcess, ActivationProcess):
    """A random maximal matching of a graph per round, independently across rounds.

    Each round the edges are put in a uniformly random order and taken greedily: an edge
    joins the matching when neither endpoint is matched yet. The result is maximal (every
    edge of the graph has a matched endpoint). It is drawn vectorized with the same law: in
    each pass every remaining edge that comes first, in the random order, among the
    remaining edges at both its endpoints joins, and the edges touching a matched node
    drop out (the greedy matching of that order; a number of passes logarithmic in m with
    high probability).

    The record's ``nodes`` are the matched nodes, its ``edges`` both directions of every
    matched edge (``(i, j)`` then ``(j, i)``, the pairs ``i < j`` in the order of
    :attr:`edge_list`), and its ``time`` ``None``. Probabilities are ``None`` (no closed
    form); use :meth:`estimate_probabilities`.

    Args:
        graph: as for :class:`RandomEdge`.
        mixing: as for :class:`RandomEdge`.

    Attributes:
        edge_list: the undirected edges, int64 of shape ``(m, 2)`` with ``i < j``, sorted.
    """

    def __init__(self, graph, mixing: str = "pairwise"):
        self.mixing = choice(mixing, "mixing", MIXINGS)
        n, edge_list, _ = _graph_edges(graph, None)
        self.n_clients = n
        self.edge_list = _readonly(edge_list)

    def _activation_stream(self, rng: np.random.Generator) -> Iterator[Activation]:
        n, pairs = self.n_clients, self.edge_list
        m = pairs.shape[0]
        u, v = pairs[:, 0].copy(), pairs[:, 1].copy()
        work = (np.full(n, m, dtype=np.int64), np.ones(n, dtype=bool))
        while True:
            # rank[e]: the place of edge e in a uniformly random order
            matched = pairs[_greedy_matching(rng.permutation(m), u, v, work)]
            yield _activation(_readonly(np.sort(matched.ravel())), _both_directions(matched), None)

    def _fields(self):
        return {"n_nodes": self.n_clients, "edges": self.edge_list.shape[0], **_mixing_field(self)}


class OnePeerPermutation(_EdgeProcess, ActivationProcess):
    """One-peer random gossip: each round a uniformly random permutation σ of the nodes, and
    node i receives from node σ(i).

    The record's ``edges`` are the pairs ``(σ(i), i)`` for every i with ``σ(i) ≠ i`` (sorted
    by receiver), its ``nodes`` those i (the senders are the same nodes, σ being a
    permutation), and its ``time`` ``None``. Every node receives from exactly one other node,
    or from none when it is a fixed point of σ. Independent across rounds.

    Probabilities are ``P(σ(i) ≠ i) = 1 - 1/n``.

    Args:
        n_nodes: the number of nodes n, at least 2.
        mixing: as for :class:`RandomEdge`.

    References:
        B. Ying, K. Yuan, Y. Chen, H. Hu, P. Pan, W. Yin, "Exponential graph is provably
        efficient for decentralized deep training", NeurIPS 2021 (one-peer topologies, in
        which each node talks to one peer per round).
    """

    def __init__(self, n_nodes: IntLike, mixing: str = "pairwise"):
        self.n_clients = as_int(n_nodes, "n_nodes", minimum=2)
        self.mixing = choice(mixing, "mixing", MIXINGS)

    @property
    def probabilities(self) -> Float[np.ndarray, " n"]:
        """``1 - 1/n`` for every node, shape ``(n,)``."""
        return np.full(self.n_clients, 1.0 - 1.0 / self.n_clients)

    def _activation_stream(self, rng: np.random.Generator) -> Iterator[Activation]:
        n = self.n_clients
        identity = np.arange(n, dtype=np.int64)
        while True:
            sigma = rng.permutation(n)
            moved = np.flatnonzero(sigma != identity).astype(np.int64, copy=False)
            edges = np.stack([sigma[moved], moved], axis=1).astype(np.int64, copy=False)
            yield _activation(_readonly(moved), _readonly(edges), None)

    def _fields(self):
        return {"n_nodes": self.n_clients, **_mixing_field(self)}


def pairwise_matrix(edges: Int[np.ndarray, "e 2"], n_nodes: IntLike) -> sp.csr_array:
    """The pairwise averaging matrix of a round's undirected edges (disjoint pairs):
    ``W = I - Σ (e_i - e_j)(e_i - e_j)ᵀ / 2`` over the pairs ``i < j`` among ``edges``.

    Args:
        edges: an :class:`Activation`'s ``edges`` (both directions of each edge), the edges
            of distinct pairs touching distinct nodes (a matching).
        n_nodes: n.

    Returns:
        A symmetric doubly stochastic ``(n, n)`` CSR array.
    """
    n = as_int(n_nodes, "n_nodes", minimum=1)
    arr = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    pairs = arr[arr[:, 0] < arr[:, 1]]
    i, j = pairs[:, 0], pairs[:, 1]
    diagonal = np.ones(n)
    diagonal[i] = 0.5
    diagonal[j] = 0.5
    nodes = np.arange(n, dtype=np.int64)
    rows = np.concatenate([i, j, nodes])
    cols = np.concatenate([j, i, nodes])
    values = np.concatenate([np.full(2 * i.size, 0.5), diagonal])
    return sp.csr_array(sp.coo_array((values, (rows, cols)), shape=(n, n)))


__all__ = [
    "Activation",
    "ActivationProcess",
    "PoissonClocks",
    "RandomEdge",
    "RandomMatching",
    "OnePeerPermutation",
    "pairwise_matrix",
]

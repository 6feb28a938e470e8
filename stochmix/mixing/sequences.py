"""Time-varying graphs: a sequence ``G_0, G_1, ...`` and its mixing matrices ``W_k``.

A :class:`GraphSequence` gives the graph of step k as an ``nx.DiGraph`` in the library's
convention (edge ``j -> i`` means node i receives from j; an undirected graph is returned
with both directions of each edge) and the matrix of step k under a weight rule:

=================  ==========================================================  ===========
rule               matrix                                                      kind
=================  ==========================================================  ===========
``"natural"``      the graph's own ``weight`` attributes (``graph_to_matrix``)  as drawn
``"metropolis"``   :func:`~stochmix.mixing.weights.metropolis_hastings`         doubly
``"row"``          :func:`~stochmix.mixing.weights.uniform_in_neighbors`        row
``"column"``       :func:`~stochmix.mixing.weights.uniform_out_neighbors`       column
``"fastest"``      :func:`~stochmix.mixing.design.fastest_mixing_weights`       doubly
``"fdla"``         :func:`~stochmix.mixing.design.fdla_weights`                 sums one
=================  ==========================================================  ===========

``"metropolis"``, ``"fastest"`` and ``"fdla"`` need undirected graphs and give symmetric
matrices. ``"fastest"`` (the fastest mixing Markov chain) and ``"fdla"`` (fastest
distributed linear averaging, weights of either sign) minimise the second largest
eigenvalue modulus over the graph's symmetric weights by solving a semidefinite program
(cvxpy, ``pip install "stochmix[analysis]"``; 0.1 s at 20 nodes, seconds at 50): the
caching below solves each distinct graph once.

Periodic sequences (``period`` not ``None``) cache each matrix the first time it is built,
so a long run pays for one period; other sequences keep the last step's matrix per rule.
Matrices are returned as fresh copies (or, with ``matrix(k, rule, copy=False)``, as the
cached read-only matrix itself), graphs as frozen (read-only) networkx graphs. The
built-in sequences build their matrices straight from edge arrays, without networkx, so
they stay fast at 10^5 nodes and more; ``graph(k)`` is there for modelling, drawing and
checking.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import cast

import networkx as nx
import numpy as np
import scipy.sparse as sp
from jaxtyping import Int

from .._lazy import lazy_module
from .._names import GRAPH_ALIASES, renamed
from .._validate import _show, as_bool, as_float, as_int, choice, is_scalar
from .design import fastest_mixing_weights, fdla_weights
from .graphs import _check_nodes, graph_to_matrix
from .weights import _adjacency, metropolis_hastings, uniform_in_neighbors, uniform_out_neighbors

csgraph = lazy_module("scipy.sparse.csgraph")

#: The weight rules of a graph sequence's matrices: ``natural`` (the weights the graph
#: carries), ``metropolis`` (doubly stochastic), ``row`` and ``column`` (uniform over in- or
#: out-neighbours), ``fastest`` (the fastest mixing Markov chain: doubly stochastic) and
#: ``fdla`` (fastest distributed linear averaging: rows and columns sum to one, signed).
RULES = ("natural", "metropolis", "row", "column", "fastest", "fdla")

#: The rules that need an undirected graph (and give symmetric matrices).
UNDIRECTED_RULES = ("metropolis", "fastest", "fdla")

_RULE_FUNCTIONS = {
    "metropolis": metropolis_hastings,
    "row": uniform_in_neighbors,
    "column": uniform_out_neighbors,
    "fastest": fastest_mixing_weights,
    "fdla": fdla_weights,
}


def _frozen_digraph(graph, n_nodes: int | None, name: str) -> tuple[nx.DiGraph, int]:
    """A frozen DiGraph copy of ``graph`` holding every node ``0..n-1``; and n."""
    if isinstance(graph, nx.Graph) and graph.is_multigraph():
        raise TypeError(f"{name} must not be a multigraph; merge parallel edges first")
    n = _check_nodes(graph, n_nodes, name)
    digraph = nx.DiGraph(graph)  # a copy; an undirected edge gives both directions
    digraph.add_nodes_from(range(n))
    return nx.freeze(digraph), n


def _pattern(src: np.ndarray, dst: np.ndarray, n: int) -> sp.csr_array:
    """Binary ``(n, n)`` CSR with entry ``[dst, src]`` for every edge ``src -> dst``."""
    matrix = sp.csr_array((np.ones(src.size), (dst, src)), shape=(n, n))
    matrix.sum_duplicates()
    matrix.data[:] = 1.0
    return matrix


class GraphSequence(ABC):
    """A time-varying graph on the nodes ``0..n_nodes-1``, step ``k = 0, 1, 2, ...``.

    Subclasses implement :attr:`n_nodes` and :meth:`graph`; they may set :attr:`period`
    (matrices are then cached by ``k mod period``) and override ``_structure(k)`` (the
    edges as a graph or a sparse pattern) and ``_natural(k)`` for speed.
    """

    #: ``p`` when ``graph(k)`` equals ``graph(k mod p)`` for all k, else ``None``.
    period: int | None = None

    @property
    @abstractmethod
    def n_nodes(self) -> int:
        """Number of nodes n."""

    @abstractmethod
    def graph(self, k: int) -> nx.DiGraph:
        """The graph of step ``k`` (an ``nx.DiGraph`` on ``0..n-1``; edge j -> i means
        i receives from j). Treat it as read-only."""

    def fingerprint(self) -> str:
        """A digest of what the sequence is: its class and public parameters, and, for a
        periodic sequence, every step's graph (pattern and weights) over one period."""
        from .._fingerprint import digest

        public = {k: v for k, v in vars(self).items() if not k.startswith("_")}
        steps = []
        if self.period is not None:
            for k in range(self.period):
                natural = sp.csr_array(self._natural(k))
                natural.sum_duplicates()  # canonical: sorted, one entry per position
                steps.append((natural.indptr, natural.indices, natural.data))
        return digest(type(self).__module__, type(self).__qualname__, self.n_nodes, public, steps)

    def matrix(self, k: int, rule: str = "row", copy: bool = True) -> sp.csr_array:
        """The ``(n, n)`` mixing matrix ``W_k`` of step ``k`` under ``rule``.

        ``rule``: ``"natural"`` (the graph's ``weight`` attributes, missing = 1),
        ``"metropolis"`` (symmetric doubly stochastic; needs an undirected graph),
        ``"row"`` (uniform over in-neighbours and self: row-stochastic), ``"column"``
        (uniform over out-neighbours and self: column-stochastic), ``"fastest"`` (the
        fastest mixing symmetric Markov chain: doubly stochastic, the smallest SLEM
        among them; an SDP, needs an undirected graph and cvxpy) or ``"fdla"`` (fastest
        distributed linear averaging: symmetric, rows summing to one, weights of either
        sign, a SLEM at most "fastest"'s; the same).

        ``copy=False`` returns the sequence's own cached matrix, read-only (its arrays are
        not writeable) and the same object every time it is asked for: for a periodic
        sequence one matrix per ``(k mod period, rule)``, built once; otherwise the matrix
        of the last step asked for under each rule. The engine uses it to plan a mixing
        phase once per distinct matrix; ``copy=True`` (the default) gives a fresh copy.
        """
        k = as_int(k, "k", minimum=0)
        rule = choice(rule, "rule", RULES)
        matrix = self._cached(k, rule)
        return matrix.copy() if copy else matrix

    def _cached(self, k: int, rule: str) -> sp.csr_array:
        """The read-only cached matrix of step ``k`` (checked arguments)."""
        period = self.period
        cache = self.__dict__.setdefault("_matrix_cache", {})
        key = (k % period, rule) if period is not None else ("last", rule)
        found = cache.get(key)
        if period is None and found is not None and found[0] != k:
            found = None
        if found is None:
            matrix = sp.csr_array(self._build(k % period if period else k, rule))
            for array in (matrix.data, matrix.indices, matrix.indptr):
                array.flags.writeable = False
            found = cache[key] = (k, matrix)
        return found[1]

    def guarantees(self, rule: str) -> frozenset:
        """What every matrix of the sequence under ``rule`` is by construction, so that a
        method need not check it (:attr:`~stochmix.algorithms.DecentralizedMethod.needs`):
        a subset of ``{"row", "column", "doubly", "connected"}`` ("connected": the graph of
        each step, or for a periodic sequence the union over each period, is strongly
        connected). Here: ``"metropolis"`` gives doubly stochastic matrices, ``"row"``
        row- and ``"column"`` column-stochastic ones, whatever the graphs; nothing else is
        promised (natural weights are the graph's, "fastest" and "fdla" an SDP's to its
        tolerance). A family that knows more says so (:class:`DirectedRingSequence`); a
        subclass that builds its matrices its own way (overriding ``matrix`` or
        ``_build``) promises nothing unless it says so too."""
        own = type(self)
        if own.matrix is not GraphSequence.matrix or own._build is not GraphSequence._build:
            return frozenset()
        return BY_RULE.get(rule, frozenset())

    def _build(self, k: int, rule: str) -> sp.csr_array:
        if rule == "natural":
            return self._natural(k)
        try:
            return _RULE_FUNCTIONS[rule](self._structure(k), self.n_nodes)
        except ValueError as error:
            raise ValueError(f"step {k}, rule={rule!r}: {error}") from None

    def _structure(self, k: int) -> nx.Graph | sp.csr_array:
        return self.graph(k)

    def _natural(self, k: int) -> sp.csr_array:
        return graph_to_matrix(self.graph(k), self.n_nodes)

    def adjacency(self, k: int) -> sp.csr_array:
        """The ``(n, n)`` binary pattern of step ``k``: entry ``[i, j] = 1`` for each edge
        ``j -> i`` with ``i != j`` (self-loops and weights dropped)."""
        k = as_int(k, "k", minimum=0)
        return _adjacency(self._structure(k), self.n_nodes)


#: What each weight rule makes of any graph (see :meth:`GraphSequence.guarantees`).
BY_RULE = {
    "metropolis": frozenset({"row", "column", "doubly"}),
    "row": frozenset({"row"}),
    "column": frozenset({"column"}),
}


class StaticSequence(GraphSequence):
    """The same graph at every step.

    Args:
        graph: ``nx.Graph`` (stored with both directions) or ``nx.DiGraph`` on ``0..n-1``.
        n_nodes: n, when some nodes are absent from ``graph``.
    """

    period = 1

    def __init__(self, graph: nx.Graph, n_nodes: int | None = None):
        self._graph, self._n = _frozen_digraph(graph, n_nodes, "graph")

    @property
    def n_nodes(self) -> int:
        """Number of nodes n."""
        return self._n

    def graph(self, k: int) -> nx.DiGraph:
        """The one graph (frozen), whatever ``k >= 0``."""
        as_int(k, "k", minimum=0)
        return self._graph


class PeriodicSequence(GraphSequence):
    """Cycle through a list of graphs: step ``k`` uses ``graphs[k mod len(graphs)]``.

    Args:
        graphs: non-empty list of ``nx.Graph``/``nx.DiGraph``, all on ``0..n-1``.
        n_nodes: n; by default the number of nodes of the first graph.
    """

    period: int  # the number of graphs

    def __init__(self, graphs: Sequence[nx.Graph], n_nodes: int | None = None):
        if isinstance(graphs, nx.Graph) or is_scalar(graphs):
            raise TypeError(f"graphs must be a list of networkx graphs, got {_show(graphs)}")
        graphs = list(graphs)
        if not graphs:
            raise ValueError("graphs must hold at least one graph, got []")
        if n_nodes is None:
            n_nodes = _check_nodes(graphs[0], None, "graphs[0]")
        n_nodes = as_int(n_nodes, "n_nodes", minimum=1)
        stored = [_frozen_digraph(g, n_nodes, f"graphs[{t}]")[0] for t, g in enumerate(graphs)]
        self._graphs, self._n = stored, n_nodes
        self.period = len(stored)

    @property
    def n_nodes(self) -> int:
        """Number of nodes n."""
        return self._n

    def graph(self, k: int) -> nx.DiGraph:
        """``graphs[k mod period]`` (frozen)."""
        k = as_int(k, "k", minimum=0)
        return self._graphs[k % self.period]


class DirectedRingSequence(GraphSequence):
    """Directed circulant one-peer graphs: at step k every node i sends to ``i + s_k``.

    ``s_k = shifts[k mod len(shifts)]`` (mod n). The graph carries its natural weights,
    1/2 on each self-loop and 1/2 on each edge ``i -> (i + s_k) mod n``, so
    ``matrix(k, "natural")`` is ``(I + P_k) / 2`` with P_k a permutation: doubly stochastic
    (and so are the "row" and "column" rules, which give the same matrix). A shift that is
    0 mod n gives the identity (weight-1 self-loops). With ``shifts=(1,)`` this is the static
    directed ring, strongly connected but not symmetric (no "metropolis"); irregular
    directed graphs, where "row" and "column" differ, come from
    ``RandomSequence(kind="random_directed")``.

    Args:
        n_nodes: n >= 1.
        shifts: non-empty sequence of integer shifts; the period is its length.
    """

    period: int  # the number of shifts

    def __init__(self, n_nodes: int, shifts: Sequence[int] = (1,)):
        self._n = as_int(n_nodes, "n_nodes", minimum=1)
        if is_scalar(shifts):
            raise TypeError(f"shifts must be a sequence of integer shifts, got {_show(shifts)}")
        shifts = [as_int(s, f"shifts[{t}]") for t, s in enumerate(shifts)]
        if not shifts:
            raise ValueError("shifts must hold at least one shift, got []")
        self.shifts = tuple(shifts)
        self.period = len(shifts)

    @property
    def n_nodes(self) -> int:
        """Number of nodes n."""
        return self._n

    def shift(self, k: int) -> int:
        """The shift ``s_k mod n`` of step ``k`` (0 means no edge)."""
        k = as_int(k, "k", minimum=0)
        return self.shifts[k % self.period] % self._n

    def _heads(self, k: int) -> np.ndarray:
        return (np.arange(self._n) + self.shift(k)) % self._n

    def guarantees(self, rule: str) -> frozenset:
        """Doubly stochastic under "natural", "row" and "column" (1/2 on the self-loop and
        1/2 on the one edge, or the identity); "connected" over each period when the
        shifts and n have no common divisor but 1 (the shifts then generate every node
        from every node)."""
        if rule not in ("natural", "row", "column"):
            return super().guarantees(rule)
        made = {"row", "column", "doubly"}
        if math.gcd(self._n, *self.shifts) == 1:
            made.add("connected")
        return frozenset(made)

    def graph(self, k: int) -> nx.DiGraph:
        """Self-loops (weight 1/2) and edges ``i -> (i + s_k) mod n`` (weight 1/2)."""
        s = self.shift(k)
        graph = nx.DiGraph()
        graph.add_nodes_from(range(self._n))
        if s == 0:
            graph.add_edges_from(((i, i) for i in range(self._n)), weight=1.0)
        else:
            graph.add_edges_from(((i, i) for i in range(self._n)), weight=0.5)
            graph.add_edges_from(
                zip(range(self._n), self._heads(k).tolist(), strict=True), weight=0.5
            )
        return nx.freeze(graph)

    def _structure(self, k: int) -> sp.csr_array:
        tails = np.arange(self._n)
        return _pattern(tails, self._heads(k), self._n)

    def _natural(self, k: int) -> sp.csr_array:
        if self.shift(k) == 0:
            return sp.eye_array(self._n, format="csr")
        tails = np.arange(self._n)
        heads = self._heads(k)
        matrix = sp.csr_array(
            (np.full(2 * self._n, 0.5), (np.concatenate([tails, heads]), np.tile(tails, 2))),
            shape=(self._n, self._n),
        )
        matrix.sum_duplicates()
        matrix.sort_indices()
        return matrix


class OnePeerExponential(DirectedRingSequence):
    """The one-peer exponential graph (Ying et al., 2021).

    With ``tau = ceil(log2 n)`` (at least 1), at step k each node i receives from the single
    peer ``(i + 2^(k mod tau)) mod n``: edge ``(i + 2^m) mod n -> i``, ``m = k mod tau``.
    The natural weights (``rule="natural"``, also the graph's ``weight`` attributes) are
    1/2 on the self-loop and 1/2 on the edge: ``W_k[i, i] = W_k[i, (i + 2^m) mod n] = 1/2``,
    doubly stochastic. When n is a power of 2, ``W_{tau-1} ... W_1 W_0 = (1/n) 1 1^T``
    exactly. Period tau; ``"row"`` and ``"column"`` give the same matrices.

    Args:
        n_nodes: n >= 1.
    """

    def __init__(self, n_nodes: int):
        n = as_int(n_nodes, "n_nodes", minimum=1)
        self.tau = max(1, (n - 1).bit_length())
        super().__init__(n, shifts=[-(2**m) for m in range(self.tau)])


_KINDS = ("erdos_renyi", "random_directed")


class RandomSequence(GraphSequence):
    """Independent random graphs, graph k reproducible from ``(seed, k)`` alone.

    Step k draws from ``np.random.default_rng([seed, k])``, so any step can be asked for in
    any order and gives the same graph.

    Kinds:
        ``"erdos_renyi"``: undirected G(n, p), each of the ``n(n-1)/2`` pairs present
            independently with probability p (sampled as a Binomial count of distinct pairs,
            O(n + edges)); returned with both directions. With ``connected=True`` a
            disconnected draw is patched by chaining its components: one random member of
            each, in random order, linked by an edge (a tree over the components, the
            fewest edges that connect it).
        ``"random_directed"``: the directed ring ``i -> i+1 mod n`` plus each
            other ordered pair ``j -> i`` independently with probability p. The ring makes
            every graph strongly connected (``connected`` has nothing to add), and in- and
            out-degrees differ, so "row" and "column" rules give different matrices.

    Args:
        n_nodes: n >= 1.
        kind: one of the kinds above (the same names as ``[graphs]`` kinds and
            ``stochmix spectrum --graph``; the old ``"random_directed"`` is
            accepted with a DeprecationWarning for one release).
        p: edge probability in [0, 1]; default ``min(1, 2 ln(n) / n)`` (about twice the
            connectivity threshold of G(n, p)).
        seed: nonnegative int; ``None`` draws fresh entropy once (kept in ``self.seed``).
        connected: for ``"erdos_renyi"``, patch every draw to be connected.
    """

    period = None

    def __init__(
        self,
        n_nodes: int,
        kind: str = "erdos_renyi",
        p: float | None = None,
        seed: int | None = None,
        connected: bool = True,
    ):
        self._n = as_int(n_nodes, "n_nodes", minimum=1)
        self.kind = choice(renamed(kind, "kind", GRAPH_ALIASES), "kind", _KINDS)
        if p is None:
            p = min(1.0, 2.0 * math.log(self._n) / self._n) if self._n > 1 else 0.0
        self.p = as_float(p, "p", nonnegative=True, maximum=1.0)
        if seed is None:
            seed = int(cast(int, np.random.SeedSequence().entropy))  # fresh: one int
        self.seed = as_int(seed, "seed", minimum=0)
        self.connected = as_bool(connected, "connected")
        self._last: tuple[int, np.ndarray, np.ndarray] | None = None

    @property
    def n_nodes(self) -> int:
        """Number of nodes n."""
        return self._n

    def rng(self, k: int) -> np.random.Generator:
        """The generator of step ``k``: ``default_rng([seed, k])``."""
        k = as_int(k, "k", minimum=0)
        return np.random.default_rng([self.seed, k])

    def edges(self, k: int) -> tuple[Int[np.ndarray, " m"], Int[np.ndarray, " m"]]:
        """``(src, dst)``: the edges ``src -> dst`` of step ``k`` as int64 arrays (an
        undirected edge appears in both directions)."""
        k = as_int(k, "k", minimum=0)
        if self._last is not None and self._last[0] == k:
            return self._last[1], self._last[2]
        rng = self.rng(k)
        n = self._n
        if self.kind == "erdos_renyi":
            src, dst = _erdos_renyi_pairs(n, self.p, rng)
            if self.connected and n > 1:
                extra_src, extra_dst = _chain_components(src, dst, n, rng)
                src, dst = np.concatenate([src, extra_src]), np.concatenate([dst, extra_dst])
            src, dst = np.concatenate([src, dst]), np.concatenate([dst, src])
        else:
            src, dst = _random_ordered_pairs(n, self.p, rng)
            if n > 1:
                ring = np.arange(n)
                src = np.concatenate([ring, src])
                dst = np.concatenate([(ring + 1) % n, dst])
            keep = np.unique(src * n + dst)  # the ring may repeat a random edge
            src, dst = keep // n, keep % n
        self._last = (k, src, dst)
        return src, dst

    def graph(self, k: int) -> nx.DiGraph:
        """The graph of step ``k`` (no ``weight`` attributes, nodes ``0..n-1``)."""
        src, dst = self.edges(k)
        graph = nx.DiGraph()
        graph.add_nodes_from(range(self._n))
        graph.add_edges_from(zip(src.tolist(), dst.tolist(), strict=True))
        return nx.freeze(graph)

    def _structure(self, k: int) -> sp.csr_array:
        src, dst = self.edges(k)
        return _pattern(src, dst, self._n)

    def _natural(self, k: int) -> sp.csr_array:
        matrix = self._structure(k)
        matrix.sort_indices()
        return matrix


def _erdos_renyi_pairs(n: int, p: float, rng: np.random.Generator):
    """Undirected G(n, p) edges ``(i, j)``, ``i < j``."""
    pairs = n * (n - 1) // 2
    count = int(rng.binomial(pairs, p)) if pairs else 0
    index = rng.choice(pairs, size=count, replace=False) if count else np.zeros(0, np.int64)
    index = np.asarray(index, dtype=np.int64)
    rows = np.arange(n, dtype=np.int64)
    starts = rows * (2 * n - rows - 1) // 2  # pairs (i, .) start at starts[i]
    i = np.searchsorted(starts, index, side="right") - 1
    j = i + 1 + (index - starts[i])
    return i, j


def _random_ordered_pairs(n: int, p: float, rng: np.random.Generator):
    """Each ordered pair ``j -> i`` (``i != j``) independently with probability p."""
    pairs = n * (n - 1)
    count = int(rng.binomial(pairs, p)) if pairs else 0
    index = rng.choice(pairs, size=count, replace=False) if count else np.zeros(0, np.int64)
    index = np.asarray(index, dtype=np.int64)
    src = index // max(n - 1, 1)
    rest = index % max(n - 1, 1)
    dst = rest + (rest >= src)
    return src, dst


def _chain_components(src: np.ndarray, dst: np.ndarray, n: int, rng: np.random.Generator):
    """Edges linking the components of an undirected graph in a random chain."""
    count, labels = csgraph.connected_components(_pattern(src, dst, n), directed=False)
    if count == 1:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = rng.permutation(n)
    _, first = np.unique(labels[order], return_index=True)
    members = order[first]  # one uniformly random member per component
    members = members[rng.permutation(count)]
    return members[:-1], members[1:]


def is_strongly_connected_union(seq: GraphSequence, start: int, length: int) -> bool:
    """Is the union of the graphs of steps ``start, ..., start + length - 1`` strongly
    connected? (The usual B-connectivity condition of time-varying mixing.)

    Self-loops and edge weights do not matter; a single node is strongly connected.
    """
    if not isinstance(seq, GraphSequence):
        raise TypeError(f"seq must be a GraphSequence, got {type(seq).__name__}: {_show(seq)}")
    start = as_int(start, "start", minimum=0)
    length = as_int(length, "length", minimum=1)
    union = seq.adjacency(start)
    for k in range(start + 1, start + length):
        union = union + seq.adjacency(k)
    count, _ = csgraph.connected_components(union, directed=True, connection="strong")
    return count == 1


__all__ = [
    "BY_RULE",
    "RULES",
    "UNDIRECTED_RULES",
    "DirectedRingSequence",
    "GraphSequence",
    "OnePeerExponential",
    "PeriodicSequence",
    "RandomSequence",
    "StaticSequence",
    "is_strongly_connected_union",
]

"""Activation processes: Poisson clocks, random edges, random matchings, one-peer permutations."""

from __future__ import annotations

import itertools

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from stochmix.participation import (
    Activation,
    Bernoulli,
    Full,
    OnePeerPermutation,
    PoissonClocks,
    RandomEdge,
    RandomMatching,
    UniformSample,
)
from stochmix.participation.activation import (
    ActivationProcess,
    _greedy_matching,
    pairwise_matrix,
)

BAD = (ValueError, TypeError)
TICKS = 20_000


def take(stream, count):
    return list(itertools.islice(stream, count))


def within_standard_errors(freq, p, rounds, limit=4.0):
    """|freq - p| within ``limit`` standard errors of a mean of ``rounds`` Bernoulli(p)."""
    se = np.sqrt(np.maximum(p * (1 - p), 1e-12) / rounds)
    worst = float(np.max(np.abs(freq - p) / se))
    assert worst < limit, f"frequencies off by {worst:.1f} standard errors"


def graph_with_isolated_node():
    g = nx.Graph()
    g.add_nodes_from(range(7))
    g.add_edges_from([(0, 1), (1, 2), (2, 0), (2, 3), (3, 4), (4, 5)])  # node 6 isolated
    return g


def processes():
    rng = np.random.default_rng(5)
    petersen = nx.petersen_graph()
    return [
        PoissonClocks(rng.uniform(0.5, 3.0, 8)),
        PoissonClocks(2.0, n_nodes=5),
        RandomEdge(petersen),
        RandomEdge(petersen, weights=rng.random(15) + 0.1),
        RandomEdge.boyd(nx.star_graph(5)),
        RandomMatching(petersen),
        RandomMatching(graph_with_isolated_node()),
        OnePeerPermutation(6),
    ]


PROCESSES = processes()
IDS = [repr(p) for p in PROCESSES]


# --------------------------------------------------------------------------- the record


def test_activation_record_is_frozen_read_only_and_compares_by_value():
    nodes = np.array([1, 4])
    record = Activation(nodes, np.array([[1, 4], [4, 1]]), 2)
    assert record.nodes.dtype == np.int64 and record.edges is not None
    assert not record.nodes.flags.writeable and not record.edges.flags.writeable
    assert nodes.flags.writeable  # the caller's array was copied, not frozen
    assert record.time == 2.0 and isinstance(record.time, float)
    assert record == Activation(np.array([1, 4]), np.array([[1, 4], [4, 1]]), 2.0)
    assert record != Activation(np.array([1, 4]), None, 2.0)
    assert record != Activation(np.array([1, 4]), np.array([[1, 4], [4, 1]]), 3.0)
    with pytest.raises(AttributeError):
        record.time = 1.0  # type: ignore[misc]
    with pytest.raises(ValueError, match="read-only"):
        record.nodes[0] = 3
    plain = Activation(np.arange(3))
    assert plain.edges is None and plain.time is None


def test_activation_record_refuses_bad_fields(unchecked):
    """Our own checks (the annotations would catch these first in the tests)."""
    with pytest.raises(ValueError, match="edges"):
        Activation(np.array([0, 1]), np.array([[0, 1, 2]]))
    with pytest.raises(TypeError, match="nodes"):
        Activation(np.array([0.5]))
    with pytest.raises(ValueError, match="time"):
        Activation(np.array([0]), None, float("nan"))


def test_every_process_has_activations_with_its_participants():
    for process in (Full(4), UniformSample(10, 3), Bernoulli(0.4, n_clients=9)):
        records = take(process.activations(3), 20)
        indices = take(process.participants(3), 20)
        assert all(r.edges is None and r.time is None for r in records)
        assert all(np.array_equal(r.nodes, i) for r, i in zip(records, indices, strict=True))
        assert all(not r.nodes.flags.writeable for r in records)


# ---------------------------------------------------------------- streams of every kind


@pytest.mark.parametrize("process", PROCESSES, ids=IDS)
def test_streams_are_reproducible_by_seed(process):
    first = take(process.activations(11), 300)
    assert first == take(process.activations(11), 300)
    assert first == take(process.activations(np.random.SeedSequence(11)), 300)
    assert first != take(process.activations(12), 300)


@pytest.mark.parametrize("process", PROCESSES, ids=IDS)
def test_participants_and_masks_are_the_activated_nodes(process):
    assert isinstance(process, ActivationProcess) and process.n_nodes == process.n_clients
    records = take(process.activations(4), 300)
    indices = take(process.participants(4), 300)
    masks = process.sample(300, seed=4)
    for record, index, mask in zip(records, indices, masks, strict=True):
        assert np.array_equal(record.nodes, index)
        assert np.array_equal(np.flatnonzero(mask), record.nodes)
        assert record.nodes.dtype == np.int64 and not record.nodes.flags.writeable
        assert np.all(np.diff(record.nodes) > 0)
        if record.edges is not None:
            assert record.edges.dtype == np.int64 and record.edges.shape[1] == 2
            assert not record.edges.flags.writeable
            assert np.array_equal(np.unique(record.edges), record.nodes)
    assert next(process.masks(0)).flags.writeable  # masks stay the caller's to modify


@pytest.mark.parametrize("process", PROCESSES, ids=IDS)
def test_repr_names_the_class(process):
    text = repr(process)
    assert text.startswith(type(process).__name__ + "(") and "n_nodes=" in text


# ------------------------------------------------------------------------ Poisson clocks


def test_poisson_clock_frequencies_and_gaps():
    rates = np.array([0.5, 1.0, 1.0, 2.0, 4.0, 0.25])
    process = PoissonClocks(rates)
    total = rates.sum()
    assert process.total_rate == pytest.approx(total)
    assert np.allclose(process.probabilities, rates / total)
    records = take(process.activations(21), TICKS)
    assert all(r.nodes.shape == (1,) and r.edges is None for r in records)
    counts = np.bincount([int(r.nodes[0]) for r in records], minlength=rates.size)
    within_standard_errors(counts / TICKS, process.probabilities, TICKS)
    times = np.array([r.time for r in records])
    assert np.all(np.diff(times) > 0) and times[0] > 0
    gaps = np.diff(np.concatenate([[0.0], times]))
    # Exp(Λ) gaps: mean 1/Λ, standard deviation 1/Λ
    assert abs(gaps.mean() - 1 / total) < 4 / (total * np.sqrt(TICKS))
    assert gaps.std() == pytest.approx(1 / total, rel=0.05)
    freq = process.estimate_probabilities(TICKS, seed=22)
    within_standard_errors(freq, process.probabilities, TICKS)


def test_poisson_clocks_with_equal_rates():
    process = PoissonClocks(3, n_nodes=4)
    assert process.total_rate == 12.0
    assert np.allclose(process.probabilities, 0.25)
    times = [r.time for r in take(process.activations(1), TICKS)]
    assert abs(times[-1] / TICKS - 1 / 12) < 4 / (12 * np.sqrt(TICKS))
    within_standard_errors(process.estimate_probabilities(TICKS, seed=2), 0.25, TICKS)
    assert repr(process) == "PoissonClocks(rates=3, n_nodes=4)"


@pytest.mark.parametrize(
    ("args", "name"),
    [
        ((0.0,), "rates"),
        ((-1.0, 3), "rates"),
        ((float("inf"), 3), "rates"),
        (("fast", 3), "rates"),
        (([1.0, 0.0, 2.0],), "rates"),
        (([1.0, -2.0],), "rates"),
        (([1.0, float("nan")],), "rates"),
        (([],), "rates"),
        (([[1.0, 2.0]],), "rates"),
        ((1.0,), "n_nodes"),
        ((1.0, 0), "n_nodes"),
        ((1.0, 2.5), "n_nodes"),
        (([1.0, 2.0], 3), "n_nodes"),
    ],
)
def test_poisson_clocks_refuse_bad_input(args, name):
    with pytest.raises(BAD, match=name):
        PoissonClocks(*args)


# --------------------------------------------------------------------------- random edge


def edge_counts(process, records):
    index = {tuple(edge): k for k, edge in enumerate(process.edge_list.tolist())}
    keys = [index[tuple(r.nodes.tolist())] for r in records]
    return np.bincount(keys, minlength=process.edge_list.shape[0])


def weighted_graph():
    g = nx.cycle_graph(6)
    g.add_edges_from([(0, 3), (1, 4)])
    for k, (i, j) in enumerate(sorted(g.edges())):
        g.edges[i, j]["w"] = 1.0 + k
    return g


RANDOM_EDGES = {
    "uniform": lambda: RandomEdge(nx.petersen_graph()),
    "weighted": lambda: RandomEdge(nx.cycle_graph(7), weights=[1, 2, 3, 0, 1, 5, 2]),
    "attribute": lambda: RandomEdge(weighted_graph(), weights="w", rate=2.5),
    "boyd": lambda: RandomEdge.boyd(graph_with_isolated_node()),
}


@pytest.mark.parametrize("kind", sorted(RANDOM_EDGES))
def test_random_edge_frequencies_and_gaps(kind):
    process = RANDOM_EDGES[kind]()
    records = take(process.activations(31), TICKS)
    for r in records:
        i, j = r.nodes
        assert i < j and np.array_equal(r.edges, [[i, j], [j, i]])
    counts = edge_counts(process, records)
    within_standard_errors(counts / TICKS, process.edge_probabilities, TICKS)
    nodes = np.bincount(np.concatenate([r.nodes for r in records]), minlength=process.n_nodes)
    within_standard_errors(nodes / TICKS, process.probabilities, TICKS)
    freq = process.estimate_probabilities(TICKS, seed=32)
    within_standard_errors(freq, process.probabilities, TICKS)
    times = np.array([r.time for r in records])
    gaps = np.diff(np.concatenate([[0.0], times]))
    assert abs(gaps.mean() - 1 / process.rate) < 4 / (process.rate * np.sqrt(TICKS))


def test_random_edge_laws():
    uniform = RANDOM_EDGES["uniform"]()
    assert uniform.edge_list.shape == (15, 2) and uniform.rate == 10.0
    assert np.allclose(uniform.edge_probabilities, 1 / 15)
    assert np.allclose(uniform.probabilities, 3 / 15)  # 3-regular
    weighted = RANDOM_EDGES["weighted"]()
    w = np.array([1, 2, 3, 0, 1, 5, 2.0])
    assert weighted.edge_list.tolist() == [[0, 1], [0, 6], [1, 2], [2, 3], [3, 4], [4, 5], [5, 6]]
    assert np.allclose(weighted.edge_probabilities, w / w.sum())
    counts = edge_counts(weighted, take(weighted.activations(0), 2000))
    assert counts[3] == 0  # weight zero: never drawn
    attribute = RANDOM_EDGES["attribute"]()
    assert np.allclose(attribute.weights, 1.0 + np.arange(8))
    assert attribute.rate == 2.5
    assert "weights='w'" in repr(attribute)
    boyd = RANDOM_EDGES["boyd"]()
    degree = np.array([2, 2, 3, 2, 2, 1, 0])
    expected = [1 / degree[i] + 1 / degree[j] for i, j in boyd.edge_list]
    assert np.allclose(boyd.edge_probabilities, np.array(expected) / 6)  # six non-isolated
    assert boyd.rate == 6.0  # the ticks of the isolated node activate nothing
    assert boyd.probabilities[6] == 0.0
    regular = RandomEdge.boyd(nx.petersen_graph())
    assert np.allclose(regular.edge_probabilities, 1 / 15) and regular.rate == 10.0
    assert RandomEdge.boyd(nx.petersen_graph(), rate=1).rate == 1.0


def test_random_edge_reads_directed_graphs_and_matrices():
    expected = [[0, 1], [1, 2], [2, 3]]
    digraph = nx.DiGraph([(0, 1), (1, 0), (2, 1), (3, 2), (3, 3)])
    multi = nx.MultiGraph([(0, 1), (0, 1), (1, 2), (2, 3), (1, 1)])
    dense = np.zeros((4, 4))
    dense[0, 1] = dense[2, 1] = dense[2, 3] = 0.5
    dense[3, 3] = 1.0
    for graph in (digraph, multi, dense, dense != 0, sp.csr_array(dense), sp.csr_matrix(dense)):
        process = RandomEdge(graph)
        assert process.edge_list.tolist() == expected, type(graph)
        assert process.n_nodes == 4 and not process.edge_list.flags.writeable
    process = RandomEdge(
        nx.DiGraph([(0, 1, {"w": 2.0}), (1, 0, {"w": 2.0}), (1, 2, {"w": 1})]), "w"
    )
    assert np.allclose(process.edge_probabilities, [2 / 3, 1 / 3])


def test_expected_matrix_is_the_mean_pairwise_average():
    for kind in ("weighted", "boyd"):
        process = RANDOM_EDGES[kind]()
        expected = process.expected_matrix()
        assert isinstance(expected, sp.csr_array)
        dense = expected.toarray()
        n = process.n_nodes
        assert np.allclose(dense, dense.T) and np.all(dense >= 0)
        assert np.allclose(dense.sum(axis=0), 1) and np.allclose(dense.sum(axis=1), 1)
        formula = np.eye(n)
        for (i, j), p in zip(process.edge_list, process.edge_probabilities, strict=True):
            d = np.zeros(n)
            d[i], d[j] = 1, -1
            formula -= p * np.outer(d, d) / 2
        assert np.allclose(dense, formula)
        rounds = TICKS
        total = np.zeros((n, n))
        for record in take(process.activations(41), rounds):
            d = np.zeros(n)
            d[record.edges[0]] = [1.0, -1.0]  # e_i - e_j for the tick's edge (i, j)
            total += np.eye(n) - np.outer(d, d) / 2
        # each entry is a mean of values in [0, 1] with variance <= 1/16
        assert np.abs(total / rounds - dense).max() < 4 * 0.25 / np.sqrt(rounds)


def test_pairwise_matrix_of_a_matching():
    matrix = pairwise_matrix(np.array([[0, 2], [2, 0], [1, 3], [3, 1]]), 5).toarray()
    expected = np.array(
        [
            [0.5, 0, 0.5, 0, 0],
            [0, 0.5, 0, 0.5, 0],
            [0.5, 0, 0.5, 0, 0],
            [0, 0.5, 0, 0.5, 0],
            [0, 0, 0, 0, 1],
        ]
    )
    assert np.array_equal(matrix, expected)


def test_random_edge_refuses_bad_input():
    cases = [
        ((nx.empty_graph(4),), "graph has no edges"),
        ((nx.Graph([(1, 1), (2, 2)]),), "graph"),
        ((np.zeros((3, 3)),), "graph has no edges"),
        ((np.eye(3),), "graph has no edges"),
        ((sp.csr_array((3, 3)),), "graph has no edges"),
        ((np.ones((3, 4)),), "graph"),
        ((np.ones(3),), "graph"),
        ((np.array([[0, np.nan], [1, 0]]),), "graph"),
        ((np.array([["a", "b"], ["c", "d"]]),), "graph"),
        (([[0, 1], [1, 0]],), "graph"),
        ((nx.Graph([("a", "b")]),), "graph"),
        ((nx.path_graph([1, 2, 3]),), "graph"),
        ((nx.path_graph(4), [1.0, 2.0]), "weights"),
        ((nx.path_graph(4), [1.0, -2.0, 1.0]), "weights"),
        ((nx.path_graph(4), [0.0, 0.0, 0.0]), "weights"),
        ((nx.path_graph(4), [1.0, np.inf, 1.0]), "weights"),
        ((nx.path_graph(4), ["a", "b", "c"]), "weights"),
        ((nx.path_graph(4), "w"), "weights"),  # no such attribute
        ((np.ones((3, 3)), "w"), "weights"),  # attributes need a networkx graph
        ((nx.path_graph(4), None, 0.0), "rate"),
        ((nx.path_graph(4), None, -1), "rate"),
        ((nx.path_graph(4), None, "fast"), "rate"),
    ]
    for args, match in cases:
        with pytest.raises(BAD, match=match):
            RandomEdge(*args)
    negative = nx.path_graph(3)
    nx.set_edge_attributes(negative, {(0, 1): 1.0, (1, 2): -1.0}, "w")
    with pytest.raises(ValueError, match="weights"):
        RandomEdge(negative, "w")
    differ = nx.DiGraph([(0, 1, {"w": 1.0}), (1, 0, {"w": 2.0})])
    with pytest.raises(ValueError, match="weights.*differs"):
        RandomEdge(differ, "w")
    with pytest.raises(ValueError, match="graph has no edges"):
        RandomEdge.boyd(nx.empty_graph(3))
    with pytest.raises(ValueError, match="rate"):
        RandomEdge.boyd(nx.path_graph(3), rate=0)


# ------------------------------------------------------------------------ random matching


def check_matching(graph_edges, n, record):
    assert record.time is None and record.edges is not None
    pairs = record.edges[0::2]
    assert np.array_equal(record.edges[1::2], pairs[:, ::-1])
    assert np.all(pairs[:, 0] < pairs[:, 1])
    assert {tuple(p) for p in pairs.tolist()} <= graph_edges  # edges of the graph
    endpoints = pairs.ravel()
    assert np.unique(endpoints).size == endpoints.size  # each node in at most one edge
    matched = np.zeros(n, dtype=bool)
    matched[endpoints] = True
    for i, j in graph_edges:  # maximal: no edge with both endpoints free
        assert matched[i] or matched[j], (i, j)


@pytest.mark.parametrize(
    "graph",
    [
        nx.petersen_graph(),
        graph_with_isolated_node(),
        nx.star_graph(6),
        nx.complete_graph(7),
        nx.gnp_random_graph(40, 0.15, seed=3),
        nx.grid_2d_graph(5, 6),
    ],
    ids=["petersen", "isolated", "star", "complete", "gnp", "grid"],
)
def test_random_matching_is_a_maximal_matching(graph):
    graph = nx.convert_node_labels_to_integers(graph)
    process = RandomMatching(graph)
    edges = {tuple(e) for e in process.edge_list.tolist()}
    for record in take(process.activations(51), 200):
        check_matching(edges, process.n_nodes, record)
    assert process.probabilities is None
    assert repr(process).startswith("RandomMatching(n_nodes=")


def test_the_vectorized_matching_is_greedy_in_rank_order():
    rng = np.random.default_rng(60)
    for trial in range(30):
        graph = nx.gnp_random_graph(25, 0.05 + 0.01 * trial, seed=trial)
        pairs = np.array(sorted(graph.edges()), dtype=np.int64).reshape(-1, 2)
        u, v = pairs[:, 0].copy(), pairs[:, 1].copy()
        rank = rng.permutation(pairs.shape[0])
        work = (np.full(25, pairs.shape[0], dtype=np.int64), np.ones(25, dtype=bool))
        free = np.ones(25, dtype=bool)
        greedy = []
        for e in np.argsort(rank):  # the reference: one edge at a time
            if free[u[e]] and free[v[e]]:
                free[u[e]] = free[v[e]] = False
                greedy.append(e)
        assert _greedy_matching(rank, u, v, work).tolist() == sorted(greedy)
        assert np.all(work[0] == pairs.shape[0]) and np.all(work[1])  # left as found


def test_random_matching_has_the_law_of_greedy_over_a_random_order():
    rounds = 8000
    # path 0-1-2-3: the middle edge alone iff it comes first (1/3), else both ends
    process = RandomMatching(nx.path_graph(4))
    middle = sum(r.edges.shape[0] == 2 for r in take(process.activations(61), rounds))
    within_standard_errors(np.array([middle / rounds]), np.array([1 / 3]), rounds)
    freq = process.estimate_probabilities(rounds, seed=62)
    within_standard_errors(freq, np.array([2 / 3, 1, 1, 2 / 3]), rounds)
    # star: one edge, uniformly
    star = RandomMatching(nx.star_graph(4))
    leaves = [int(r.nodes[1]) for r in take(star.activations(63), rounds)]
    counts = np.bincount(leaves, minlength=5)[1:]
    within_standard_errors(counts / rounds, np.full(4, 0.25), rounds)


def test_random_matching_refuses_graphs_without_edges():
    with pytest.raises(ValueError, match="graph has no edges"):
        RandomMatching(nx.empty_graph(5))
    with pytest.raises(TypeError, match="graph"):
        RandomMatching("ring")


# ----------------------------------------------------------------- one-peer permutation


def test_one_peer_permutation_rounds():
    n = 7
    process = OnePeerPermutation(n)
    assert np.allclose(process.probabilities, 1 - 1 / n)
    for record in take(process.activations(71), 500):
        senders, receivers = record.edges.T
        assert record.time is None
        assert np.array_equal(receivers, record.nodes)  # each receives from one node ...
        assert np.all(senders != receivers)  # ... another one ...
        assert np.array_equal(np.sort(senders), record.nodes)  # ... each sends to one
    freq = process.estimate_probabilities(TICKS, seed=72)
    within_standard_errors(freq, process.probabilities, TICKS)
    assert repr(process) == "OnePeerPermutation(n_nodes=7)"


@pytest.mark.parametrize(("n", "error"), [(1, ValueError), (0, ValueError), (2.5, TypeError)])
def test_one_peer_permutation_refuses_bad_sizes(n, error):
    with pytest.raises(error, match="n_nodes"):
        OnePeerPermutation(n)

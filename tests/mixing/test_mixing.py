"""Tests of stochmix.mixing: graph convention, federated blocks two ways, checks, weight
rules and time-varying graph sequences."""

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from stochmix.mixing import (
    BLOCKS,
    DirectedRingSequence,
    OnePeerExponential,
    PeriodicSequence,
    RandomSequence,
    StaticSequence,
    assign,
    average,
    check_column_stochastic,
    check_columns_sum_to_one,
    check_doubly_stochastic,
    check_row_stochastic,
    check_rows_sum_to_one,
    collect,
    columns_sum_to_one,
    graph_to_matrix,
    is_column_stochastic,
    is_doubly_stochastic,
    is_row_stochastic,
    is_strongly_connected_union,
    local_diagonal,
    matrix_to_graph,
    metropolis_hastings,
    rows_sum_to_one,
    star_graph,
    uniform_in_neighbors,
    uniform_out_neighbors,
)
from tests import examples

FAST = settings(max_examples=examples(40), deadline=None)
BAD_INPUT = (ValueError, TypeError)


def same(A, B) -> bool:
    """Exactly equal sparse matrices (explicit zeros aside)."""
    return A.shape == B.shape and (sp.csr_array(A) != sp.csr_array(B)).nnz == 0


# ---------------------------------------------------------------- graph convention


def test_graph_convention_hand_example():
    graph = nx.DiGraph()
    graph.add_nodes_from(range(3))
    graph.add_edge(0, 2, weight=0.3)  # 0 -> 2: node 2 receives from node 0
    graph.add_edge(1, 1)  # no weight attribute: 1.0
    W = graph_to_matrix(graph)
    assert isinstance(W, sp.csr_array)
    expected = np.array([[0.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.3, 0.0, 0.0]])
    np.testing.assert_array_equal(W.toarray(), expected)
    assert W[2, 0] == 0.3 and W[0, 2] == 0.0
    # networkx's own conversion is the transpose; graph_to_matrix is the one place that flips
    np.testing.assert_array_equal(nx.to_scipy_sparse_array(graph).toarray(), expected.T)
    back = matrix_to_graph(W)
    assert set(back.edges) == {(0, 2), (1, 1)}
    assert back[0][2]["weight"] == 0.3


def test_undirected_graph_gives_both_directions():
    graph = nx.Graph()
    graph.add_nodes_from(range(3))
    graph.add_edge(0, 1, weight=0.5)
    graph.add_edge(2, 2, weight=0.25)
    W = graph_to_matrix(graph).toarray()
    np.testing.assert_array_equal(W, [[0, 0.5, 0], [0.5, 0, 0], [0, 0, 0.25]])


def test_n_nodes_allows_absent_nodes():
    graph = nx.DiGraph([(0, 2)])
    with pytest.raises(ValueError, match="graph"):
        graph_to_matrix(graph)  # nodes {0, 2} are not 0..1
    W = graph_to_matrix(graph, n_nodes=4)
    assert W.shape == (4, 4) and W[2, 0] == 1.0 and W.nnz == 1
    with pytest.raises(ValueError, match="graph"):
        graph_to_matrix(graph, n_nodes=2)


def test_graph_to_matrix_refuses_bad_graphs():
    with pytest.raises(TypeError, match="graph"):
        graph_to_matrix(nx.DiGraph([("a", "b")]))
    with pytest.raises(TypeError, match="graph"):
        graph_to_matrix(nx.DiGraph([(0, 1, {"weight": "0.3"})]))
    with pytest.raises(ValueError, match="graph"):
        graph_to_matrix(nx.DiGraph([(0, 1, {"weight": np.nan})]))
    with pytest.raises(TypeError, match="graph"):
        graph_to_matrix(np.eye(2))


@FAST
@given(n=st.integers(1, 25), density=st.floats(0, 1), seed=st.integers(0, 2**32 - 1))
def test_round_trip(n, density, seed):
    rng = np.random.default_rng(seed)
    W = sp.random_array((n, n), density=density, format="csr", rng=rng)
    W.data -= 0.5  # signed entries survive too
    W.eliminate_zeros()
    graph = matrix_to_graph(W)
    assert sorted(graph.nodes) == list(range(n))
    assert graph.number_of_edges() == W.nnz
    assert same(graph_to_matrix(graph), W)
    # and graph -> matrix -> graph
    again = matrix_to_graph(graph_to_matrix(graph))
    assert set(again.edges) == set(graph.edges)
    for u, v, w in graph.edges(data="weight"):
        assert again[u][v]["weight"] == w


# ---------------------------------------------------------------- federated blocks


def direct(mask, block, weights, server_lr):
    if block == "assign":
        return assign(mask)
    if block == "average":
        return average(mask, weights, server_lr)
    if block == "collect":
        return collect(mask)
    return local_diagonal(mask)


@st.composite
def rounds(draw):
    n = draw(st.integers(0, 30))
    seed = draw(st.integers(0, 2**32 - 1))
    shape = draw(st.sampled_from(["random", "none", "all"]))
    rng = np.random.default_rng(seed)
    if shape == "none":
        mask = np.zeros(n, dtype=bool)
    elif shape == "all":
        mask = np.ones(n, dtype=bool)
    else:
        mask = rng.random(n) < rng.random()
    weights = rng.random(n) * draw(st.sampled_from([0.0, 0.1, 1.0]))
    if draw(st.booleans()) and mask.any():
        weights[mask] /= weights[mask].sum() or 1.0  # q over S summing to one
    server_lr = draw(st.sampled_from([1.0, 0.5, 1.5, 3.0]))
    return mask, weights, server_lr


@FAST
@given(case=rounds())
def test_two_routes_agree_and_claims_hold(case):
    mask, weights, server_lr = case
    n = mask.size
    for block in BLOCKS:
        kwargs = {"weights": weights, "server_lr": server_lr} if block == "average" else {}
        graph = star_graph(mask, block, **kwargs)
        assert sorted(graph.nodes) == list(range(n + 1))
        W = graph_to_matrix(graph)
        D = direct(mask, block, weights, server_lr)
        assert same(W, D), block
        if block == "assign":
            assert is_row_stochastic(W)
            check_row_stochastic(D, name="A_S")
        elif block == "collect":
            assert is_column_stochastic(W)
            check_column_stochastic(D, name="C_S")
        elif block == "average":
            assert rows_sum_to_one(W)
            total = server_lr * weights[mask].sum()
            if total <= 1:
                assert is_row_stochastic(W)
            elif total > 1 + 1e-9:
                assert not is_row_stochastic(W)  # the server's own entry is negative
                assert W[0, 0] < 0
        else:
            dense = W.toarray()
            np.testing.assert_array_equal(dense, np.diag(np.concatenate([[0.0], mask])))


def test_star_graph_shapes_of_the_star():
    mask = np.array([True, False, True])
    assert set(star_graph(mask, "assign").edges) == {(0, 0), (0, 1), (2, 2), (0, 3)}
    assert set(star_graph(mask, "collect").edges) == {(0, 0), (1, 0), (2, 2), (3, 0)}
    assert set(star_graph(mask, "local_diagonal").edges) == {(1, 1), (3, 3)}
    graph = star_graph(mask, "average", weights=np.array([0.25, 9.0, 0.5]), server_lr=2.0)
    assert graph[1][0]["weight"] == 0.5 and graph[3][0]["weight"] == 1.0
    assert graph[0][0]["weight"] == -0.5
    assert all(graph[i][i]["weight"] == 1.0 for i in (1, 2, 3))


@pytest.mark.parametrize("route", ["direct", "star"])
def test_builders_refuse_bad_input(route):
    mask = np.array([True, False, True])
    q = np.array([0.2, 0.3, 0.5])

    def build(mask, weights, server_lr=1.0):
        if route == "direct":
            return average(mask, weights, server_lr)
        return star_graph(mask, "average", weights=weights, server_lr=server_lr)

    with pytest.raises(BAD_INPUT, match="weights"):
        build(mask, np.array([0.5, 0.5]))  # mask and weights differ in length
    with pytest.raises(BAD_INPUT, match="mask"):
        build(np.array([1, 0, 1]), q)  # not boolean
    with pytest.raises(BAD_INPUT, match="mask"):
        build(np.ones((3, 1), dtype=bool), q)
    with pytest.raises(ValueError, match="weights"):
        build(mask, np.array([0.2, -0.3, 0.5]))
    with pytest.raises(ValueError, match="server_lr"):
        build(mask, q, 0.0)
    with pytest.raises(ValueError, match="server_lr"):
        build(mask, q, -1.0)
    for block_builder in (assign, collect, local_diagonal):
        with pytest.raises(BAD_INPUT, match="mask"):
            block_builder(np.array([0.0, 1.0]))


def test_star_graph_refuses_bad_block_arguments():
    mask = np.array([True, False])
    with pytest.raises(ValueError, match="block"):
        star_graph(mask, "broadcast")
    with pytest.raises(ValueError, match="weights"):
        star_graph(mask, "average")
    with pytest.raises(ValueError, match="weights"):
        star_graph(mask, "assign", weights=np.ones(2))
    with pytest.raises(ValueError, match="server_lr"):
        star_graph(mask, "collect", server_lr=2.0)


def test_blocks_at_scale():
    n = 100_000
    mask = np.random.default_rng(0).random(n) < 0.01
    W = graph_to_matrix(star_graph(mask, "collect"))
    assert same(W, collect(mask))
    check_column_stochastic(W, name="C_S")


# ---------------------------------------------------------------- checks


@pytest.mark.parametrize("fmt", ["dense", "csr", "coo"])
def test_checks_accept_and_reject(fmt):
    def as_fmt(a):
        a = np.asarray(a, dtype=float)
        return a if fmt == "dense" else sp.csr_array(a) if fmt == "csr" else sp.coo_array(a)

    row = as_fmt([[0.5, 0.5], [0.0, 1.0]])
    assert is_row_stochastic(row) and not is_column_stochastic(row)
    column = as_fmt([[0.5, 0.0], [0.5, 1.0]])
    assert is_column_stochastic(column) and not is_row_stochastic(column)
    doubly = as_fmt([[0.25, 0.75], [0.75, 0.25]])
    assert is_doubly_stochastic(doubly)
    signed = as_fmt([[-0.5, 1.5], [0.0, 1.0]])
    assert rows_sum_to_one(signed) and not is_row_stochastic(signed)
    check_rows_sum_to_one(signed, name="M")
    assert columns_sum_to_one(as_fmt([[2.0, 0.0], [-1.0, 1.0]]))

    with pytest.raises(ValueError, match=r"R is not row-stochastic: row 1 sums to 0.5"):
        check_row_stochastic(as_fmt([[1.0, 0.0], [0.25, 0.25]]), name="R")
    with pytest.raises(ValueError, match=r"Wk is not row-stochastic: entry \[0, 0\].*negative"):
        check_row_stochastic(signed, name="Wk")
    with pytest.raises(ValueError, match=r"C is not column-stochastic: column 0 sums to 0.5"):
        check_column_stochastic(row, name="C")
    with pytest.raises(ValueError, match=r"^W is not doubly stochastic"):
        check_doubly_stochastic(row)
    with pytest.raises(ValueError, match="M2 is not a matrix whose rows sum to one: row 0"):
        check_rows_sum_to_one(column, name="M2")
    with pytest.raises(ValueError, match="M3 is not a matrix whose columns sum to one"):
        check_columns_sum_to_one(row, name="M3")
    with pytest.raises(ValueError, match="not square"):
        check_doubly_stochastic(as_fmt([[1.0, 0.0]]), name="X")
    with pytest.raises(ValueError, match="not finite"):
        check_row_stochastic(as_fmt([[np.nan, 1.0], [0.0, 1.0]]), name="X")
    assert not is_row_stochastic(as_fmt([[np.inf, 1.0], [0.0, 1.0]]))


def test_checks_tolerance_and_bad_input():
    almost = np.array([[1.0 + 1e-14, 0.0], [0.0, 1.0]])
    assert is_row_stochastic(almost)
    assert not is_row_stochastic(almost, atol=0.0)
    assert is_row_stochastic(np.array([[1.0, -1e-15], [0.0, 1.0]]))  # rounding noise
    with pytest.raises(BAD_INPUT, match="W"):
        check_row_stochastic(np.ones(3))
    with pytest.raises(BAD_INPUT, match="atol"):
        is_row_stochastic(np.eye(2), atol=-1.0)


# ---------------------------------------------------------------- weight rules


def reference_rule(graph, rule):
    """Per-node loops straight from the definitions."""
    n = graph.number_of_nodes()
    W = np.zeros((n, n))
    if rule == "metropolis":
        degree = {i: len(set(graph.neighbors(i)) - {i}) for i in graph}
        for i in graph:
            for j in set(graph.neighbors(i)) - {i}:
                W[i, j] = 1 / (1 + max(degree[i], degree[j]))
            W[i, i] = 1 - W[i].sum()
    elif rule == "row":
        for i in graph:
            sources = (set(graph.predecessors(i)) - {i}) | {i}
            for j in sources:
                W[i, j] = 1 / len(sources)
    else:
        for j in graph:
            targets = (set(graph.successors(j)) - {j}) | {j}
            for i in targets:
                W[i, j] = 1 / len(targets)
    return W


@FAST
@given(n=st.integers(1, 25), p=st.floats(0, 1), seed=st.integers(0, 2**32 - 1))
def test_metropolis_hastings(n, p, seed):
    graph = nx.gnp_random_graph(n, p, seed=seed)
    if n > 1:
        graph.add_edge(0, 0)  # self-loops are ignored
    W = metropolis_hastings(graph)
    assert isinstance(W, sp.csr_array) and W.shape == (n, n)
    assert is_doubly_stochastic(W)
    assert (W != W.T).nnz == 0
    assert (W.diagonal() > 0).all()
    np.testing.assert_allclose(W.toarray(), reference_rule(graph, "metropolis"), atol=1e-15)
    # the same from the directed view and from a sparse pattern
    assert same(metropolis_hastings(nx.DiGraph(graph)), W)
    assert same(metropolis_hastings(graph_to_matrix(graph)), W)


@FAST
@given(n=st.integers(1, 25), p=st.floats(0, 1), seed=st.integers(0, 2**32 - 1))
def test_uniform_neighbor_rules(n, p, seed):
    graph = nx.gnp_random_graph(n, p, seed=seed, directed=True)
    R = uniform_in_neighbors(graph)
    C = uniform_out_neighbors(graph)
    assert is_row_stochastic(R) and is_column_stochastic(C)
    np.testing.assert_allclose(R.toarray(), reference_rule(graph, "row"), atol=1e-15)
    np.testing.assert_allclose(C.toarray(), reference_rule(graph, "column"), atol=1e-15)
    # the rules follow the convention: edge j -> i gives W[i, j] > 0
    for j, i in graph.edges:
        assert R[i, j] > 0 and C[i, j] > 0
    pattern = graph_to_matrix(graph)
    assert same(uniform_in_neighbors(pattern), R) and same(uniform_out_neighbors(pattern), C)


def test_metropolis_needs_an_undirected_graph():
    with pytest.raises(ValueError, match="undirected.*edge 0 -> 1 but not 1 -> 0"):
        metropolis_hastings(nx.DiGraph([(0, 1)]))


# ---------------------------------------------------------------- sequences


def test_static_sequence():
    graph = nx.cycle_graph(5)
    seq = StaticSequence(graph)
    assert seq.n_nodes == 5 and seq.period == 1
    first = seq.graph(0)
    assert seq.graph(7) is first
    assert set(first.edges) == set(graph.edges) | {(j, i) for i, j in graph.edges}
    with pytest.raises(nx.NetworkXError):
        first.add_edge(0, 2)  # frozen
    W = seq.matrix(0, "metropolis")
    assert same(seq.matrix(3, "metropolis"), W)
    assert same(W, metropolis_hastings(graph))
    W.data[:] = 0.0  # a returned matrix is the caller's; the cache keeps its own
    assert is_doubly_stochastic(seq.matrix(4, "metropolis"))
    assert is_row_stochastic(seq.matrix(1, "row"))
    assert is_column_stochastic(seq.matrix(1, "column"))
    assert same(seq.matrix(2, "natural"), graph_to_matrix(graph))
    with pytest.raises(ValueError, match="rule"):
        seq.matrix(0, "laplacian")
    with pytest.raises(ValueError, match="k"):
        seq.matrix(-1)


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 12, 16, 64])
def test_one_peer_exponential(n):
    seq = OnePeerExponential(n)
    tau = seq.tau
    assert tau == max(1, int(np.ceil(np.log2(n))))
    assert seq.period == tau
    product = np.eye(n)
    for k in range(tau):
        W = seq.matrix(k, "natural")
        assert is_doubly_stochastic(W)
        assert same(W, graph_to_matrix(seq.graph(k)))  # fast path = modelling path
        assert same(W, seq.matrix(k, "row")) and same(W, seq.matrix(k, "column"))
        assert same(W, seq.matrix(k + 3 * tau, "natural"))
        if n > 1:
            m = k % tau
            i = np.arange(n)
            np.testing.assert_array_equal(W.toarray()[i, (i + 2**m) % n], 0.5)
            np.testing.assert_array_equal(W.diagonal(), 0.5)
        product = W @ product
    if n & (n - 1) == 0:
        np.testing.assert_array_equal(product, np.full((n, n), 1.0 / n))
    assert is_strongly_connected_union(seq, 0, tau)


def test_one_peer_exponential_at_scale():
    seq = OnePeerExponential(100_000)
    assert seq.tau == 17
    W = seq.matrix(20, "natural")
    check_doubly_stochastic(W, name="W_20")
    assert W.nnz == 200_000
    assert is_strongly_connected_union(seq, 5, seq.tau)
    assert not is_strongly_connected_union(seq, 5, 3)


def test_periodic_sequence_and_union_connectivity():
    a = nx.DiGraph([(0, 1), (1, 2)])
    b = nx.DiGraph([(2, 0)])
    seq = PeriodicSequence([a, b], n_nodes=3)
    assert seq.period == 2 and seq.n_nodes == 3
    assert set(seq.graph(0).edges) == set(a.edges)
    assert set(seq.graph(3).edges) == set(b.edges)
    assert sorted(seq.graph(1).nodes) == [0, 1, 2]
    assert not is_strongly_connected_union(seq, 0, 1)
    assert is_strongly_connected_union(seq, 0, 2)
    assert is_strongly_connected_union(seq, 1, 2)
    assert same(seq.matrix(5, "row"), uniform_in_neighbors(b, n_nodes=3))
    with pytest.raises(ValueError, match="graphs"):
        PeriodicSequence([])
    with pytest.raises(ValueError, match=r"graphs\[1\]"):
        PeriodicSequence([nx.path_graph(2), nx.path_graph(3)])


def test_directed_ring_sequence():
    seq = DirectedRingSequence(6, shifts=(1, 2))
    assert seq.period == 2
    assert set(seq.graph(0).edges) >= {(i, (i + 1) % 6) for i in range(6)}
    assert set(seq.graph(1).edges) >= {(i, (i + 2) % 6) for i in range(6)}
    for k in range(4):
        W = seq.matrix(k, "natural")
        assert is_doubly_stochastic(W)
        assert same(W, graph_to_matrix(seq.graph(k)))
        assert same(W, seq.matrix(k, "row"))
    assert is_strongly_connected_union(seq, 0, 1)
    with pytest.raises(ValueError, match="undirected"):
        seq.matrix(0, "metropolis")
    assert not is_strongly_connected_union(DirectedRingSequence(6, shifts=(2,)), 0, 3)


def test_random_sequence_reproducible():
    a = RandomSequence(40, p=0.1, seed=7)
    b = RandomSequence(40, p=0.1, seed=7)
    c = RandomSequence(40, p=0.1, seed=8)
    for k in (5, 2, 0):  # any order
        assert same(a.matrix(k, "metropolis"), b.matrix(k, "metropolis"))
        assert set(a.graph(k).edges) == set(b.graph(k).edges)
    assert not same(a.matrix(3, "natural"), c.matrix(3, "natural"))
    assert not same(a.matrix(3, "natural"), a.matrix(4, "natural"))
    fresh = RandomSequence(10)
    assert isinstance(fresh.seed, int)
    assert same(fresh.matrix(1), RandomSequence(10, seed=fresh.seed).matrix(1))


def test_random_erdos_renyi():
    sparse = RandomSequence(60, p=0.01, seed=3, connected=True)
    loose = RandomSequence(60, p=0.01, seed=3, connected=False)
    disconnected = 0
    for k in range(10):
        graph = sparse.graph(k)
        assert all((v, u) in graph.edges for u, v in graph.edges)  # both directions
        assert nx.is_strongly_connected(graph)
        disconnected += not nx.is_strongly_connected(loose.graph(k))
        W = sparse.matrix(k, "metropolis")
        assert is_doubly_stochastic(W)
        assert same(W, metropolis_hastings(graph))
        assert same(sparse.matrix(k, "natural"), graph_to_matrix(graph))
    assert disconnected > 0
    # the edge count of G(n, p): mean n(n-1)p/2, within a few standard deviations
    n, p, steps = 50, 0.2, 30
    seq = RandomSequence(n, p=p, seed=11, connected=False)
    counts = [seq.graph(k).number_of_edges() / 2 for k in range(steps)]
    pairs = n * (n - 1) / 2
    assert abs(np.mean(counts) - pairs * p) < 5 * np.sqrt(pairs * p * (1 - p) / steps)


def test_random_random_directed():
    seq = RandomSequence(30, kind="random_directed", p=0.05, seed=5)
    for k in range(5):
        graph = seq.graph(k)
        assert all((i, (i + 1) % 30) in graph.edges for i in range(30))
        assert not any(u == v for u, v in graph.edges)
        assert is_strongly_connected_union(seq, k, 1)
        R, C = seq.matrix(k, "row"), seq.matrix(k, "column")
        assert is_row_stochastic(R) and is_column_stochastic(C)
        assert same(R, uniform_in_neighbors(graph)) and same(C, uniform_out_neighbors(graph))
    assert not is_column_stochastic(seq.matrix(0, "row"))


def test_random_sequence_at_scale_and_bad_input():
    seq = RandomSequence(100_000, seed=0)
    check_doubly_stochastic(seq.matrix(0, "metropolis"), name="W_0")
    assert is_strongly_connected_union(seq, 0, 1)
    with pytest.raises(ValueError, match="kind"):
        RandomSequence(10, kind="small_world")
    with pytest.raises(ValueError, match="p"):
        RandomSequence(10, p=1.5)
    with pytest.raises(ValueError, match="n_nodes"):
        RandomSequence(0)
    with pytest.raises(ValueError, match="seed"):
        RandomSequence(10, seed=-1)

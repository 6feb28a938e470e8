"""Activation beyond the methods: the accounting columns and plots, configurations,
``stochmix spectrum``, CHOCO's compressed floats, expected activated matrices."""

import networkx as nx
import numpy as np
import pytest

import stochmix as sm
from stochmix import algorithms, mixing, participation, problems
from stochmix.engine.runner.result import AXES, COLUMNS, Result
from stochmix.mixing.activation import edge_matrix, expected_activated_matrix, pulled, pushed

N = 8


def _run(method, process, rounds=40, **kwargs):
    return sm.run(method, problems.Quadratic.random(N, 3, seed=1), process, rounds,
                  progress=False, **kwargs)  # fmt: skip


def test_columns_and_axes_hold_the_costs(tmp_path):
    graph = nx.cycle_graph(N)
    result = _run(
        algorithms.DGD(0.05, mixing.StaticSequence(graph)), participation.RandomEdge(graph)
    )
    columns = result.columns()
    assert tuple(columns)[: len(COLUMNS)] == COLUMNS and "time" in columns
    assert (columns["messages"][1:] == 2).all() and (columns["gradients"][1:] == 2).all()
    assert (columns["floats"][1:] == 2 * 3).all()
    assert np.array_equal(result.axis("messages"), np.cumsum(result.messages))
    assert np.array_equal(result.axis("bytes"), np.cumsum(result.floats * 8))
    assert np.all(np.diff(result.axis("time")) > 0)
    ax = result.plot(x="messages")
    assert ax.get_xlabel() == "messages"
    with pytest.raises(ValueError, match="x must be one of"):
        result.plot(x="seconds")
    back = Result.load(result.save(tmp_path / "run"))
    assert np.array_equal(back.messages, result.messages) and np.array_equal(back.time, result.time)
    text = result.csv_rows()
    header = "participants,gradients,messages,floats,sample_gradients,time"
    assert text.splitlines()[0].endswith(header)
    assert set(AXES) >= {"round", "messages", "time"}


def test_federated_rounds_count_pulls_and_pushes():
    result = _run(algorithms.FedAvg(0.05, local_steps=3), participation.UniformSample(N, 4))
    assert (result.messages[1:] == 2 * 4).all()  # the pull of the model and the update
    assert (result.gradients[1:] == 3 * 4).all()
    assert result.time is None and "time" not in result.columns()


def test_choco_counts_compressed_floats():
    graph = nx.cycle_graph(N)
    sequence = mixing.StaticSequence(graph)
    sparse = _run(algorithms.CHOCO(0.01, sequence, compression="top_k:1"), participation.Full(N))
    dense = _run(algorithms.CHOCO(0.01, sequence, compression="none"), participation.Full(N))
    assert np.array_equal(sparse.messages, dense.messages)
    assert (sparse.floats[1:] == 2 * N * 2).all() and (dense.floats[1:] == 2 * N * 3).all()


def test_the_activated_matrices_are_stochastic_where_the_rule_says():
    W = mixing.StaticSequence(nx.path_graph(N)).matrix(0, "row")
    op = sm.mixing.RowSparse.whole(sm.mixing.StaticSequence(nx.path_graph(N)).matrix(0, "row"))
    nodes = np.array([1, 4, 5])
    rows = pulled(op, nodes).values.toarray()
    assert np.allclose(rows.sum(axis=1), 1.0)
    C = mixing.StaticSequence(nx.path_graph(N)).matrix(0, "column")
    active, others = pushed(sm.mixing.RowSparse.whole(C), nodes)
    full = np.eye(N)
    full[:, nodes] = C.toarray()[:, nodes]  # W D + I - D
    assert np.allclose(active.values.toarray(), full[nodes])
    assert np.allclose(others.values.toarray() + np.eye(N)[others.rows], full[others.rows])
    edges = np.array([[0, 1], [1, 0], [5, 6], [6, 5]])
    E = edge_matrix(N, edges, np.array([0, 1, 5, 6])).values.toarray()
    assert np.allclose(E[:, [0, 1, 5, 6]].sum(axis=0), 1.0) and np.allclose(E.sum(axis=1), 1.0)
    p = np.linspace(0.2, 0.9, N)
    process = participation.Bernoulli(p, n_clients=N)
    expected = expected_activated_matrix(W, process, "pull").toarray()
    assert np.allclose(expected, np.diag(p) @ W.toarray() + np.eye(N) - np.diag(p))


def test_configurations_take_an_activation_table(tmp_path):
    from stochmix.config import ConfigError, parse

    table = {
        "rounds": 50,
        "problem": {"kind": "quadratic", "n_clients": N, "dim": 3},
        "graphs": {"kind": "cycle"},
        "activation": {"kind": "random_edge", "boyd": True},
        "methods": [{"kind": "gradient_tracking", "lr": 0.05}],
    }
    exp = parse(table)
    assert isinstance(exp.participation, participation.RandomEdge)
    assert exp.resolved()["participation"]["kind"] == "random_edge"
    bad = {**table, "participation": {"kind": "full"}}
    with pytest.raises(ConfigError, match="not both"):
        parse(bad)
    refused = {**table, "activation": {"kind": "bernoulli", "p": 0.5}}
    with pytest.raises(ConfigError, match="activation.kind = 'bernoulli' cannot drive"):
        parse(refused)  # gradient tracking under node activation, refused before any run
    dgd = {**refused, "methods": [{"kind": "dgd", "lr": 0.05}]}
    assert isinstance(parse(dgd).participation, participation.Bernoulli)


@pytest.mark.parametrize("seed", range(6))
def test_pushed_by_rows_builds_the_operators_of_the_columns_route(seed):
    """A whole operator with sorted columns is pushed from its rows (the active columns
    kept): the same rows, entries, order and values as the route through W's columns."""
    import scipy.sparse as sp

    from stochmix.mixing import activation

    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 60))
    graph = nx.gnp_random_graph(n, 0.15, seed=seed, directed=True)
    C = nx.to_scipy_sparse_array(graph, format="csr", dtype=float) + sp.eye(n, format="csr")
    C = sp.csr_array(C.multiply(rng.uniform(0.5, 1.5, (n, n))))
    C = sp.csr_array(C / C.sum(axis=0))  # column-stochastic, weights of all sizes
    C.sort_indices()
    for p in (0.0, 0.2, 0.6, 1.0):
        nodes = np.flatnonzero(rng.random(n) < p)
        if nodes.size == 0:
            continue
        fast = activation._pushed_by_rows(sm.mixing.RowSparse.whole(C), nodes)
        by_columns = _pushed_through_columns(sm.mixing.RowSparse.whole(C), nodes)
        for a, b in zip(fast, by_columns, strict=True):
            if a is None or b is None:
                assert a is None and b is None
                continue
            np.testing.assert_array_equal(a.rows, b.rows)
            for field in ("indptr", "indices", "data"):
                np.testing.assert_array_equal(getattr(a.values, field), getattr(b.values, field))


def _pushed_through_columns(op, nodes):
    """:func:`pushed` made to take the route through W's columns (an operator it does not
    see as whole)."""
    from stochmix.mixing import activation

    original = activation._is_whole
    activation._is_whole = lambda o: False if o is op else original(o)
    try:
        return pushed(op, nodes)
    finally:
        activation._is_whole = original


def test_pushed_by_rows_takes_empty_rows_anywhere():
    """Rows of W with no entry (a node nothing reaches, not even itself) among the active
    rows, last included, or among the rows reached."""
    import scipy.sparse as sp

    from stochmix.mixing import activation

    dense = np.array(
        [[0.5, 0.0, 0.5, 0.0], [0.0, 0.0, 0.0, 0.0], [0.5, 0.0, 0.5, 0.0], [0.0, 0.0, 0.0, 0.0]]
    )
    C = sp.csr_array(dense)
    for nodes in ([1], [3], [0, 3], [1, 2, 3], [0, 1, 2, 3]):
        nodes = np.array(nodes)
        fast = activation._pushed_by_rows(sm.mixing.RowSparse.whole(C), nodes)
        slow = _pushed_through_columns(sm.mixing.RowSparse.whole(C), nodes)
        for a, b in zip(fast, slow, strict=True):
            assert (a is None) == (b is None)
            if a is not None:
                np.testing.assert_array_equal(a.rows, b.rows)
                np.testing.assert_array_equal(a.values.toarray(), b.values.toarray())
                np.testing.assert_array_equal(a.values.indptr, b.values.indptr)

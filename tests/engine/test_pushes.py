"""Activated pushes as a scatter (issue 42: "push activation, a deferred scatter-add";
:mod:`stochmix.engine.model.pushed`). Under node activation a push ``T <- C T`` becomes
``T^+ = (I - D) T + D L + C D m``: the active rows take their other terms, then each
active node adds its column of C times its row of m (as the phase found it) to every
row the column reaches. On the NumPy backend that is one compiled pass over the
senders' columns (nothing sliced); elsewhere the phase's sparse rows, from the same
entries. What must hold: the numbers of the sparse rows (and of the per-node references
of ``tests/algorithms/test_activation.py``) to rounding, empty rounds included, every
cost column equal, the same bits with and without the compiled kernel, a non-finite
entry stopping the run, and ``explain`` no longer listing it as a slow path where it
is not one."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

import stochmix as sm
from stochmix.algorithms import PushDIGing, PushPull, PushSum
from stochmix.engine import Equations
from stochmix.engine.backends.numpy_backend import NumpyBackend
from stochmix.engine.model.layout import Block, Layout
from stochmix.engine.model.pushed import PushedColumns
from stochmix.mixing import StaticSequence
from stochmix.mixing.rowsparse import RowSparse
from stochmix.participation import Bernoulli, Trace
from tests._problems import Flat

N = 14
COLUMNS = ("gradients", "messages", "floats", "sample_gradients")


class GeneralPath(NumpyBackend):
    """The NumPy backend without row subsets: an activated push takes its sparse rows."""

    applies_row_subsets = False


class NoKernels(NumpyBackend):
    """The NumPy backend without its compiled whole-block kernels (NumPy's scatter)."""

    fused_combine = False


def _directed(n):
    g = nx.DiGraph()
    g.add_edges_from([(i, (i + 1) % n) for i in range(n)])
    g.add_edges_from([(0, n // 2), (n - 1, 2), (5, 1)])
    return g


UNDIRECTED = StaticSequence(nx.random_regular_graph(4, N, seed=2))
DIRECTED = StaticSequence(_directed(N))
METHODS = {
    "push-sum": lambda: PushSum(0.05, UNDIRECTED),
    "push-sum, directed": lambda: PushSum(0.05, DIRECTED),
    "push-DIGing": lambda: PushDIGing(0.02, DIRECTED),
    "push-pull": lambda: PushPull(0.02, DIRECTED),
}


def _with_empty_rounds(rounds=30, seed=4):
    masks = Bernoulli(0.35, n_clients=N).sample(rounds, seed=seed).copy()
    masks[3] = False
    masks[10] = False
    return Trace(masks)


def _run(make, backend, participation, rounds=30):
    problem = sm.problems.LeastSquares.random(N, 3, rows_per_client=4, seed=1)
    return sm.run(make(), problem, participation, rounds, seed=3, backend=backend,
                  progress=False, metrics=("distance",))  # fmt: skip


@pytest.mark.parametrize("name", METHODS)
@pytest.mark.parametrize("participation", ["bernoulli", "with empty rounds"])
def test_the_scatter_gives_the_sparse_rows_numbers(name, participation):
    process = Bernoulli(0.35, n_clients=N) if participation == "bernoulli" else _with_empty_rounds()
    got = _run(METHODS[name], NumpyBackend(), process)
    want = _run(METHODS[name], GeneralPath(), process)
    scale = 1.0 + float(np.abs(want.node_models).max())
    np.testing.assert_allclose(got.node_models, want.node_models, rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(got.distance, want.distance, rtol=1e-11)
    for column in COLUMNS:
        np.testing.assert_array_equal(getattr(got, column), getattr(want, column), column)


class UntemplatedPushPull(PushPull):
    """Push-pull with every round planned from its phases."""

    def template_key(self, r, participants):
        return None


@pytest.mark.parametrize("backend", [NumpyBackend, GeneralPath])
def test_templated_push_rounds_are_the_rounds_built_in_full(backend):
    """Push-pull's activated rounds are templates (planned once per position of the
    graph sequence, each round's active nodes substituted): the numbers and every cost
    column of the rounds built in full, on the scatter and on the sparse rows made from
    the template's form."""
    process = Bernoulli(0.4, n_clients=N)
    problem = sm.problems.LeastSquares.random(N, 3, rows_per_client=4, seed=1)
    plan = sm.explain(PushPull(0.02, DIRECTED), problem, process, 12, backend=backend())
    assert "instantiated from its template" in str(plan)
    assert bool(plan.slow_paths) == (backend is GeneralPath)  # (its sparse rows there)
    got = _run(lambda: PushPull(0.02, DIRECTED), backend(), process)
    want = _run(lambda: UntemplatedPushPull(0.02, DIRECTED), backend(), process)
    np.testing.assert_allclose(got.node_models, want.node_models, rtol=0, atol=1e-14)
    for column in COLUMNS:
        np.testing.assert_array_equal(getattr(got, column), getattr(want, column), column)


@pytest.mark.parametrize("name", ["push-sum", "push-DIGing"])
def test_the_compiled_scatter_is_numpys_bit_for_bit(name):
    pytest.importorskip("numba")
    process = Bernoulli(0.35, n_clients=N)
    got = _run(METHODS[name], NumpyBackend(), process)
    want = _run(METHODS[name], NoKernels(), process)
    np.testing.assert_array_equal(got.node_models, want.node_models)


def _activated_phase(active, target="x", source="x"):
    """``target[:] = C @ source + 0.5 target`` under node activation of ``active``, with
    C column-stochastic on the directed graph (pushed); the phase, C densely, the layout."""
    layout = Layout([Block("x", N), Block("y", N)])
    eq = Equations(layout, n_clients=N, client_node=0)  # (peers: node i is row i)
    eq.activate(active)
    matrix = DIRECTED.matrix(0, "column")
    c = RowSparse.whole(matrix)
    c.mixes = "push"
    x, y = eq.blocks("x", "y")
    blocks = {"x": x, "y": y}
    blocks[target][:] = c @ blocks[source] + 0.5 * blocks[target]
    return eq.build("push"), matrix.toarray(), layout


@pytest.mark.parametrize("source", ["x", "y"])
def test_a_pushs_matrix_is_the_activation_rule(source):
    """The phase's matrix (its sparse rows) and its scatter against the rule ``T^+ =
    (I - D) T + D (0.5 T) + C D m`` written densely."""
    active = np.array([1, 4, 5, 9])
    phase, dense, layout = _activated_phase(active, "x", source)
    assert phase.blockwise is not None and phase.blockwise.pushes
    d = np.zeros((N, N))
    d[active, active] = 1.0
    rule = np.eye(2 * N)
    x, s = slice(0, N), layout.slice(source)
    rule[x, x] = np.eye(N) - d + 0.5 * d
    rule[x, s] += dense @ d
    np.testing.assert_allclose(phase.matrix().toarray(), rule, atol=1e-15)
    z = np.random.default_rng(0).normal(size=(2 * N, 3))
    for backend in (NumpyBackend(), NoKernels()):
        out = z.copy()
        assert backend.apply_blockwise(out, phase, None)
        np.testing.assert_allclose(out, rule @ z, atol=1e-14)
    out = z.copy()
    assert GeneralPath().apply(out, phase, None)
    np.testing.assert_allclose(out, rule @ z, atol=1e-14)


@pytest.mark.parametrize("backend", [NumpyBackend, NoKernels])
def test_a_push_that_overflows_is_not_finite(backend):
    """The rows a push reaches are checked: 1.5e308 kept plus what is pushed to it."""
    phase, _, _ = _activated_phase(np.array([1, 4, 5, 9]))
    z = np.full((2 * N, 3), 1.5e308)
    assert not backend().apply_blockwise(z, phase, None)
    assert np.isinf(z[:N]).any()
    z = np.ones((2 * N, 3))
    assert backend().apply_blockwise(z, phase, None)


def test_a_push_beside_an_edges_push_keeps_each_row_once():
    """One equation pushes with W (a scatter) and with an edge's matrix (rows reached):
    both take the rows they reach, each reached row kept once (the rule, densely)."""
    from stochmix.mixing.activation import edge_matrix

    active = np.array([1, 4, 5, 9])
    layout = Layout([Block("x", N), Block("y", N)])
    eq = Equations(layout, n_clients=N, client_node=0)
    eq.activate(active)
    matrix = DIRECTED.matrix(0, "column")
    c = RowSparse.whole(matrix)
    c.mixes = "push"
    edge = edge_matrix(N, np.array([[1, 2]]), np.array([1, 2]))
    edge.mixes = "push"
    x, y = eq.blocks("x", "y")
    x[:] = c @ x + edge @ y
    y[:] = c @ y  # (W's push again, in an equation that scatters)
    phase = eq.build("two pushes")
    d = np.zeros((N, N))
    d[active, active] = 1.0
    rule = np.eye(2 * N)
    rule[:N, :N] = np.eye(N) - d + matrix.toarray() @ d
    edge_full = np.eye(N)
    rows, cols, vals = edge.entries()
    edge_full[rows] = 0.0
    edge_full[rows, cols] = vals
    rule[:N, N:] = edge_full @ d
    rule[N:, N:] = np.eye(N) - d + matrix.toarray() @ d
    np.testing.assert_allclose(phase.matrix().toarray(), rule, atol=1e-15)
    # messages: one per (sender, receiver) pair of W's active columns, however each
    # equation took them, and the edge's (1 to 2, node 1 active)
    dense = matrix.toarray()[:, active]
    dense[active, np.arange(active.size)] = 0.0
    assert phase.traffic.messages == int(np.count_nonzero(dense)) + 1


def test_a_pushs_messages_are_the_senders_columns():
    active = np.array([0, 2, 5])
    phase, dense, _ = _activated_phase(active)
    off = dense[:, active].copy()
    off[active, np.arange(active.size)] = 0.0
    assert phase.traffic.messages == int(np.count_nonzero(off))


def test_the_pushed_columns_reach_past_the_senders():
    matrix = DIRECTED.matrix(0, "column")
    senders = np.array([3, 7])
    pushed = PushedColumns(RowSparse.whole(matrix), senders)
    rows, cols, vals = pushed.entries()
    dense = matrix.toarray()
    for i, j, v in zip(rows, cols, vals, strict=True):
        assert dense[i, j] == v and j in senders
    assert sorted(zip(rows.tolist(), cols.tolist(), strict=True)) == sorted(
        (int(i), int(j)) for j in senders for i in np.flatnonzero(dense[:, j])
    )
    assert set(pushed.reached.tolist()) == set(rows.tolist()) - set(senders.tolist())


@pytest.mark.parametrize("backend", [NumpyBackend, NoKernels])
def test_a_push_that_overflows_stops_the_run(backend):
    """A receiver's row overflows (1.5e308 kept plus what is pushed to it)."""
    x0 = np.full((N, 3), 1.5e308)
    with pytest.warns(sm.engine.DivergenceWarning):
        got = sm.run(PushSum(0.1, DIRECTED), Flat(N, 3), Bernoulli(0.5, n_clients=N), 10,
                     x0=x0, backend=backend(), progress=False, seed=2, metrics=())  # fmt: skip
    assert got.diverged_at == 1


def test_explain_notes_the_push_only_where_it_takes_sparse_rows():
    problem = sm.problems.LeastSquares.random(N, 3, rows_per_client=4, seed=1)
    process = Bernoulli(0.5, n_clients=N)
    found = sm.explain(PushSum(0.01, UNDIRECTED), problem, process, 3)
    assert not found.slow_paths
    pushes = [s for s in found.segments if s.phases == ("push",)]
    assert pushes and all(s.kind != "general" for s in pushes)
    found = sm.explain(PushSum(0.01, UNDIRECTED), problem, process, 3, backend=GeneralPath())
    assert [s.phase for s in found.slow_paths] == ["push"]

"""Mixing in the equation form: ``W @ x`` over whole blocks, ``x[:]``, ``grad()``, and the
run's phase cache that hands the same phase back for the same equations."""

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

from stochmix import run
from stochmix.algorithms import DecentralizedMethod, GradientTracking
from stochmix.engine import Block, Equations, Layout, RunContext, grad, mean
from stochmix.mixing import OnePeerExponential, StaticSequence
from stochmix.mixing.rowsparse import RowSparse
from stochmix.participation import Full
from stochmix.problems import Quadratic

N = 5


def context(federated=False):
    if federated:
        blocks = [Block("x", N + 1, "model"), Block("y", N + 1)]
    else:
        blocks = [Block("x", N, "model"), Block("y", N), Block("g", N)]
    return RunContext(Layout(blocks), N, 3)


def random_mixing(seed, size=N):
    rng = np.random.default_rng(seed)
    dense = rng.random((size, size)) * (rng.random((size, size)) < 0.5) + np.eye(size)
    return RowSparse.whole(sp.csr_array(dense / dense.sum(axis=1, keepdims=True)))


def same_phase(a, b):
    assert (a.matrix() != b.matrix()).nnz == 0
    assert (a.gradient_matrix(N) != b.gradient_matrix(N)).nnz == 0


def test_mix_and_descend_is_the_builders_phase():
    ctx, w = context(), random_mixing(0)
    eq = Equations(ctx, client_node=0)
    x, y = eq.blocks("x", "y")
    x[:] = w @ x - 0.3 * y
    written = eq.build("move")
    nodes = np.arange(N)
    by_hand = ctx.phase("move").apply("x", "x", w).combine("x", nodes, "y", nodes, -0.3).build()
    same_phase(written, by_hand)


def test_mixing_distributes_over_whole_blocks():
    ctx, w = context(), random_mixing(1)
    eq = Equations(ctx, client_node=0)
    x, y = eq.blocks("x", "y")
    x[:] = w @ (x - 0.3 * y)
    by_hand = ctx.phase().apply("x", "x", w).apply("x", "y", w, -0.3).build()
    same_phase(eq.build(), by_hand)


def test_grad_without_clients_is_every_node():
    ctx, w = context(), random_mixing(2)
    eq = Equations(ctx, client_node=0)
    y, g = eq.blocks("y", "g")
    y[:] = w @ y + grad() - g
    g[:] = grad()
    nodes = np.arange(N)
    by_hand = (
        ctx.phase()
        .apply("y", "y", w)
        .combine("y", nodes, "g", nodes, -1.0)
        .gradient("y", nodes, nodes, 1.0)
        .gradient("g", nodes, nodes, 1.0)
        .build()
    )
    same_phase(eq.build(), by_hand)


def test_a_federated_whole_block_holds_the_server_row():
    ctx = context(federated=True)
    w = random_mixing(3, N + 1)
    eq = Equations(ctx)
    x, y = eq.blocks("x", "y")
    x[:] = w @ x  # every row, the server's included
    same_phase(eq.build(), ctx.phase().apply("x", "x", w).build())
    with pytest.raises(ValueError, match=r"grad\(\) is every client's gradient"):
        y[:] = grad()


@pytest.mark.parametrize(
    "write, error, message",
    [
        (lambda x, y, w: x.__setitem__(slice(None), w @ (y + grad())), TypeError, "gradients"),
        (lambda x, y, w: x.__setitem__([0, 1], w @ x), ValueError, "other clients"),
        (lambda x, y, w: x.__setitem__(slice(None), random_mixing(4, N + 2) @ x), ValueError,
         "W is 7 x 7"),
        (lambda x, y, w: x.__setitem__(slice(1, 3), y), TypeError, r"slice\(1, 3, None\)"),
        (lambda x, y, w: x.__setitem__(0, mean(grad())), ValueError, r"grad\(S\)"),
        (lambda x, y, w: x.__setitem__(slice(None), np.ones(N) * grad()), ValueError,
         r"grad\(S\)"),
        (lambda x, y, w: x.__setitem__(slice(None), "W" @ x), TypeError, "mixing operator"),
        (lambda x, y, w: x.__setitem__(slice(None), x @ w), TypeError, "from the left"),
    ],
    ids=[
        "grad inside W", "rows", "size", "slice", "mean of grad()", "weights on grad()",
        "not a matrix", "right",
    ],
)  # fmt: skip
def test_bad_mixing_is_refused_naming_what_is_wrong(write, error, message):
    ctx = context()
    eq = Equations(ctx, client_node=0)
    x, y = eq.blocks("x", "y")
    with pytest.raises(error, match=message):
        write(x, y, random_mixing(5))


def test_the_same_equations_give_back_the_same_phase():
    ctx, w, other = context(), random_mixing(6), random_mixing(7)

    def move(op, lr=0.3):
        eq = Equations(ctx, client_node=0)
        x, y = eq.blocks("x", "y")
        x[:] = op @ x - lr * y
        return eq.build("move")

    first = move(w)
    assert move(w) is first
    assert move(other) is not first
    assert move(w, lr=0.2) is not first
    transient = random_mixing(6)
    transient.reusable = False
    assert move(transient) is not move(transient)
    assert move(w) is first


def test_a_rounds_clients_are_never_cached_by_identity():
    """Participation processes may draw into a reused buffer: equations over S are built
    from its content every time."""
    ctx = context(federated=True)
    S = np.array([0, 1])

    def pull():
        eq = Equations(ctx)
        (x,) = eq.blocks("x")
        x[S] = x.server
        return eq.build("assign")

    first = pull()
    S[:] = [2, 3]
    second = pull()
    assert second is not first
    assert sorted(second.rows) == [3, 4]


class TrackingInEquations(DecentralizedMethod):
    """Gradient tracking (DIGing) as the README writes it."""

    name, needs = "tracking", {"rule": "doubly"}

    def __init__(self, lr, graphs, rule="natural"):
        super().__init__(lr, graphs)
        self.rule = rule

    def blocks(self, n):
        return [Block("x", n, "model"), Block("y", n), Block("g", n)]

    def round_phases(self, k, participants, ctx):
        eq = self.round_equations(participants, ctx)
        x, y, g = eq.blocks("x", "y", "g")
        w, first = self.mixing(k, self.rule), []
        if k == 0:
            y[:] = grad()
            g[:] = grad()
            first.append(eq.build("initial gradients"))
        x[:] = w @ x - self.lr * y
        move = eq.build("mix and descend")
        y[:] = w @ y + grad() - g
        g[:] = grad()
        return [*first, move, eq.build("track")]


def test_a_periodic_graph_is_planned_once_per_distinct_matrix():
    n = 8
    graphs = OnePeerExponential(n)  # period 3
    method = TrackingInEquations(0.1, graphs)
    ctx = RunContext(Layout(method.blocks(n)), n, 2)
    method.start(ctx)
    everyone = np.arange(n)
    rounds = [method.round_phases(k, everyone, ctx) for k in range(10)]
    for k in range(4, 10):
        assert all(a is b for a, b in zip(rounds[k], rounds[k - 3], strict=True))
    assert rounds[1][0] is not rounds[2][0]  # another matrix, another phase
    assert ctx.phase_cache.misses == 1 + 2 * 3  # the initial phase, two a step of the period


def test_the_readme_tracking_equals_the_built_in():
    problem = Quadratic.random(10, 3, seed=2)
    lr = 0.2 / problem.smoothness
    for graphs, rule in (
        (StaticSequence(nx.cycle_graph(10)), "metropolis"),
        (OnePeerExponential(10), "natural"),
    ):
        mine = run(TrackingInEquations(lr, graphs, rule), problem, Full(10), 40, metrics=())
        built = GradientTracking(lr, graphs, rule=rule)
        built_in = run(built, problem, Full(10), 40, metrics=())
        np.testing.assert_allclose(mine.server, built_in.server, rtol=0, atol=1e-13)


def test_the_node_of_client_zero_has_one_name():
    """Method.client_node numbers the clients in equations and in the layout;
    ``model_offset``, its former name, still sets it on a subclass, with a warning."""
    assert DecentralizedMethod.client_node == 0
    with pytest.warns(DeprecationWarning, match="client_node"):

        class Old(TrackingInEquations):
            model_offset = 0

    assert Old.client_node == 0
    eq = Old(0.1, OnePeerExponential(4)).equations(RunContext(Layout([Block("x", 4)]), 4, 1))
    assert eq.client_node == 0

"""The engine on its own: layout, phases as matrices, the run loop and its Result."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp

from stochmix.engine import (
    Block,
    DivergenceError,
    DivergenceWarning,
    Layout,
    Method,
    PhaseBuilder,
    Result,
    run,
)
from stochmix.mixing.federated import assign_rows, collect_rows, local_diagonal_rows
from stochmix.participation import Bernoulli, Full, Trace
from stochmix.problems import Quadratic


def dense_phase(phase, z, grads_all):
    """Apply a phase through its full matrices: M z + B G(all clients)."""
    n_clients = grads_all.shape[0]
    return phase.matrix() @ z + phase.gradient_matrix(n_clients) @ grads_all


@pytest.fixture
def layout():
    return Layout([Block("x", 5, "model"), Block("y", 5), Block("a", 1, "ones")])


def test_layout_rows_slices_and_initial_state(layout):
    assert layout.size == 11
    np.testing.assert_array_equal(layout.rows("y", [0, 4]), [5, 9])
    assert layout.slice("a") == slice(10, 11)
    z = layout.initial(np.array([1.0, 2.0]))
    np.testing.assert_array_equal(z[:5], np.tile([1.0, 2.0], (5, 1)))
    np.testing.assert_array_equal(z[5:10], 0.0)
    np.testing.assert_array_equal(z[10], 1.0)


def test_layout_rejects_bad_blocks():
    with pytest.raises(ValueError, match="distinct"):
        Layout([Block("x", 2), Block("x", 3)])
    with pytest.raises(ValueError, match="rows"):
        Block("x", 0)
    with pytest.raises(ValueError, match="init"):
        Block("x", 2, "random")
    with pytest.raises(ValueError, match="block must be one of"):
        Layout([Block("x", 2)]).rows("y")


def test_builder_terms_sum_and_untouched_rows_stay(layout):
    rng = np.random.default_rng(0)
    z = rng.normal(size=(layout.size, 3))
    grads = rng.normal(size=(4, 3))  # 4 clients, client i is node i + 1
    nodes, clients = np.array([1, 3]), np.array([0, 2])
    phase = (
        PhaseBuilder(layout)
        .keep("y", nodes)
        .combine("y", nodes, "x", 0, 0.5)
        .gradient("y", nodes, clients, -2.0)
        .combine("x", 0, "y", nodes, 1.0)  # one target, many sources: a sum
        .build()
    )
    expected = z.copy()
    expected[5 + nodes] = z[5 + nodes] + 0.5 * z[0] - 2.0 * grads[clients]
    expected[0] = z[5 + 1] + z[5 + 3]
    out = z.copy()
    g = grads[phase.clients]
    new = phase.mix @ z + phase.inject @ g
    out[phase.rows] = new
    np.testing.assert_allclose(out, expected, atol=1e-14)
    np.testing.assert_allclose(dense_phase(phase, z, grads), expected, atol=1e-14)
    np.testing.assert_array_equal(phase.clients, clients)  # only requested gradients


def test_apply_matches_full_matrices(layout):
    rng = np.random.default_rng(1)
    z = rng.normal(size=(layout.size, 2))
    participants = np.array([0, 3])
    for op in (
        assign_rows(participants, 4),
        collect_rows(participants, 4),
        local_diagonal_rows(participants, 4),
    ):
        phase = PhaseBuilder(layout).apply("y", "x", op).build()
        expected = z.copy()
        expected[5 + op.rows] = op.toarray()[op.rows] @ z[:5]  # only the rows op sets
        np.testing.assert_allclose(phase.matrix() @ z, expected, atol=1e-14)


def test_apply_refuses_wrong_size(layout):
    with pytest.raises(ValueError, match="op has size"):
        PhaseBuilder(layout).apply("x", "x", assign_rows(np.array([0]), 7))


def test_clear_zeroes_rows(layout):
    z = np.ones((layout.size, 2))
    phase = PhaseBuilder(layout).clear("y", [2]).build()
    out = phase.matrix() @ z
    np.testing.assert_array_equal(out[7], 0.0)
    assert sp.issparse(phase.matrix())


class _Explode(Method):
    """Doubles the server model each round: diverges in float64 after ~1024 rounds."""

    name = "explode"

    def blocks(self, n_clients):
        return [Block("x", n_clients + 1, "model")]

    def round_phases(self, r, participants, ctx):
        return [ctx.phase().keep("x", 0, 1e100).build()]


def test_divergence_stops_and_marks_the_result():
    problem = Quadratic.random(3, 2, seed=0)
    with pytest.warns(DivergenceWarning, match="round 4"):  # Inf: 1e400 overflows
        res = run(_Explode(), problem, Full(3), 50, x0=np.ones(2), divergence_threshold=1e305)
    assert res.diverged and res.diverged_at == 4
    assert res.rounds == 4 and res.server.shape == (5, 2)
    with pytest.warns(DivergenceWarning, match="round 1"):  # 1e100 > the default 1e50
        assert run(_Explode(), problem, Full(3), 50, x0=np.ones(2)).diverged_at == 1
    with pytest.raises(DivergenceError, match="explode"):
        run(_Explode(), problem, Full(3), 50, x0=np.ones(2), on_divergence="raise")


def test_run_validates_its_arguments():
    from stochmix.algorithms import FedAvg

    problem = Quadratic.random(4, 2, seed=0)
    with pytest.raises(ValueError, match="participation covers 5"):
        run(FedAvg(0.1), problem, Full(5), 3)
    with pytest.raises(ValueError, match="x0 must have shape"):
        run(FedAvg(0.1), problem, Full(4), 3, x0=np.ones(3))
    with pytest.raises(ValueError, match="rounds"):
        run(FedAvg(0.1), problem, Full(4), -1)
    with pytest.raises(TypeError, match="method"):
        run("fedavg", problem, Full(4), 3)
    with pytest.raises(ValueError, match="metrics"):
        run(FedAvg(0.1), problem, Full(4), 3, metrics=("speed",))
    with pytest.raises(ValueError, match="backend"):
        run(FedAvg(0.1), problem, Full(4), 3, backend="jax")


def test_result_rate_rounds_to_and_round_trip(tmp_path):
    rho = 0.8
    distance = 3.0 * rho ** np.arange(120)
    res = Result(
        method="toy",
        server=np.zeros((120, 2)),
        participants=np.zeros(120, dtype=np.int64),
        wall_time=np.linspace(0, 1, 120),
        distance=distance,
    )
    assert res.rate() == pytest.approx(rho, rel=1e-6)
    assert res.rounds_to(1e-8) == int(np.ceil(np.log(1e-8) / np.log(rho)))
    assert res.rounds_to(1e-300) is None
    path = res.save(tmp_path / "toy.npz")
    back = Result.load(path)
    np.testing.assert_array_equal(back.distance, distance)
    assert back.method == "toy" and back.diverged_at is None
    with pytest.raises(ValueError, match="metric"):
        res.error("accuracy")


def test_stalled_curve_has_rate_near_one():
    distance = 1e-3 + 0.5 ** np.arange(200)
    res = Result(
        "toy", np.zeros((200, 1)), np.zeros(200, np.int64), np.zeros(200), distance=distance
    )
    assert res.rate() > 0.99


def test_metrics_and_participant_counts():
    from stochmix.algorithms import FedAvg

    problem = Quadratic.random(6, 3, seed=2)
    masks = np.zeros((4, 6), dtype=bool)
    masks[1, [0, 4]] = True
    masks[3] = True
    res = run(FedAvg(0.1, 2), problem, Trace(masks), 4, x0=np.ones(3))
    np.testing.assert_array_equal(res.participants, [0, 0, 2, 0, 6])
    np.testing.assert_array_equal(res.server[1], res.server[0])  # nobody joined round 0
    x = res.server[-1]
    assert res.distance[-1] == pytest.approx(np.linalg.norm(x - problem.x_star))
    assert res.objective_gap[-1] == pytest.approx(problem.objective(x) - problem.f_star)
    assert res.gradient_norm[-1] == pytest.approx(np.linalg.norm(problem.gradient(x)))
    assert res.consensus is None


def test_same_seed_same_numbers():
    from stochmix.algorithms import FOCUS

    problem = Quadratic.random(10, 3, seed=3)
    part = Bernoulli(np.linspace(0.1, 0.9, 10))
    a = run(FOCUS(0.01, 2), problem, part, 20, seed=5)
    b = run(FOCUS(0.01, 2), problem, part, 20, seed=5)
    c = run(FOCUS(0.01, 2), problem, part, 20, seed=6)
    np.testing.assert_array_equal(a.server, b.server)
    assert not np.array_equal(a.server, c.server)


def test_no_warning_on_healthy_run():
    """A converging run of many rounds (every client every round) emits no warning."""
    from stochmix.algorithms import FedAvg

    problem = Quadratic.random(5, 2, seed=0)
    rounds = 200
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = run(FedAvg(0.05, 2), problem, Full(5), rounds, progress=False)
    assert [str(w.message) for w in caught] == []
    assert res.server.shape == (rounds + 1, 2)
    np.testing.assert_array_equal(res.participants, [0] + [5] * rounds)
    assert np.isfinite(res.distance).all()
    assert res.distance[-1] < 0.05 * res.distance[0]  # it moved towards x_star
    assert res.objective_gap[-1] < 1e-2 * res.objective_gap[0]


def test_builder_recognises_node_local_phases(layout):
    nodes = np.array([1, 3])
    local = PhaseBuilder(layout).keep("y", nodes).combine("y", nodes, "x", nodes, 2.0)
    assert local.build().local is not None
    broadcast = PhaseBuilder(layout).combine("y", nodes, "x", 0, 1.0).build()
    assert broadcast.local is not None and broadcast.local.external
    reduction = PhaseBuilder(layout).keep("x", 0).combine("x", 0, "y", nodes, 1.0).build()
    assert reduction.local is not None  # one row from many: an outer row of the nodes
    assert {kind for _, kind, _, _ in reduction.local.outer} == {"sum", "row"}
    inside = PhaseBuilder(layout).keep("y", nodes).combine("y", 1, "x", nodes, 1.0).build()
    assert inside.local is None  # the summed row is one of the nodes' own rows
    shifted = PhaseBuilder(layout).combine("y", nodes, "x", nodes + 1, 1.0).build()
    assert shifted.local is None

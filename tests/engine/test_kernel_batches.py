"""Element-wise row kernels (the prox of L1 and of the elastic net, projections onto a box
and the nonnegative orthant) in the compiled batches of the segment loop
(stochmix.engine.runner.segments, slot_form): the proximal methods' rounds of every node
and their gossip ticks run batched and give the run made round by round, to rounding, in
every column of the Result; a prox that is not a kernel of the loop keeps its rounds out."""

import networkx as nx
import numpy as np
import pytest

import stochmix as sm
from stochmix import algorithms, mixing, participation, problems
from stochmix.engine.runner.slot_form import SLOT_KERNELS, slot_program
from tests._segments import batch_sizes

pytest.importorskip("numba")

N = 12
ROUNDS = 60
REGULARIZERS = {
    "l1": lambda: problems.L1(1.0),
    "elastic_net": lambda: problems.ElasticNet(1.0, 0.2),
    "box": lambda: problems.Box(-0.15, 0.2),
    "nonnegative": lambda: problems.NonNegative(),
}
METHODS = {
    "pg_extra": lambda lr, g: algorithms.PGEXTRA(lr, g),
    "prox_nids": lambda lr, g: algorithms.ProxNIDS(lr, g),
    "dapg": lambda lr, g: algorithms.DAPG(lr, g, mu=0.01, mix_rounds=2),
}
COLUMNS = ("participants", "gradients", "messages", "floats", "sample_gradients")


def _problem(regularizer: str):
    smooth = problems.LeastSquares.random(N, 4, rows_per_client=3, seed=5)
    return problems.Composite(smooth, REGULARIZERS[regularizer]())


def _pair(make, problem, draws, monkeypatch, rounds=ROUNDS, **options):
    """The run round by round (``compiled=False``), the run with batches, and the sizes of
    the batches the second ran."""
    plain = sm.run(make(), problem, draws, rounds, seed=3, compiled=False, progress=False,
                   **options)  # fmt: skip
    sizes = batch_sizes(monkeypatch)
    fast = sm.run(make(), problem, draws, rounds, seed=3, compiled=True, progress=False,
                  **options)  # fmt: skip
    return plain, fast, sizes


def _same(plain, fast):
    scale = np.abs(plain.server).max()
    np.testing.assert_allclose(fast.server, plain.server, rtol=0, atol=1e-10 * scale)
    np.testing.assert_allclose(fast.node_models, plain.node_models, rtol=0, atol=1e-10 * scale)
    for column in COLUMNS:
        np.testing.assert_array_equal(getattr(fast, column), getattr(plain, column))


@pytest.mark.parametrize(
    "method, regularizer",
    [("pg_extra", "l1"), ("prox_nids", "elastic_net"),
     # (the clip kernel, in the slow stage for the quick suite's time; the loop's clip is
     # checked directly below)
     pytest.param("dapg", "box", marks=pytest.mark.slow),
     pytest.param("pg_extra", "nonnegative", marks=pytest.mark.slow)],
)  # fmt: skip
def test_proximal_rounds_of_every_node_run_batched_as_round_by_round(
    monkeypatch, method, regularizer
):
    problem = _problem(regularizer)
    lr = 0.3 / problem.smoothness
    sequence = mixing.StaticSequence(nx.random_regular_graph(3, N, seed=2))
    plain, fast, sizes = _pair(
        lambda: METHODS[method](lr, sequence), problem, participation.Full(N), monkeypatch
    )
    assert sum(sizes) == ROUNDS - 3  # every round after the first and the two that learn
    _same(plain, fast)
    # the composite objective and gradient mapping, in closed form: every round, batched
    for name in ("distance", "objective_gap", "gradient_norm"):
        values = getattr(fast, name)
        assert np.isfinite(values).all(), name
        np.testing.assert_allclose(values, getattr(plain, name), rtol=1e-8, atol=1e-13)
    # the prox is active: some entries of the nodes' models sit at a kink or a bound
    x = fast.node_models
    if regularizer in ("l1", "elastic_net", "nonnegative"):
        assert (x == 0.0).any()
    if regularizer == "nonnegative":
        assert (x >= 0).all()
    if regularizer == "box":
        assert ((x == -0.15) | (x == 0.2)).any() and ((x >= -0.15) & (x <= 0.2)).all()


def test_proximal_gossip_ticks_run_in_segments_as_round_by_round(monkeypatch):
    problem = _problem("l1")
    graph = nx.cycle_graph(N)
    sequence = mixing.StaticSequence(graph)
    plain, fast, sizes = _pair(
        lambda: algorithms.PGEXTRA(0.05, sequence), problem, participation.RandomEdge(graph),
        monkeypatch, rounds=400,
    )  # fmt: skip
    assert sum(sizes) > 300
    _same(plain, fast)
    np.testing.assert_array_equal(fast.time, plain.time)
    # the closed-form metrics of every tick (the problem's rows of many models at once),
    # and consensus (a running sum of squares, see test_compression_batches)
    for name in ("distance", "objective_gap", "gradient_norm"):
        values = getattr(fast, name)
        assert np.isfinite(values).all(), name
        np.testing.assert_allclose(values, getattr(plain, name), rtol=1e-9, atol=1e-13)
    assert np.isfinite(fast.consensus).all()
    np.testing.assert_allclose(fast.consensus, plain.consensus, rtol=1e-6, atol=1e-15)


def test_gossip_ticks_with_a_prox_the_loop_does_not_apply_say_so(monkeypatch):
    problem = problems.Composite(
        problems.LeastSquares.random(N, 4, rows_per_client=3, seed=5),
        problems.GroupLasso(0.1, groups=[0, 0, 1, 1]),
    )
    graph = nx.cycle_graph(N)
    method = algorithms.PGEXTRA(0.05, mixing.StaticSequence(graph))
    sizes = batch_sizes(monkeypatch)
    with pytest.warns(sm.SlowPathWarning, match=r"a row map \(prox of GroupLasso"):
        sm.run(method, problem, participation.RandomEdge(graph), 60, seed=1, progress=False)
    assert sizes == []
    plan = sm.explain(method, problem, participation.RandomEdge(graph), rounds=3)
    assert "every tick built in full: a tick holds a row map (prox of GroupLasso" in str(plan)


@pytest.mark.slow  # (float32 programs)
def test_a_float32_batch_at_a_box_bound_reports_a_finite_objective(monkeypatch):
    # the reported model averages rows clipped to float32(-0.15), 6e-9 below the bound: it
    # is on the box, as the round-by-round run's model is
    problem = _problem("box")
    lr = 0.3 / problem.smoothness
    sequence = mixing.StaticSequence(nx.random_regular_graph(3, N, seed=2))
    plain, fast, sizes = _pair(
        lambda: algorithms.PGEXTRA(lr, sequence), problem, participation.Full(N), monkeypatch,
        rounds=300, dtype=np.float32,
    )  # fmt: skip
    assert sum(sizes) > 0
    assert (fast.node_models == np.float32(-0.15)).any()
    assert np.isfinite(fast.objective_gap).all() and np.isfinite(plain.objective_gap).all()


@pytest.mark.slow  # (3 s)
def test_a_prox_that_is_not_a_kernel_of_the_loop_keeps_its_rounds_out(monkeypatch):
    # a group lasso's prox is a row map (no element-wise kernel): rounds built one by one
    smooth = problems.LeastSquares.random(N, 4, rows_per_client=3, seed=5)
    problem = problems.Composite(smooth, problems.GroupLasso(0.05, groups=[0, 0, 1, 1]))
    sequence = mixing.StaticSequence(nx.random_regular_graph(3, N, seed=2))
    lr = 0.3 / problem.smoothness
    plain, fast, sizes = _pair(
        lambda: algorithms.PGEXTRA(lr, sequence), problem, participation.Full(N), monkeypatch
    )
    assert sizes == []
    _same(plain, fast)


def test_the_slot_form_of_a_prox_names_its_kernel_and_round_scalars(monkeypatch):
    from stochmix.engine.runner import segments as segments_module

    problem = _problem("elastic_net")  # (the quick case's method and kernel: compiled once)
    method = algorithms.ProxNIDS(0.1, mixing.StaticSequence(nx.cycle_graph(N)))
    made = []

    def spy(phases, layout, nodes, client_node, problem=None):
        made.append(slot_program(phases, layout, nodes, client_node, problem))
        return made[-1]

    monkeypatch.setattr(segments_module, "slot_program", spy)
    sm.run(method, problem, participation.Full(N), 3, compiled=True, progress=False)
    program = made[-1]
    assert program is not None
    assert program.k_kind[program.k_kind > 0].tolist() == [SLOT_KERNELS["shrink_scaled"]]
    q = int(np.flatnonzero(program.k_kind)[0])
    # the round scalars: t l1 and 1 + t l2, t the step
    np.testing.assert_allclose(program.k_par[2 * q : 2 * q + 2], [0.1 * 1.0, 1 + 0.1 * 0.2])
    # one term per target row, from the same node's row of the source block
    terms = slice(program.m0[q], program.m0[q + 1])
    targets = slice(program.t0[q], program.t0[q + 1])
    assert program.m_slot[terms].tolist() == program.t_slot[targets].tolist()
    assert program.m_target[terms].tolist() == list(range(N))


def _one_phase(kind: int, params=(0.0, 0.0)):
    """The packed arrays of one round of one phase writing row 0 of a two-row state: the
    sum of rows 0 and 1 (``kind`` 0), or the kernel ``kind`` of row 1."""
    terms = 2 if kind == 0 else 1
    i64 = np.int64
    return dict(
        P0=np.array([0, 1], i64), t0=np.array([0, 1], i64), t_base=np.zeros(1, i64),
        t_slot=np.zeros(1, i64), m0=np.array([0, terms], i64), m_target=np.zeros(terms, i64),
        m_base=np.array([0, 1][2 - terms :], i64), m_slot=np.array([0, -1][2 - terms :], i64),
        m_coef=np.ones(terms), g0=np.zeros(2, i64), g_target=np.zeros(0, i64),
        g_client=np.zeros(0, i64), g_coef=np.zeros(0), c0=np.zeros(2, i64),
        c_slot=np.zeros(0, i64), k_kind=np.array([kind], i64), k_par=np.array(params, float),
        k_tab=np.array([-1], i64), k_mat=np.array([-1], i64), a_off=np.zeros((0, 1)),
        a_diag=np.zeros((0, 1)), a_mat=np.zeros((0, 1, 1)),
    )  # fmt: skip


def _loop(z, arrays):
    from stochmix.engine.codegen.segment_kernel import batch_function

    a = arrays
    server = np.empty((1, z.shape[1]))
    return batch_function()(
        z, np.zeros((1, 1), np.int64), np.zeros(1, np.int64), a["P0"], a["t0"], a["t_base"],
        a["t_slot"], a["m0"], a["m_target"], a["m_base"], a["m_slot"], a["m_coef"], a["g0"],
        a["g_target"], a["g_client"], a["g_coef"], a["c0"], a["c_slot"], a["k_kind"],
        a["k_par"], np.zeros(1), 0, 0, 1.0, np.zeros(z.shape[1]), server,
        np.empty((1, z.shape[1])), np.empty((1, z.shape[1]), z.dtype), np.inf, 0, np.zeros(0),
        True, -1, np.empty(z.shape[1], z.dtype), a["k_tab"], a["k_mat"], a["a_off"],
        a["a_diag"], a["a_mat"], np.empty(z.shape[1]),
    )  # fmt: skip


def test_the_loop_stops_at_a_float32_overflow_in_the_round_that_stores_it():
    # 2e38 + 2e38 is finite in the loop's float64 sum and Inf once stored in float32: the
    # round is the one that is not finite, as where the state is checked round by round
    z = np.array([[2e38], [2e38]], dtype=np.float32)
    assert _loop(z, _one_phase(0)) == 0
    assert np.isinf(z[0, 0])
    z = np.array([[1.0], [2.0]], dtype=np.float32)
    assert _loop(z, _one_phase(0)) == 1 and z[0, 0] == 3.0


@pytest.mark.parametrize(
    "kernel, params, source, expected",
    [("shrink", (0.5, 0.0), -2.0, -1.5), ("shrink", (0.5, 0.0), 0.25, 0.0),
     ("shrink_scaled", (0.5, 2.0), 3.0, 1.25), ("clip", (-1.0, 1.0), 3.0, 1.0),
     ("clip", (0.0, np.inf), -3.0, 0.0), ("shrink", (0.5, 0.0), np.nan, np.nan)],
)  # fmt: skip
def test_the_loop_applies_each_kernel_entry_by_entry(kernel, params, source, expected):
    z = np.array([[7.0], [source]])
    done = _loop(z, _one_phase(SLOT_KERNELS[kernel], params))
    np.testing.assert_array_equal(z[:, 0], [expected, source])
    assert done == (0 if np.isnan(expected) else 1)  # a NaN stays NaN, and stops the loop

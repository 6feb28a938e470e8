"""Nonlinear phases (row maps, issue 15) and the methods built on them: FedAdam / FedYogi /
FedAdagrad, FedProx (exact prox) and CHOCO-SGD with compression, each against a per-client
or per-node reference to 1e-10, plus the papers' claims, the analysis refusal and the
Torch backend."""

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stochmix import run
from stochmix.algorithms import CHOCO, FedAdagrad, FedAdam, FedAdaptive, FedAvg, FedProx, FedYogi
from stochmix.analysis.linear.operators import round_operator
from stochmix.engine import Block, Layout, NonlinearPhaseError, RowMap, map_generator
from stochmix.engine.model.method import RunContext
from stochmix.mixing import RandomSequence, StaticSequence
from stochmix.mixing.compression import QSGD, NoCompression, RandK, TopK, compressor
from stochmix.participation import Bernoulli, Full, Trace
from stochmix.problems import Logistic, Quadratic
from tests import examples
from tests.algorithms.test_method_family import KINDS, assert_close, make_masks, make_problem
from tests.reference.nonlinear import adaptive, choco, fedprox

ROUNDS = 8
COMPRESSIONS = ["none", "top_k:1", "top_k:2", "rand_k:1", "rand_k_unbiased:2", "qsgd:2",
                "qsgd_unscaled:3"]  # fmt: skip


def setup(seed, kind, n):
    rng = np.random.default_rng(seed)
    d = int(rng.integers(1, 4))
    problem = make_problem(rng, n, d, kind)
    return rng, problem, make_masks(rng, ROUNDS, n), rng.normal(size=d), 0.4 / problem.smoothness


# ------------------------------------------------------------------ engine = reference


@settings(max_examples=examples(10), deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    kind=st.sampled_from(KINDS),
    n=st.integers(1, 7),
    local_steps=st.integers(1, 3),
    opt=st.sampled_from(["adam", "yogi", "adagrad"]),
)
def test_adaptive_server_optimizers_equal_reference(seed, kind, n, local_steps, opt):
    rng, problem, masks, x0, lr = setup(seed, kind, n)
    eta, b1, b2 = float(rng.uniform(0.01, 0.5)), float(rng.uniform(0, 0.95)), 0.99
    tau = float(rng.choice([1e-3, 0.1]))
    initial = float(rng.choice([0.0, 0.5]))
    method = FedAdaptive(lr, local_steps, eta, opt, b1, b2, tau, initial)
    got = run(method, problem, Trace(masks), ROUNDS, x0=x0, progress=False).server
    b2 = 0.0 if opt == "adagrad" else b2
    want = adaptive(problem, masks, x0, lr, local_steps, eta, opt, b1, b2, tau, initial)
    assert_close(got, want)


@settings(max_examples=examples(10), deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    kind=st.sampled_from(KINDS),
    n=st.integers(1, 7),
    local_steps=st.integers(1, 3),
    solver=st.sampled_from(["exact", "gradient"]),
)
def test_fedprox_equals_reference(seed, kind, n, local_steps, solver):
    rng, problem, masks, x0, lr = setup(seed, kind, n)
    mu, eta = float(rng.uniform(0.0, 2.0)), float(rng.choice([1.0, 0.7]))
    if solver == "exact":
        mu += 0.1  # least squares with fewer rows than d need mu > 0
    lr = 0.4 / (problem.smoothness + mu)
    method = FedProx(lr, mu, local_steps, eta, solver)
    got = run(method, problem, Trace(masks), ROUNDS, x0=x0, progress=False).server
    assert_close(got, fedprox(problem, masks, x0, lr, mu, local_steps, eta, solver))


@settings(max_examples=examples(10), deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    kind=st.sampled_from(KINDS),
    n=st.integers(2, 7),
    compression=st.sampled_from(COMPRESSIONS),
    noise=st.sampled_from([0.0, 0.1]),
    per_node=st.booleans(),
)
def test_choco_equals_reference(seed, kind, n, compression, noise, per_node):
    rng = np.random.default_rng(seed)
    d = int(rng.integers(2, 5))
    problem = make_problem(rng, n, d, kind)
    graphs = RandomSequence(n, "erdos_renyi", seed=int(rng.integers(2**31)))
    x0 = rng.normal(size=(n, d) if per_node else d)
    lr, gamma, run_seed = 0.2 / problem.smoothness, float(rng.uniform(0.1, 1.0)), int(seed % 1000)
    method = CHOCO(lr, graphs, gamma, compression, channel_noise=noise)
    got = run(method, problem, Full(n), ROUNDS, x0=x0, seed=run_seed, progress=False)
    want, _ = choco(problem, graphs, ROUNDS, x0, lr, gamma, compression, run_seed, noise)
    assert_close(got.server, want)


def test_torch_backend_equals_numpy_for_a_map_method():
    pytest.importorskip("torch")
    rng = np.random.default_rng(3)
    n = 6
    problem = Quadratic.random(n, 4, seed=3)
    masks = make_masks(rng, 10, n)
    for method in (FedYogi(0.05, 2, server_lr=0.05), FedProx(0.05, 0.5, solver="exact")):
        a = run(method, problem, Trace(masks), 10, progress=False).server
        b = run(method, problem, Trace(masks), 10, backend="torch", progress=False).server
        assert_close(b, a)
    graphs = RandomSequence(n, "erdos_renyi", seed=4)
    method = CHOCO(0.05, graphs, 0.5, "rand_k:2", channel_noise=0.01)
    a = run(method, problem, Full(n), 10, seed=7, progress=False).server
    b = run(method, problem, Full(n), 10, seed=7, backend="torch", progress=False).server
    assert_close(b, a)


# ------------------------------------------------------------------ the mechanism


def test_row_map_phase_api_and_rng_derivation():
    layout = Layout([Block("x", 4, "model"), Block("y", 1)])
    ctx = RunContext(layout, 3, 2, seed=11)
    seen = {}

    def double_plus(x, y, *, info):
        seen["rows"], seen["u"] = info.rows, info.rng.random()
        return 2 * x + y

    phase = ctx.map("x", [1, 3], double_plus, "x", ("y", [0]), round=5, label="twice")
    assert isinstance(phase, RowMap) and phase.name == "double_plus"
    np.testing.assert_array_equal(phase.rows, [1, 3])
    z = np.arange(10.0).reshape(5, 2)
    from stochmix.engine.backends import NumpyBackend
    from stochmix.engine.model.rowmap import apply_map

    assert apply_map(z, phase, NumpyBackend(), None, ctx.seed_sequence)
    np.testing.assert_array_equal(z[[1, 3]], [[2 * 2 + 8, 2 * 3 + 9], [2 * 6 + 8, 2 * 7 + 9]])
    np.testing.assert_array_equal(seen["rows"], [1, 3])
    assert seen["u"] == map_generator(11, 5, "twice").random()
    assert map_generator(11, 5, "twice").random() != map_generator(11, 6, "twice").random()
    with pytest.raises(ValueError, match="distinct"):
        ctx.map("x", [1, 1], double_plus, "x", round=0)
    with pytest.raises(ValueError, match="expected 2 or 1"):
        ctx.map("x", [1, 2], double_plus, ("x", [0, 1, 2]), round=0)
    with pytest.raises(NonlinearPhaseError, match="nonlinear row-wise map"):
        phase.matrix()


def test_map_result_shape_and_nonfinite_values_are_caught():
    layout = Layout([Block("x", 3, "model")])
    ctx = RunContext(layout, 2, 2)
    from stochmix.engine.backends import NumpyBackend
    from stochmix.engine.model.rowmap import apply_map

    z = np.ones((3, 2))
    bad = ctx.map("x", [0], lambda x, *, info: np.ones((2, 2)), "x", round=0)
    with pytest.raises(ValueError, match=r"returned shape \(2, 2\), expected \(1, 2\)"):
        apply_map(z, bad, NumpyBackend(), None, ctx.seed_sequence)
    inf = ctx.map("x", [0], lambda x, *, info: x / 0.0, "x", round=0)
    with np.errstate(divide="ignore"):
        assert not apply_map(z, inf, NumpyBackend(), None, ctx.seed_sequence)


def test_analysis_refuses_map_phases():
    problem = Quadratic.random(4, 2, seed=0)
    for method in (FedAdam(0.1), FedProx(0.1, 1.0, solver="exact")):
        with pytest.raises(NonlinearPhaseError, match="nonlinear row-wise map.*only for linear"):
            round_operator(method, problem, np.array([0, 2]))
    round_operator(FedProx(0.1, 1.0), problem, np.array([0, 2]))  # gradient solver: linear


def test_exact_prox_refused_without_closed_form():
    rng = np.random.default_rng(0)
    problem = Logistic.random(4, 2, 5, seed=int(rng.integers(100)))
    with pytest.raises(ValueError, match='closed form.*solver="gradient"'):
        run(FedProx(0.1, 1.0, solver="exact"), problem, Full(4), 2, progress=False)


def test_compressors():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(5, 6))
    top = TopK(2)(x)
    assert ((top != 0).sum(axis=1) == 2).all()
    kept = np.sort(np.abs(x), axis=1)[:, -2:]
    np.testing.assert_allclose(np.sort(np.abs(top), axis=1)[:, -2:], kept)
    rk = RandK(3)(x, np.random.default_rng(1))
    assert ((rk != 0).sum(axis=1) == 3).all() and np.all((rk == 0) | (rk == x))
    np.testing.assert_array_equal(NoCompression()(x, None), x)
    # unbiasedness of the scaled operators, contraction of the CHOCO ones
    draws = np.random.default_rng(2)
    many = np.repeat(x[:1], 20000, axis=0)
    for op in (RandK(2, unbiased=True), QSGD(2, rescale=False)):
        np.testing.assert_allclose(op(many, draws).mean(axis=0), x[0], atol=0.05)
    for op in (TopK(2), RandK(2), QSGD(2)):
        err = ((op(many, draws) - many) ** 2).sum(axis=1).mean()
        assert err <= 1.02 * (1 - op.delta(6)) * (x[0] ** 2).sum() + 1e-9  # sampling noise
    assert compressor("qsgd:4") == QSGD(4) and compressor("rand_k_unbiased:2") == RandK(2, True)
    with pytest.raises(ValueError, match="compression must be"):
        compressor("top_k")
    with pytest.raises(ValueError, match="exceeds the dimension"):
        TopK(7)(x)


# ------------------------------------------------------------------ the papers' claims


@pytest.mark.slow
def test_claim_fedadam_and_fedyogi_converge_under_heterogeneity(unchecked):
    """Full participation, one local step: the pseudo-gradient is -gamma grad f(x_0), and
    the adaptive server reaches x_star to rounding on a heterogeneous quadratic."""
    problem = Quadratic.random(20, 5, heterogeneity=3.0, seed=1)
    # rounds: enough to reach 1e-12 here (FedAdam after about 640, FedYogi after 1840)
    for method, rounds in ((FedAdam(0.05, 1, server_lr=0.01), 900),
                           (FedYogi(0.05, 1, server_lr=0.01), 2100)):  # fmt: skip
        result = run(method, problem, Full(20), rounds, seed=3, progress=False)
        assert result.distance[0] > 1.0
        assert result.distance[-1] < 1e-12, (method.name, result.distance[-1])
    # and beat FedAvg's stall under partial participation with K = 5 (paper's setting)
    part = Bernoulli(np.full(20, 0.3))
    fedavg = run(FedAvg(0.05, 5), problem, part, 600, seed=3, progress=False).distance
    adam = run(FedAdam(0.05, 5, server_lr=0.05), problem, part, 600, seed=3, progress=False)
    assert adam.distance[-100:].mean() < 0.7 * fedavg[-100:].mean()
    ada = run(FedAdagrad(0.05, 1, server_lr=0.03), problem, Full(20), 600, progress=False)
    assert ada.distance[-1] < 0.5 * ada.distance[0]


def _prox_fixed_point(problem, mu):
    """x = mean_i (H_i + mu)^-1 (H_i z_i + mu x), diagonal H: entrywise."""
    h, z = problem.hessians, problem.centers
    a = 1 - np.mean(mu / (h + mu), axis=0)
    return np.mean(h * z / (h + mu), axis=0) / a


@pytest.mark.slow
def test_claim_fedprox_exact_prox_matches_closed_form_and_converges():
    problem = Quadratic.random(10, 4, heterogeneity=2.0, seed=2)
    x0 = np.ones(4)
    mu = 0.7
    # one round, full participation: the server becomes the mean of the closed-form proxes
    one = run(FedProx(1.0, mu, solver="exact"), problem, Full(10), 1, x0=x0, progress=False)
    h, z = problem.hessians, problem.centers
    np.testing.assert_allclose(one.server[1], np.mean((h * z + mu * x0) / (h + mu), axis=0))
    gaps = []
    for mu in (0.5, 5.0, 50.0):
        fixed = _prox_fixed_point(problem, mu)
        # within 1e-10 of it after 14, 51 and 363 rounds
        result = run(FedProx(1.0, mu, solver="exact"), problem, Full(10), 500, progress=False)
        assert np.abs(result.server[-1] - fixed).max() < 1e-10, mu  # linear convergence
        gaps.append(np.linalg.norm(fixed - problem.x_star))
    assert gaps[0] > gaps[1] > gaps[2] > 0  # the bias of heterogeneity shrinks with mu


@pytest.mark.slow
def test_claim_choco_gossip_reaches_consensus_at_a_linear_rate():
    """CHOCO-Gossip (lr = 0): every compressor drives the nodes to the exact average of
    their starting points at a linear rate (Koloskova et al. 2019, Theorem 2)."""
    n, d = 8, 10
    problem = Quadratic.random(n, d, seed=1)
    graphs = RandomSequence(n, "erdos_renyi", seed=3)
    x0 = np.random.default_rng(0).normal(size=(n, d))
    for spec in ("top_k:2", "rand_k:2", "qsgd:4"):
        result = run(CHOCO(0.0, graphs, 0.2, spec), problem, Full(n), 600, x0=x0, seed=2,
                     progress=False)  # fmt: skip
        c = result.consensus
        assert c[-1] < 1e-25 * c[0], spec
        assert c[300] < 1e-6 * c[0], spec  # geometric, not sublinear
        np.testing.assert_allclose(result.server[-1], x0.mean(axis=0), atol=1e-13)


@pytest.mark.slow
def test_claim_choco_sgd_converges_linearly_to_its_fixed_point():
    """With exact gradients CHOCO-SGD (top-k) converges linearly to the point where
    x^ = x - eta grad F(x) and x = W' (x - eta grad F(x)), W' = (1 - gamma) I + gamma W:
    adapt-then-combine DGD's fixed point for W' (a static graph)."""
    n, d = 6, 3
    problem = Quadratic.random(n, d, heterogeneity=1.0, seed=4)
    graph = nx.cycle_graph(n)
    graph.add_edge(0, 3)
    static = StaticSequence(graph)
    w = static.matrix(0, "metropolis").toarray()
    lr, gamma = 0.05, 0.3
    result = run(CHOCO(lr, static, gamma, "top_k:1"), problem, Full(n), 3000, seed=1,
                 progress=False)  # fmt: skip
    h, z = problem.hessians, problem.centers
    fixed = np.empty((n, d))
    for k in range(d):
        mixed = (1 - gamma) * np.eye(n) + gamma * w
        a = gamma * (np.eye(n) - w) + lr * mixed @ np.diag(h[:, k])
        fixed[:, k] = np.linalg.solve(a, lr * mixed @ (h[:, k] * z[:, k]))
    np.testing.assert_allclose(result.server[-1], fixed.mean(axis=0), atol=1e-12)

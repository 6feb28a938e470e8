"""Composite problems and the proximal / primal-dual methods (issue 29).

Regularizers' proxes meet their optimality conditions and agree between NumPy and Torch;
a composite problem's minimiser is certified (prox-gradient residual <= 1e-12) and equals
scikit-learn's Lasso / ElasticNet and SciPy's bounded L-BFGS-B; every method equals its
per-node / per-client reference (tests/reference/composite.py, written from the papers
by someone who had not seen the library) to 1e-10; each paper's claim holds as stated."""

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stochmix import run
from stochmix.algorithms import (
    DGD,
    DLM,
    EXTRA,
    GTSAGA,
    GTSARAH,
    GTSVRG,
    LED,
    NIDS,
    PGEXTRA,
    DecentralizedADMM,
    FedAvg,
    FedDualAvg,
    FedMid,
    FedPD,
    ProxNIDS,
)
from stochmix.mixing import RandomSequence, StaticSequence
from stochmix.participation import Bernoulli, Full, RandomEdge, Trace, UniformSample
from stochmix.problems import (
    L1,
    Box,
    Composite,
    ElasticNet,
    GroupLasso,
    LeastSquares,
    Logistic,
    NonNegative,
    Quadratic,
    regularizer,
)
from tests import examples
from tests.algorithms.test_fedavg_focus import random_masks
from tests.reference.composite import admm, dlm, feddualavg, fedmid, pg_extra, prox_nids

TOL = 1e-10


def close(got, want, tol=TOL):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape
    scale = 1.0 + np.abs(want).max()
    assert np.abs(got - want).max() <= tol * scale, np.abs(got - want).max()


REGULARIZERS = [
    L1(0.3),
    ElasticNet(0.2, 0.5),
    GroupLasso(0.4, 2),
    GroupLasso(0.3, [0, 1, 0, 2, 1, 2]),
    NonNegative(),
    Box(-0.5, [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]),
]


# --------------------------------------------------------------------------- regularizers
def _prox_objective(reg, u, v, t):
    return reg.value(u) + np.sum((u - v) ** 2) / (2 * t)


@pytest.mark.parametrize("reg", REGULARIZERS, ids=repr)
@settings(max_examples=examples(25), deadline=None)
@given(seed=st.integers(0, 2**31 - 1), t=st.floats(0.01, 3.0))
def test_prox_is_the_minimiser_of_its_objective(reg, seed, t):
    """prox_{t r}(v) minimises r(u) + ||u - v||^2 / (2t): no perturbation does better
    (the objective is strongly convex), and rows are independent."""
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(5, 6))
    u = reg.prox(v, t)
    assert u.shape == v.shape
    for row in range(5):
        best = _prox_objective(reg, u[row], v[row], t)
        assert np.isfinite(best)
        for _ in range(20):
            trial = reg.prox((u[row] + 0.05 * rng.normal(size=6))[None], 1e-12)[0]
            assert _prox_objective(reg, trial, v[row], t) >= best - 1e-12
        close(reg.prox(v[row : row + 1], t)[0], u[row], 1e-15)
    steps = rng.uniform(0.1, 2.0, size=5)  # one step per row
    for row in range(5):
        close(reg.prox(v, steps)[row], reg.prox(v[row : row + 1], steps[row])[0], 1e-15)


def test_prox_formulas():
    v = np.array([[-2.0, -0.1, 0.0, 0.2, 3.0]])
    close(L1(0.5).prox(v, 1.0), [[-1.5, 0.0, 0.0, 0.0, 2.5]], 0)
    close(ElasticNet(0.5, 1.0).prox(v, 2.0), [[-1.0 / 3, 0, 0, 0, 2.0 / 3]], 1e-15)
    close(NonNegative().prox(v, 1.0), [[0, 0, 0, 0.2, 3.0]], 0)
    close(Box(-1, 1).prox(v, 1.0), [[-1, -0.1, 0, 0.2, 1]], 0)
    g = GroupLasso(1.0, [0, 0, 1, 1, 1])
    w = np.array([[3.0, 4.0, 0.1, 0.1, 0.1]])
    close(g.prox(w, 1.0), [[3.0 * 0.8, 4.0 * 0.8, 0, 0, 0]], 1e-15)
    assert NonNegative().value(np.array([1.0, -1.0])) == np.inf
    assert Box(-1, 1).value(np.array([0.5, 1.0])) == 0.0


@pytest.mark.parametrize("reg", REGULARIZERS, ids=repr)
def test_torch_prox_equals_numpy(reg):
    torch = pytest.importorskip("torch")
    v = np.random.default_rng(0).normal(size=(7, 6))
    steps = np.linspace(0.1, 1.0, 7)
    for t in (0.7, steps):
        want = reg.prox(v, t)
        got = reg.prox(torch.from_numpy(v), t)
        assert torch.is_tensor(got)
        close(got.numpy(), want, 1e-15)


def test_regularizer_factory_and_bad_weights():
    assert regularizer("l1", weight=0.2) == L1(0.2)
    assert regularizer("box", low=-1, high=2) == Box(-1, 2)
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="weight"):
            L1(bad)
    with pytest.raises(ValueError, match="l2"):
        ElasticNet(0.1, -1.0)
    with pytest.raises(ValueError, match="low must be <= high"):
        Box(1.0, 0.0)
    with pytest.raises(ValueError, match="groups"):
        GroupLasso(0.1, 0)
    with pytest.raises(ValueError, match="regularizer must be one of"):
        regularizer("l0", weight=1)
    with pytest.raises(ValueError, match="groups has 3 labels but the model has 4"):
        Composite(Quadratic.random(3, 4, seed=0), GroupLasso(0.1, [0, 1, 1]))
    with pytest.raises(TypeError, match="regularizer"):
        Composite(Quadratic.random(3, 4, seed=0), 0.1)


# --------------------------------------------------------------------------- the minimiser
def _stacked(problem):
    return problem._rows, problem._rhs


def test_x_star_equals_sklearn_lasso_and_elastic_net():
    sklearn = pytest.importorskip("sklearn.linear_model")
    p = LeastSquares.random(20, 12, rows_per_client=15, support=4, seed=1)
    a, b = _stacked(p)
    m = a.shape[0] / p.n_clients  # f = (m / (2 |rows|)) ||A x - b||^2: sklearn's / m
    for lam in (0.5, 3.0):
        c = Composite(p, L1(lam))
        assert c.residual <= 1e-12
        lasso = sklearn.Lasso(alpha=lam / m, fit_intercept=False, tol=1e-14, max_iter=10**6)
        close(c.x_star, lasso.fit(a, b).coef_, 1e-8)
    c = Composite(p, ElasticNet(1.0, 0.5))
    # sklearn: alpha (rho |w|_1 + (1 - rho)/2 |w|^2) over (1/(2 |rows|)) ||Xw - y||^2
    alpha = (1.0 + 0.5) / m
    net = sklearn.ElasticNet(
        alpha=alpha, l1_ratio=1.0 / 1.5, fit_intercept=False, tol=1e-14, max_iter=10**6
    )
    close(c.x_star, net.fit(a, b).coef_, 1e-8)
    assert c.residual <= 1e-12


def test_x_star_equals_scipy_bounded_lbfgs():
    from scipy.optimize import minimize

    p = LeastSquares.random(10, 6, seed=3)
    for reg, bounds in (
        (Box(-0.3, 0.4), [(-0.3, 0.4)] * 6),
        (NonNegative(), [(0, None)] * 6),
    ):
        c = Composite(p, reg)
        assert c.residual <= 1e-12
        found = minimize(
            p.objective, np.zeros(6), jac=p.gradient, method="L-BFGS-B", bounds=bounds,
            options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 10_000},
        )  # fmt: skip
        close(c.x_star, found.x, 1e-6)
        assert c.objective(c.x_star) <= p.objective(found.x) + 1e-12


def test_metrics_include_the_regularizer():
    p = LeastSquares.random(8, 5, seed=2)
    c = Composite(p, L1(1.0))
    x = c.x_star
    assert abs(c.objective_gap(x)) <= 1e-12
    assert np.linalg.norm(c.gradient(x)) <= 1e-9
    y = x + 0.1
    assert c.objective_gap(y) == pytest.approx(c.objective(y) - c.objective(x), rel=1e-9)
    assert c.objective(y) == pytest.approx(p.objective(y) + np.abs(y).sum())
    zero = Composite(p, L1(0.0))  # r = 0: the smooth problem's minimiser and gradient
    close(zero.x_star, p.x_star, 1e-10)
    close(zero.gradient(y), p.gradient(y), 1e-12)
    result = run(PGEXTRA(0.5 / p.smoothness, StaticSequence(nx.cycle_graph(8))), c, Full(8), 5)
    assert result.objective_gap[0] == pytest.approx(c.objective_gap(result.server[0]))


# --------------------------------------------------------------------------- references
def _setting(seed, n, d, kind):
    rng = np.random.default_rng(seed)
    if kind == "least_squares":
        smooth = LeastSquares.random(n, d, rows_per_client=int(rng.integers(2, 6)), seed=seed)
    else:
        smooth = Quadratic.random(n, d, seed=seed)
    reg = [L1(0.3), ElasticNet(0.2, 0.3), Box(-0.2, 0.3), GroupLasso(0.2, 1)][seed % 4]
    graph = nx.connected_watts_strogatz_graph(n, min(2, n - 1), 0.5, seed=seed) if n > 2 else (
        nx.path_graph(n)
    )  # fmt: skip
    return rng, smooth, Composite(smooth, reg), StaticSequence(graph), graph


def _per_node(problem):
    def grad(i, x):
        return problem.gradients(np.array([i]), x[None])[0]

    return grad


def _prox(problem):
    return lambda v, t: problem.regularizer.prox(v[None], t)[0]


def _node_rows(method, problem, x0, rounds, participation=None, seed=0):
    rows = []
    n = problem.n_clients
    run(
        method, problem, participation or Full(n), rounds, x0=x0, progress=False, seed=seed,
        callback=lambda r, z, ctx: rows.append(np.array(z[ctx.layout.slice("x")])),
    )  # fmt: skip
    return rows


@settings(max_examples=examples(10), deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(2, 7),
    kind=st.sampled_from(["least_squares", "quadratic"]),
)
def test_decentralized_proximal_methods_equal_their_references(seed, n, kind):
    rng, smooth, problem, graphs, _ = _setting(seed, n, 3, kind)
    w = graphs.matrix(0, "metropolis").toarray()
    x0 = rng.normal(size=(n, 3))
    lr, iters = 0.5 / smooth.smoothness, 15
    grad, prox = _per_node(smooth), _prox(problem)
    want = pg_extra(grad, prox, w, x0, lr, iters)[1:]
    for got, ref in zip(_node_rows(PGEXTRA(lr, graphs), problem, x0, iters), want, strict=True):
        close(got, ref)
    c = float(rng.uniform(0.2, 0.9)) / lr
    want = prox_nids(grad, prox, w, x0, lr, iters, c=c)[1:]
    for got, ref in zip(
        _node_rows(ProxNIDS(lr, graphs, c=c), problem, x0, iters), want, strict=True
    ):
        close(got, ref)


@settings(max_examples=examples(10), deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(2, 7),
    kind=st.sampled_from(["least_squares", "quadratic"]),
)
def test_admm_and_dlm_equal_their_references(seed, n, kind):
    rng, smooth, _, graphs, graph = _setting(seed, n, 3, kind)
    adjacency = nx.to_numpy_array(graph, nodelist=range(n))
    x0 = rng.normal(size=(n, 3))
    lr, iters = float(rng.uniform(0.2, 2.0)), 12
    if hasattr(smooth, "hessians_and_linear_terms"):
        hessians, linear = smooth.hessians_and_linear_terms()
    else:
        h = np.asarray(smooth.hessians)
        hessians = np.array([np.diag(row) for row in h]) if h.ndim == 2 else h
        linear = np.einsum("kij,kj->ki", hessians, np.asarray(smooth.centers))
    want = admm(hessians, linear, adjacency, x0, 1.0 / lr, iters)[1:]
    for got, ref in zip(
        _node_rows(DecentralizedADMM(lr, graphs), smooth, x0, iters), want, strict=True
    ):
        close(got, ref)
    step = 1.0 / (smooth.smoothness + 4.0 / lr)
    exact = admm(hessians, linear, adjacency, x0, 1.0 / lr, 3)[-1]
    inexact = DecentralizedADMM(lr, graphs, solver="gradient", local_lr=step, local_steps=400)
    close(_node_rows(inexact, smooth, x0, 3)[-1], exact, 1e-8)  # K gradient steps -> exact
    rho = smooth.smoothness + float(rng.uniform(1, 5))
    c = float(rng.uniform(0.1, 2.0))
    want = dlm(_per_node(smooth), adjacency, x0, c, rho, iters)[1:]
    for got, ref in zip(
        _node_rows(DLM(1.0 / rho, graphs, c), smooth, x0, iters), want, strict=True
    ):
        close(got, ref)


@settings(max_examples=examples(10), deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 8),
    local_steps=st.integers(1, 4),
    kind=st.sampled_from(["least_squares", "quadratic"]),
)
def test_fedmid_and_feddualavg_equal_their_references(seed, n, local_steps, kind):
    rng, smooth, problem, _, _ = _setting(seed, n, 3, kind)
    x0 = rng.normal(size=3)
    masks = random_masks(rng, 12, n, rng.uniform(0.2, 0.9))  # an empty and a full round
    cohorts = [np.flatnonzero(m) for m in masks]
    lr, server_lr = 0.3 / smooth.smoothness, float(rng.uniform(0.5, 1.5))
    grad, prox = _per_node(smooth), _prox(problem)
    for cls, reference in ((FedMid, fedmid), (FedDualAvg, feddualavg)):
        method = cls(lr, local_steps, server_lr)
        got = run(method, problem, Trace(masks), 12, x0=x0, progress=False).server
        close(got, reference(grad, prox, x0, cohorts, local_steps, lr, server_lr))


def test_on_smooth_problems_the_proximal_methods_are_their_smooth_forms():
    p = LeastSquares.random(6, 4, seed=4)
    graphs = RandomSequence(6, "erdos_renyi", seed=2)
    x0 = np.random.default_rng(0).normal(size=(6, 4))
    lr = 0.5 / p.smoothness
    for prox, plain in (
        (PGEXTRA(lr, graphs), EXTRA(lr, graphs)),
        (ProxNIDS(lr, graphs), NIDS(lr, graphs)),
    ):
        close(
            run(prox, p, Full(6), 20, x0=x0).server, run(plain, p, Full(6), 20, x0=x0).server, 1e-12
        )
    masks = random_masks(np.random.default_rng(1), 10, 6, 0.5)
    want = run(FedAvg(lr, 3, 1.2), p, Trace(masks), 10).server
    for cls in (FedMid, FedDualAvg):
        close(run(cls(lr, 3, 1.2), p, Trace(masks), 10).server, want, 1e-12)


# --------------------------------------------------------------------------- claims
def assert_linear(error):
    """Between 1e-2 and 1e-10 the error falls geometrically: every window of a fifth of
    that stretch cuts its envelope (the largest error from there on; the methods need not
    decrease every round) by at least 2x: no stall, no sublinear tail."""
    start = int(np.argmax(error < 1e-2))
    stop = int(np.argmax(error < 1e-10))
    assert 0 <= start < stop, (start, stop)
    m = max(1, (stop - start) // 5)
    window = np.maximum.accumulate(error[start : stop + 1][::-1])[::-1]
    assert np.all(window[m:] < 0.5 * window[:-m])


def _lasso(n=10, d=12, lam=2.0, seed=0):
    smooth = LeastSquares.random(n, d, rows_per_client=12, support=3, heterogeneity=0.5, seed=seed)
    return smooth, Composite(smooth, L1(lam))


@pytest.mark.slow
def test_pg_extra_and_prox_nids_converge_linearly_to_the_composite_minimiser():
    """Shi et al. 2015 (PG-EXTRA) and Li, Shi and Yan 2019 (NIDS): a fixed step reaches
    the exact composite minimiser; with a strongly convex smooth part, linearly (NIDS:
    with the network-independent step 1/L)."""
    smooth, problem = _lasso()
    graphs = StaticSequence(nx.cycle_graph(10))
    for method in (
        PGEXTRA(0.5 / smooth.smoothness, graphs),
        ProxNIDS(1.0 / smooth.smoothness, graphs),
    ):
        res = run(method, problem, Full(10), 350)
        error = res.distance / np.linalg.norm(problem.x_star)
        assert error[-1] < 1e-10, (method.name, error[-1])
        assert res.consensus[-1] < 1e-20
        assert_linear(error)
        support = np.abs(res.server[-1]) > 1e-8
        assert np.array_equal(support, problem.x_star != 0)


def test_admm_with_proximal_local_steps_solves_the_lasso():
    """Decentralized ADMM whose local problems (with r) are solved inexactly by K
    proximal-gradient steps reaches the composite minimiser; the exact solver refuses r."""
    smooth, problem = _lasso()
    graphs = StaticSequence(nx.cycle_graph(10))
    lr = 0.1
    method = DecentralizedADMM(
        lr, graphs, solver="gradient", local_lr=1 / (smooth.smoothness + 4 / lr), local_steps=3
    )
    res = run(method, problem, Full(10), 250)
    assert res.distance[-1] / np.linalg.norm(problem.x_star) < 1e-10
    with pytest.raises(ValueError, match="regularizer"):
        run(DecentralizedADMM(lr, graphs), problem, Full(10), 2)


def test_dgd_with_subgradients_only_approaches_the_minimiser():
    smooth, problem = _lasso()
    graphs = StaticSequence(nx.cycle_graph(10))
    res = run(
        DGD(0.5 / smooth.smoothness, graphs, decay=0.5), problem.with_subgradients(), Full(10), 300
    )
    error = res.distance[-1] / np.linalg.norm(problem.x_star)
    assert 1e-6 < error < 0.2
    with pytest.raises(ValueError, match="indicator"):
        Composite(smooth, Box(-1, 1)).with_subgradients()


def test_admm_and_dlm_converge_linearly():
    """Shi et al. 2014 (ADMM with exact solves) and Ling et al. 2015 (DLM, rho large
    enough): linear convergence to the minimiser on strongly convex problems over a fixed
    connected graph."""
    p = Quadratic.random(8, 4, seed=3)
    graphs = StaticSequence(nx.cycle_graph(8))
    for method, rounds in (
        (DecentralizedADMM(1.0, graphs), 250),
        (DLM(1.0 / (p.smoothness + 4), graphs, 1.0), 350),
    ):
        res = run(method, p, Full(8), rounds)
        error = res.distance / np.linalg.norm(p.x_star)
        assert error[-1] < 1e-10, (method.name, error[-1])
        assert_linear(error)


def test_feddualavg_server_model_is_sparse_where_fedmids_is_not():
    """Yuan, Zaheer and Reddi 2021, the curse of primal averaging: on an L1 problem,
    FedMid's server model (averaged primal models, then the server's prox) is dense, while
    FedDualAvg's (the prox of the averaged dual states) is as sparse as the minimiser."""
    smooth = LeastSquares.random(20, 30, rows_per_client=20, support=5, heterogeneity=0.5, seed=1)
    problem = Composite(smooth, L1(3.0))
    off = problem.x_star == 0
    assert off.sum() == 25
    process = UniformSample(20, 5)
    mid = run(FedMid(0.002, 10), problem, process, 100).server[-1]
    dual = run(FedDualAvg(0.002, 10), problem, process, 100).server[-1]
    assert np.count_nonzero(dual[off]) == 0
    assert np.count_nonzero(mid[off]) >= 5


# --------------------------------------------------------------------------- refusals
def test_smooth_methods_refuse_composite_problems():
    smooth, problem = _lasso()
    graphs = StaticSequence(nx.cycle_graph(10))
    for method in (FedAvg(0.01), EXTRA(0.01, graphs), DLM(0.01, graphs)):
        with pytest.raises(ValueError, match="regularizer .* does not handle"):
            run(method, problem, Full(10), 2)
    run(DGD(0.01, graphs), problem.with_subgradients(), Full(10), 2)
    run(EXTRA(0.01, graphs), problem.smooth, Full(10), 2)


def test_bad_arguments_are_refused():
    graphs = StaticSequence(nx.cycle_graph(4))
    for cls in (DLM, DecentralizedADMM):
        with pytest.raises(ValueError, match="lr"):
            cls(0.0, graphs)
        with pytest.raises(ValueError, match="participation must be Full"):
            run(cls(1.0, graphs), Quadratic.random(4, 2, seed=0), Bernoulli(0.5, n_clients=4), 2)
    with pytest.raises(ValueError, match="local_lr"):
        DecentralizedADMM(1.0, graphs, solver="gradient")
    with pytest.raises(ValueError, match="solver"):
        DecentralizedADMM(1.0, graphs, solver="newton")
    logistic = Logistic.random(4, 3, seed=0)
    with pytest.raises(ValueError, match='solver="gradient"'):
        run(DecentralizedADMM(1.0, graphs), logistic, Full(4), 2)
    with pytest.raises(ValueError, match="local_steps must be one int for FedDualAvg"):
        FedDualAvg(0.1, [1, 2, 3, 4])
    with pytest.raises(ValueError, match="support"):
        LeastSquares.random(4, 3, support=5)


def test_proximal_methods_run_under_gossip():
    smooth, problem = _lasso()
    graphs = StaticSequence(nx.cycle_graph(10))
    res = run(PGEXTRA(0.3 / smooth.smoothness, graphs), problem, RandomEdge(nx.cycle_graph(10)), 50)
    assert np.all(np.isfinite(res.distance))
    with pytest.raises(ValueError, match="doubly stochastic"):
        run(PGEXTRA(0.1, graphs), problem, Bernoulli(0.5, n_clients=10), 2)


# --------------------------------------------------------------------------- configuration
def test_configuration_regularizer_keys():
    from stochmix.config import ConfigError, parse

    base = {
        "problem": {"kind": "least_squares", "n_clients": 6, "dim": 4, "support": 2},
        "graphs": {"kind": "cycle"},
        "methods": [{"kind": "pg_extra", "lr": 0.01}, {"kind": "prox_nids", "lr": 0.01}],
    }
    cases = {
        "l1": ({"reg_l1": 0.5}, L1(0.5)),
        "elastic_net": ({"reg_l1": 0.5, "reg_l2": 0.1}, ElasticNet(0.5, 0.1)),
        "group_lasso": ({"reg_weight": 0.5, "reg_groups": 2}, GroupLasso(0.5, 2)),
        "nonnegative": ({}, NonNegative()),
        "box": ({"reg_low": -1.0, "reg_high": 1.0}, Box(-1.0, 1.0)),
    }
    for name, (keys, want) in cases.items():
        raw = {**base, "problem": {**base["problem"], "regularizer": name, **keys}}
        exp = parse(raw)
        assert isinstance(exp.problem, Composite) and exp.problem.regularizer == want
        resolved = exp.resolved()
        assert resolved["problem"]["regularizer"] == name
        assert parse(resolved).problem.regularizer == want  # the resolved file re-runs
    bad = [
        ({"regularizer": "l0", "reg_l1": 1.0}, "problem.regularizer must be one of"),
        ({"regularizer": "l1"}, "problem.reg_l1 is required"),
        ({"regularizer": "l1", "reg_l1": -1.0}, "weight"),
        ({"regularizer": "l1", "reg_l1": 1.0, "reg_l2": 1.0}, "problem.reg_l2 does not apply"),
        ({"regularizer": "box", "reg_low": 2.0, "reg_high": 1.0}, "low must be <= high"),
    ]
    for keys, message in bad:
        with pytest.raises(ConfigError, match=message):
            parse({**base, "problem": {**base["problem"], **keys}})
    smooth_only = {**base, "methods": [{"kind": "extra", "lr": 0.01}]}
    smooth_only["problem"] = {**base["problem"], "regularizer": "l1", "reg_l1": 0.1}
    with pytest.raises(ConfigError, match=r"methods\[0\] \(extra\): problem has a regularizer"):
        parse(smooth_only)


def test_compact_state_keeps_what_the_prox_phases_read():
    """The liveness probe sees the run's regularizer, so a compact state (the default for
    large runs) keeps the rows the prox maps read: the same numbers as the full state."""
    smooth, problem = _lasso(n=30)
    process = UniformSample(30, 6)
    for cls in (FedMid, FedDualAvg):
        full = run(cls(0.01, 3), problem, process, 6, storage="full", seed=2).server
        compact = run(cls(0.01, 3), problem, process, 6, storage="compact", seed=2).server
        close(compact, full, 0)


# --------------------------------------------------------------------------- FedPD and LED
@settings(max_examples=examples(10), deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 7),
    local_steps=st.integers(1, 4),
    p=st.sampled_from([1.0, 0.5, 0.2]),
)
def test_fedpd_equals_its_reference(seed, n, local_steps, p):
    from stochmix.engine.model.rowmap import map_generator
    from tests.reference.primal_dual import fedpd

    rng = np.random.default_rng(seed)
    problem = Quadratic.random(n, 3, seed=seed)
    x0 = rng.normal(size=3)
    lr, eta = 0.5 / problem.smoothness, float(rng.uniform(0.2, 2.0)) / problem.smoothness
    got = run(FedPD(lr, eta, local_steps, p), problem, Full(n), 15, x0=x0, seed=seed).server
    coins = [
        p == 1.0 or bool(map_generator(np.random.SeedSequence(seed), r, "communicate").random() < p)
        for r in range(15)
    ]
    close(got, fedpd(_per_node(problem), x0, n, local_steps, lr, eta, coins))


@settings(max_examples=examples(10), deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(2, 7), local_steps=st.integers(1, 5))
def test_led_equals_its_reference(seed, n, local_steps):
    from tests.reference.primal_dual import led

    rng, smooth, _, graphs, _ = _setting(seed, n, 3, "quadratic")
    w = graphs.matrix(0, "metropolis").toarray()
    x0 = rng.normal(size=(n, 3))
    lr, beta = 0.3 / smooth.smoothness, float(rng.uniform(0.1, 1.0)) / local_steps
    want = led(_per_node(smooth), w, x0, local_steps, lr, 12, beta=beta)[1:]
    got = _node_rows(LED(lr, graphs, local_steps, beta), smooth, x0, 12)
    for a, b in zip(got, want, strict=True):
        close(a, b)


@pytest.mark.slow  # (long: run after the quick suite)
def test_fedpd_is_exact_on_non_iid_clients_where_fedavg_is_not():
    """Zhang et al. 2021: FedPD's fixed point is the exact minimiser whatever the clients'
    data (communicating every round), where FedAvg with the same local steps stalls; with
    alike clients, skipping communication (p = 0.3) loses nothing."""
    problem = Quadratic.random(10, 4, heterogeneity=2.0, seed=1)
    lr = 0.5 / problem.smoothness
    fedpd = run(FedPD(lr, 1.0 / problem.smoothness, 5), problem, Full(10), 150)
    fedavg = run(FedAvg(lr, 5), problem, Full(10), 150)
    assert fedpd.relative_error[-1] < 1e-10
    assert fedavg.relative_error[-1] > 1e-3
    alike = Quadratic.random(10, 4, heterogeneity=0.0, seed=1)
    skipping = run(FedPD(lr, 1.0 / alike.smoothness, 5, p=0.3), alike, Full(10), 300)
    assert skipping.relative_error[-1] < 1e-10


@pytest.mark.slow
def test_led_converges_exactly_with_local_steps_where_local_dgd_does_not():
    """Alghunaim 2024: with K local steps between communications, LED still converges to
    the exact minimiser with a fixed step, linearly."""
    problem = Quadratic.random(8, 4, heterogeneity=2.0, seed=2)
    graph = nx.cycle_graph(8)
    graphs = StaticSequence(graph)
    lr = 0.3 / problem.smoothness
    for steps in (1, 5):
        res = run(LED(lr, graphs, steps), problem, Full(8), 600)
        assert res.relative_error[-1] < 1e-10, steps
        assert_linear(res.relative_error)
    stall = run(LED(lr, graphs, 5, beta=1e-12), problem, Full(8), 600)  # no correction
    assert stall.relative_error[-1] > 1e-3


# --------------------------------------------------------------------------- analysis
def test_exact_operators_cover_the_linear_primal_dual_methods():
    """DLM, LED and FedPD (p = 1) are linear for quadratics: each round's exact affine map
    gives the engine's next state (1e-12), and the fixed point of the static ring's map is
    x_star; ADMM's exact solve is a row map, refused with an error that says so."""
    from stochmix.analysis import fixed_point_under_pattern, round_operator, run_context
    from stochmix.engine.model.rowmap import NonlinearPhaseError

    problem = Quadratic.random(6, 3, diagonal=False, seed=4)
    graphs = StaticSequence(nx.cycle_graph(6))
    lr = 0.3 / problem.smoothness
    everyone = np.ones(6, dtype=bool)
    for method in (DLM(1 / (problem.smoothness + 4), graphs), LED(lr, graphs, 3),
                   FedPD(lr, 1.0 / problem.smoothness, 3)):  # fmt: skip
        states = []
        x0 = np.ones(3)
        keep = states.append
        run(method, problem, Full(6), 5, x0=x0, metrics=(),
            callback=lambda r, z, ctx, keep=keep: keep(np.array(z, copy=True)))  # fmt: skip
        ctx = run_context(method, problem)
        for r in range(5):
            before = ctx.layout.initial(x0) if r == 0 else states[r - 1]
            after = round_operator(method, problem, everyone, r, ctx)(before)
            close(after, states[r], 1e-12)
        end = fixed_point_under_pattern(method, problem, everyone[None, :]).model
        close(end, problem.x_star, 1e-10)
    with pytest.raises(NonlinearPhaseError, match="exact local solve"):
        round_operator(DecentralizedADMM(1.0, graphs), problem, everyone)


# --------------------------------------------------------------------------- backends
def _cuda_available():
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


BACKEND_OPTIONS = [{"backend": "torch"}, {"compiled": True}] + (
    [{"backend": "torch", "device": "cuda"}] if _cuda_available() else []
)


@pytest.mark.parametrize("options", BACKEND_OPTIONS, ids=str)
def test_backends_give_the_numpy_numbers(options):
    """Torch (on the CPU, and on CUDA where one exists) and the compiled NumPy runs give the
    NumPy trajectory of every composite and primal-dual method (1e-12, float64)."""
    if options.get("backend") == "torch":
        pytest.importorskip("torch")
    smooth, problem = _lasso(n=8, d=6)
    graphs = StaticSequence(nx.cycle_graph(8))
    lip = smooth.smoothness
    cases = [
        (PGEXTRA(0.3 / lip, graphs), problem, Full(8)),
        (ProxNIDS(0.5 / lip, graphs), problem, Full(8)),
        (FedMid(0.3 / lip, 3), problem, UniformSample(8, 3)),
        (FedDualAvg(0.3 / lip, 3), problem, UniformSample(8, 3)),
        (DecentralizedADMM(1.0, graphs), smooth, Full(8)),
        (DLM(0.5 / lip, graphs), smooth, Full(8)),
        (LED(0.3 / lip, graphs, 3), smooth, Full(8)),
        (FedPD(0.3 / lip, 1.0 / lip, 3, p=0.5), smooth, Full(8)),
    ]
    for method, data, process in cases:
        want = run(method, data, process, 12, seed=3).server
        close(run(method, data, process, 12, seed=3, **options).server, want, 1e-12)


# --------------------------------------------------------------------------- variance reduction
def _components(problem):
    from stochmix.problems._common import NUMPY_NAMESPACE

    counts = np.asarray(problem.rows_per_client)

    def component(i, j, x):
        return problem._sampled_gradient_formula(
            NUMPY_NAMESPACE, np.array([i]), x[None], np.array([[j]]), np.array([float(counts[i])])
        )[0]

    return component, counts


@settings(max_examples=examples(8), deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(2, 6), batch=st.integers(1, 3))
def test_variance_reduced_tracking_equals_its_reference(seed, n, batch):
    from stochmix.algorithms.variance_reduced import draw_samples
    from tests.reference.variance_reduced import gt_saga, gt_sarah, gt_svrg

    rng = np.random.default_rng(seed)
    problem = LeastSquares.random(n, 3, rows_per_client=(3, 7), reg=0.1, seed=seed)
    graphs = StaticSequence(nx.cycle_graph(n) if n > 2 else nx.path_graph(n))
    w = graphs.matrix(0, "metropolis").toarray()
    x0 = rng.normal(size=(n, 3))
    component, counts = _components(problem)
    lr, iters = 0.05 / problem.smoothness, 14
    picks = [draw_samples(seed, k, counts, batch) for k in range(iters)]
    cases = (
        (GTSVRG(lr, graphs, 4, batch), lambda: gt_svrg(component, counts, w, x0, lr, picks, 4)),
        (GTSARAH(lr, graphs, 5, batch), lambda: gt_sarah(component, counts, w, x0, lr, picks, 5)),
    )
    if batch == 1:  # GT-SAGA draws one sample a node
        saga = [p[:, :1] for p in picks]
        cases += ((GTSAGA(lr, graphs), lambda: gt_saga(component, counts, w, x0, lr, saga)),)
    for method, reference in cases:
        rows = _node_rows(method, problem, x0, iters, seed=seed)
        for got, want in zip(rows, reference()[1:], strict=True):
            close(got, want)


@pytest.mark.slow
def test_variance_reduction_converges_linearly_where_minibatch_tracking_stalls():
    """Xin, Khan and Kar (2020, 2022): with a constant step, GT-SVRG, GT-SAGA and GT-SARAH reach
    the exact minimiser of a strongly convex finite sum linearly; gradient tracking with
    minibatch gradients of the same size stalls at a noise floor (measured in one test)."""
    from stochmix.algorithms import GradientTracking

    problem = LeastSquares.random(5, 3, rows_per_client=10, seed=0)
    graphs = StaticSequence(nx.cycle_graph(5))
    lr, full = 0.02 / problem.smoothness, Full(5)
    for method in (GTSVRG(lr, graphs, 20), GTSARAH(lr, graphs, 20), GTSAGA(lr, graphs)):
        error = run(method, problem, full, 3000).relative_error
        assert error[-1] < 1e-8, method.name
        start, stop = int(np.argmax(error < 1e-2)), int(np.argmax(error < 1e-8))
        envelope = np.maximum.accumulate(error[start : stop + 1][::-1])[::-1]
        m = (stop - start) // 5
        assert np.all(envelope[m:] < 0.5 * envelope[:-m])
    noisy = run(GradientTracking(lr, graphs), problem.minibatch(1), full, 3000).relative_error
    assert noisy[-500:].min() > 1e-3
    with pytest.raises(ValueError, match="finite sum"):
        run(GTSVRG(lr, graphs), Quadratic.random(5, 3, seed=0), full, 2)


def test_wrappers_keep_the_methods_problem_checks():
    """ChannelNoise runs a proximal method on a composite problem, and sizes GT-SAGA's
    table from the problem, as the wrapped methods do themselves."""
    from stochmix.algorithms import ChannelNoise

    smooth, problem = _lasso(n=6, d=4)
    graphs = StaticSequence(nx.cycle_graph(6))
    lr = 0.3 / smooth.smoothness
    want = run(PGEXTRA(lr, graphs), problem, Full(6), 5).server
    # (to rounding: the wrapper takes gradients at its own points, so its mixing phases
    # stay whole-block phases, where PG-EXTRA's round is one program, its products inside)
    close(run(ChannelNoise(PGEXTRA(lr, graphs), 0.0), problem, Full(6), 5).server, want, 1e-15)
    want = run(GTSAGA(lr, graphs), smooth, Full(6), 5).server
    close(run(ChannelNoise(GTSAGA(lr, graphs), 0.0), smooth, Full(6), 5).server, want, 0)
    with pytest.raises(ValueError, match="regularizer"):
        run(ChannelNoise(EXTRA(lr, graphs), 0.0), problem, Full(6), 2)

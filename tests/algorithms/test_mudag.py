"""Mudag (Ye, Luo, Zhou & Zhang 2023, stochmix.algorithms.mudag.Mudag): the engine equals
the per-node reference (tests/reference/mudag.py) to 1e-10 on random problems over a
ring, a random graph and a time-varying sequence; on one network of identical nodes it is
Nesterov's constant-momentum method; its traffic is K rounds of W's edges per iteration;
its arguments and participation are checked at the entry; and the paper's claims hold:
with eta = 1/L, beta = (sqrt(kappa) - 1) / (sqrt(kappa) + 1) and K of order
sqrt(1 / (1 - lambda_2)) log(kappa M / L), gradient computations to 1e-8 grow like
sqrt(kappa) (gradient tracking's like kappa) and do not grow with the network, while
communications grow like sqrt(1 / (1 - lambda_2)) over rings of growing size."""

import math

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stochmix import run
from stochmix.algorithms.mudag import Mudag
from stochmix.mixing import RandomSequence, StaticSequence
from stochmix.participation import Bernoulli, Full, RandomEdge
from stochmix.problems import Quadratic
from tests import examples
from tests.algorithms.test_acc_dngd import (
    conditioned,
    gradient_tracking_iterations,
    iterations_to,
    random_graph,
)
from tests.algorithms.test_method_family import KINDS, assert_close, make_problem
from tests.reference.mudag import mudag


@settings(max_examples=examples(8), deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    kind=st.sampled_from(KINDS),
    n=st.integers(2, 8),
    per_node=st.booleans(),
    by_mu=st.booleans(),
    given_mix=st.booleans(),
)
def test_engine_equals_reference(seed, kind, n, per_node, by_mu, given_mix):
    rng = np.random.default_rng(seed)
    d = int(rng.integers(1, 4))
    problem = make_problem(rng, n, d, kind)
    x0 = rng.normal(size=(n, d) if per_node else d)
    lr, iters, K = float(rng.uniform(0.1, 1.0)) / problem.smoothness, 12, int(rng.integers(1, 5))
    if by_mu:  # the paper's beta = (1 - a) / (1 + a), a = sqrt(mu eta)
        mu = problem.strong_convexity
        a = math.sqrt(mu * lr)
        beta, kwargs = (1.0 - a) / (1.0 + a), {"mu": mu}
    else:
        beta = float(rng.uniform(0.0, 0.95))
        kwargs = {"momentum": beta}
    eta_w = float(rng.uniform(0.0, 0.6)) if given_mix else None
    graphs = [
        StaticSequence(nx.cycle_graph(n)),
        StaticSequence(random_graph(rng, n)),
        RandomSequence(n, "erdos_renyi", seed=int(rng.integers(2**31))),  # time-varying
    ]
    for sequence in graphs:
        method = Mudag(lr, sequence, K, mix_momentum=eta_w, **kwargs)
        assert method.momentum == pytest.approx(beta, rel=1e-15)
        result = run(method, problem, Full(n), iters, x0=x0, progress=False)
        want = mudag(problem, sequence, iters, x0, lr, beta, K, eta_w)
        assert_close(result.server, want)


def test_one_network_of_identical_nodes_is_nesterov():
    """Identical clients from one start stay in consensus whatever W (FastMix keeps a
    consensus), s = grad f(y), and the recursion is Nesterov's constant-momentum scheme,
    written independently: x_{t+1} = y_t - eta grad f(y_t), y_{t+1} = x_{t+1} + beta
    (x_{t+1} - x_t), beta = (sqrt(kappa) - 1) / (sqrt(kappa) + 1) for eta = 1/L."""
    rng = np.random.default_rng(1)
    n, d = 5, 4
    centers = np.tile(rng.normal(size=d), (n, 1))
    hessians = np.tile(np.geomspace(1.0, 50.0, d), (n, 1))
    problem = Quadratic(centers, hessians)
    eta = 1.0 / problem.smoothness
    method = Mudag(eta, StaticSequence(nx.cycle_graph(n)), 3, mu=problem.strong_convexity)
    kappa = problem.smoothness / problem.strong_convexity
    beta = (math.sqrt(kappa) - 1.0) / (math.sqrt(kappa) + 1.0)
    assert method.momentum == pytest.approx(beta, rel=1e-14)
    x0 = rng.normal(size=d)
    result = run(method, problem, Full(n), 40, x0=x0, progress=False)
    h, z = hessians[0], centers[0]
    x, y, want = x0.copy(), x0.copy(), [x0.copy()]
    for _ in range(40):
        new = y - eta * h * (y - z)
        y, x = new + beta * (new - x), new
        want.append(x)
    assert_close(result.server, np.array(want))
    assert result.consensus.max() < 1e-20


def test_reports_x_and_counts_k_rounds_of_ws_edges():
    """node_models are the x rows (what the reference averages); each iteration takes one
    gradient per node (two at the start) and sends, in each of K rounds, one message per
    directed edge carrying two vectors (y - eta s and s): 2 d floats."""
    rng = np.random.default_rng(2)
    n, d, K = 7, 3, 4
    problem = Quadratic.random(n, d, seed=2)
    graph = random_graph(rng, n)
    sequence = StaticSequence(graph)
    lr = 0.5 / problem.smoothness
    x0 = rng.normal(size=(n, d))
    result = run(Mudag(lr, sequence, K, momentum=0.4), problem, Full(n), 5, x0=x0, progress=False)
    want = mudag(problem, sequence, 5, x0, lr, 0.4, K)
    assert_close(result.node_models.mean(axis=0), want[-1])
    assert_close(result.final, result.node_models.mean(axis=0))
    edges = 2 * graph.number_of_edges()
    np.testing.assert_array_equal(result.messages[1:], K * edges)
    np.testing.assert_array_equal(result.floats[1:], K * edges * 2 * d)
    np.testing.assert_array_equal(result.gradients[1:], [2 * n] + [n] * 4)


def test_paper_rounds_is_the_formula():
    assert Mudag.paper_rounds(0.75, 100.0) == math.ceil(math.log(100.0) / 0.5) == 10
    assert Mudag.paper_rounds(0.0, 1.0) == 1  # log(1) = 0: still one round
    assert Mudag.paper_rounds(0.96, 10.0, 2.0, c=0.5) == math.ceil(0.5 * math.log(20.0) / 0.2)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({}, "exactly one of mu"),
        ({"mu": 1.0, "momentum": 0.5}, "mu=1.0 and momentum=0.5"),
        ({"momentum": 1.0}, "momentum must be < 1, got 1.0"),
        ({"momentum": -0.1}, "momentum must be >= 0, got -0.1"),
        ({"mu": 0.0}, "mu must be > 0, got 0.0"),
        ({"mu": 30.0}, "mu=30.0 and lr=0.1"),
        ({"momentum": 0.5, "mix_momentum": 1.0}, "mix_momentum must be < 1, got 1.0"),
        ({"momentum": 0.5, "mix_momentum": -0.5}, "mix_momentum must be >= 0, got -0.5"),
        ({"momentum": 0.5, "mix_rounds": 0}, "mix_rounds"),
        ({"momentum": 0.5, "rule": "nope"}, "rule"),
    ],
)
def test_arguments_refused_at_the_entry(kwargs, message):
    ring = StaticSequence(nx.cycle_graph(4))
    kwargs = {"mix_rounds": 2, **kwargs}
    with pytest.raises(ValueError, match=message):
        Mudag(0.1, ring, **kwargs)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((1.0, 10.0), "lambda2 must be < 1"),
        ((0.5, 0.5), "kappa must be >= 1"),
        ((0.5, 10.0, 0.5), "local_ratio must be >= 1"),
        ((-0.1, 10.0), "lambda2 must be >= 0"),
    ],
)
def test_paper_rounds_refuses_bad_values(args, message):
    with pytest.raises(ValueError, match=message):
        Mudag.paper_rounds(*args)


def test_only_full_participation_runs():
    n = 5
    problem = Quadratic.random(n, 2, seed=0)
    method = Mudag(0.1 / problem.smoothness, StaticSequence(nx.cycle_graph(n)), 2, momentum=0.2)
    for process in (Bernoulli(0.5, n_clients=n), RandomEdge(nx.cycle_graph(n))):
        with pytest.raises(ValueError, match=r"participation must be Full\(n\) for Mudag"):
            run(method, problem, process, 3, progress=False)
    assert np.isfinite(run(method, problem, Full(n), 3, progress=False).final).all()


def test_needs_doubly_stochastic_mixing():
    n = 5
    problem = Quadratic.random(n, 2, seed=0)
    directed = RandomSequence(n, "random_directed", seed=3)
    method = Mudag(0.1 / problem.smoothness, directed, 2, momentum=0.2, rule="row")
    with pytest.raises(ValueError, match="doubly stochastic"):
        run(method, problem, Full(n), 3, progress=False)


# ------------------------------------------------------------------ the paper's claims

KAPPAS = (10.0, 100.0, 1000.0)


def slope(xs, counts):
    return float(np.polyfit(np.log(xs), np.log(np.asarray(counts, dtype=float)), 1)[0])


def paper_run(n, kappa, length):
    """Mudag with the paper's tuning on a ring of n nodes and ``conditioned(kappa)``
    (f's Hessian has eigenvalues geomspace(1, kappa): L = kappa, mu = 1 exactly; M =
    problem.smoothness): eta = 1/L, beta from mu, K = paper_rounds(lambda_2, kappa, M/L),
    lambda_2 from LAPACK. Returns (iterations to 1e-8, the run, K, chi = 1/(1 - lambda_2),
    the problem, W)."""
    ring = StaticSequence(nx.cycle_graph(n))
    w = ring.matrix(0, "metropolis").toarray()
    lambda2 = float(np.linalg.eigvalsh(w)[-2])
    problem = conditioned(kappa, n=n)
    big_m = problem.smoothness
    K = Mudag.paper_rounds(lambda2, kappa, big_m / kappa)
    method = Mudag(1.0 / kappa, ring, K, mu=1.0)
    result = run(
        method, problem, Full(n), length, x0=np.zeros(6), metrics=("distance",), progress=False
    )
    return iterations_to(result.relative_error), result, K, 1.0 / (1.0 - lambda2), problem, w


def test_gradient_computations_grow_like_sqrt_kappa(unchecked):
    """The main theorem: O(sqrt(kappa) log(1/eps)) gradient computations per node. Over kappa in
    {10, 100, 1000} on a ring of 8 the iterations to relative error 1e-8 are 50, 180, 589
    (log-log slope 0.54), each one gradient per node (counted independently: n per
    iteration plus n at the start); gradient tracking (DIGing, eta = 0.1 / M, its exact
    errors) needs 2237, 22443, 224496 (slope 1.00)."""
    accelerated, tracking, sent = [], [], []
    for kappa, length in zip(KAPPAS, (60, 200, 620), strict=True):
        reached, result, K, _, problem, w = paper_run(8, kappa, length)
        assert reached is not None, (kappa, result.relative_error[-1])
        accelerated.append(reached)
        assert int(result.gradients[: reached + 1].sum()) == 8 * (reached + 1)
        assert int(result.messages[: reached + 1].sum()) == reached * K * 16  # ring: 16 edges
        sent.append(reached * K)
        tracking.append(gradient_tracking_iterations(problem, w, 0.1 / problem.smoothness)[0])
    rate, contrast = slope(KAPPAS, accelerated), slope(KAPPAS, tracking)
    assert 0.4 < rate < 0.7, (accelerated, rate)
    assert 0.9 < contrast < 1.1, (tracking, contrast)
    assert all(a < t for a, t in zip(accelerated, tracking, strict=True))
    # communications: sqrt(kappa) log(kappa M / L) rounds: 300, 2160, 10013 (slope 0.76)
    assert slope(KAPPAS, sent) < 0.85, sent


def test_communications_grow_like_sqrt_chi_on_growing_rings(unchecked):
    """The main theorem's communication rounds O(sqrt(kappa chi) log(kappa M / L) log(1/eps)),
    chi = 1/(1 - lambda_2): at kappa = 100 on rings of 8, 16 and 32 nodes (chi = 5.1,
    19.7, 78.1) K = 12, 23, 44 rounds per iteration keep the iterations about constant
    (180, 189, 192: the network does not slow the optimisation), so the rounds to 1e-8
    (2160, 4347, 8448) grow like sqrt(chi) (log-log slope 0.50). Gradient tracking
    (eta = 0.1 / M) needs 22443, 24066, 24830 iterations, two rounds of W each."""
    iterations, rounds, chis = [], [], []
    for n in (8, 16, 32):
        reached, result, K, chi, problem, w = paper_run(n, 100.0, 200)
        assert reached is not None, (n, result.relative_error[-1])
        iterations.append(reached)
        assert int(result.messages[: reached + 1].sum()) == reached * K * 2 * n
        rounds.append(reached * K)
        chis.append(chi)
        tracking = gradient_tracking_iterations(problem, w, 0.1 / problem.smoothness)[0]
        assert reached * K < 2 * tracking, (n, reached * K, tracking)
    assert max(iterations) < 1.15 * min(iterations), iterations
    assert 0.4 < slope(chis, rounds) < 0.6, (chis, rounds)

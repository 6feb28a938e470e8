"""APAPC and OPAPC (Kovalev, Salim & Richtárik 2020, stochmix.algorithms.optimal): the
engine equals the per-node reference (tests/reference/opapc.py) to 1e-10 on random
problems over a ring and a random graph; the tuning is the paper's (closed-form spectrum of
a ring); OPAPC's gossip operator is the paper's AcceleratedGossip; the costs counted per
iteration; bad input is refused before any work; and the paper's claims: APAPC's and
OPAPC's gradient steps to relative error 1e-8 grow like sqrt(kappa) (gradient tracking's
like kappa), and OPAPC's communications like sqrt(kappa) sqrt(chi) over rings of growing
size, its iterations independent of chi."""

import math
import warnings

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stochmix import run
from stochmix.algorithms import GradientTracking
from stochmix.algorithms.optimal import APAPC, OPAPC, local_constants
from stochmix.mixing import RandomSequence, StaticSequence
from stochmix.mixing.polynomial import chebyshev
from stochmix.participation import Bernoulli, Full
from stochmix.problems import Logistic, Quadratic
from tests import examples
from tests.algorithms.test_method_family import KINDS, assert_close, make_problem
from tests.reference.opapc import accelerated_gossip, apapc, opapc


def random_graph(rng, n):
    """A random connected graph: G(n, 0.4) plus a path through every node."""
    graph = nx.gnp_random_graph(n, 0.4, seed=int(rng.integers(2**31)))
    graph.add_edges_from(zip(range(n - 1), range(1, n), strict=True))
    return StaticSequence(graph)


def constants(problem):
    """(L, mu) computed independently: the largest and smallest eigenvalue of any H_i."""
    h, _ = problem.hessians_and_linear_terms()
    eig = np.array([np.linalg.eigvalsh(h[i]) for i in range(problem.n_clients)])
    return float(eig[:, -1].max()), float(eig[:, 0].min())


def check_against_reference(problem, graphs, x0, iters, rng):
    n = problem.n_clients
    L, mu = constants(problem)
    assert np.isclose(local_constants(problem)[1], mu, rtol=1e-12)
    assert problem.smoothness >= L * (1 - 1e-12)
    big_l = problem.smoothness  # the method's default L
    tau = float(rng.uniform(0.05, 1.0))
    steps = int(rng.integers(1, 5))
    eta = float(rng.uniform(0.05, 0.5)) / big_l  # lr given: theta follows it
    cases = [
        (APAPC(None, graphs), lambda: apapc(problem, graphs, iters, x0, big_l, mu)),
        (
            APAPC(None, graphs, tau=tau),
            lambda: apapc(problem, graphs, iters, x0, big_l, mu, tau=tau),
        ),
        (OPAPC(None, graphs), lambda: opapc(problem, graphs, iters, x0, big_l, mu)),
        (
            OPAPC(None, graphs, L=2 * L, mu=mu, gossip_steps=steps),
            lambda: opapc(problem, graphs, iters, x0, 2 * L, mu, steps=steps),
        ),
        (APAPC(eta, graphs), lambda: apapc(problem, graphs, iters, x0, big_l, mu, eta=eta)),
        (OPAPC(eta, graphs), lambda: opapc(problem, graphs, iters, x0, big_l, mu, eta=eta)),
    ]
    for method, reference in cases:
        got = run(method, problem, Full(n), iters, x0=x0, progress=False).server
        assert_close(got, reference())


@settings(max_examples=examples(6), deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    kind=st.sampled_from(KINDS),
    n=st.integers(3, 8),
    ring=st.booleans(),
    per_node=st.booleans(),
)
def test_engine_equals_reference(seed, kind, n, ring, per_node):
    rng = np.random.default_rng(seed)
    d = int(rng.integers(1, 4))
    problem = make_problem(rng, n, d, kind)
    x0 = rng.normal(size=(n, d) if per_node else d)
    graphs = StaticSequence(nx.cycle_graph(n)) if ring else random_graph(rng, n)
    check_against_reference(problem, graphs, x0, 12, rng)


def test_engine_equals_reference_on_a_ring_and_a_random_graph():
    rng = np.random.default_rng(7)
    n, d = 7, 3
    for kind in ("full", "least_squares"):
        problem = make_problem(rng, n, d, kind)
        x0 = rng.normal(size=d)
        for graphs in (StaticSequence(nx.cycle_graph(n)), random_graph(rng, n)):
            check_against_reference(problem, graphs, x0, 15, rng)


def test_parameters_are_the_papers():
    n = 8
    ring = StaticSequence(nx.cycle_graph(n))
    problem = Quadratic.random(n, 3, condition=50.0, seed=1)
    L, mu = constants(problem)
    # metropolis on a ring: W = (I + A) / 3, eigenvalues 1/3 + 2/3 cos(2 pi k / n)
    lam = np.sort(1 / 3 + 2 / 3 * np.cos(2 * np.pi * np.arange(n) / n))
    top, low = 1 - lam[0], 1 - lam[-2]  # lambda_max(G) and lambda_min^+(G), G = I - W
    chi, kappa = top / low, problem.smoothness / mu
    method = APAPC(None, ring)
    run(method, problem, Full(n), 1, progress=False)
    c = method.constants
    assert np.isclose(c["lambda_max"], top) and np.isclose(c["chi"], chi)
    assert np.isclose(c["mu"], mu) and c["alpha"] == c["mu"] and c["L"] == problem.smoothness
    tau = min(1.0, 0.5 * math.sqrt(chi / kappa))
    assert np.isclose(c["tau"], tau) and np.isclose(c["eta"], 1 / (4 * tau * c["L"]))
    assert np.isclose(c["theta"], 1 / (c["eta"] * top))
    method = OPAPC(None, ring)
    run(method, problem, Full(n), 1, progress=False)
    c = method.constants
    steps = math.floor(math.sqrt(chi))
    c1 = (math.sqrt(chi) - 1) / (math.sqrt(chi) + 1)
    tau = min(1.0, (1 + c1**steps) / (2 * math.sqrt(kappa) * (1 - c1**steps)))
    assert c["steps"] == steps == 2
    assert np.isclose(c["tau"], tau) and np.isclose(c["eta"], 1 / (4 * tau * c["L"]))
    assert np.isclose(c["theta"], (1 + c1 ** (2 * steps)) / (c["eta"] * (1 + c1**steps) ** 2))
    fixed = OPAPC(None, ring, L=100.0, mu=2.0, tau=0.3, gossip_steps=3)
    run(fixed, problem, Full(n), 1, progress=False)
    assert fixed.constants["steps"] == 3 and fixed.constants["tau"] == 0.3
    assert fixed.constants["eta"] == 1 / (4 * 0.3 * 100.0) and fixed.constants["alpha"] == 2.0
    given = APAPC(0.01, ring)
    run(given, problem, Full(n), 1, progress=False)
    assert given.constants["eta"] == 0.01 and np.isclose(given.constants["theta"], 1 / (0.01 * top))


def test_chebyshev_operator_is_the_papers_accelerated_gossip():
    """P_T(G) = I - chebyshev(W, T): column by column from AcceleratedGossip, with the
    spectrum on range(G) that the tuning assumes."""
    rng = np.random.default_rng(0)
    n = 9
    w = random_graph(rng, n).matrix(0, "metropolis").toarray()
    g = np.eye(n) - w
    eig = np.linalg.eigvalsh(g)
    chi = eig[-1] / eig[1]
    c1, c2 = (math.sqrt(chi) - 1) / (math.sqrt(chi) + 1), (chi + 1) / (chi - 1)
    c3 = 2 * chi / ((1 + chi) * eig[-1])
    for steps in (1, 2, 5):
        columns = [list(np.eye(n)[:, [j]]) for j in range(n)]
        paper = np.hstack([np.vstack(accelerated_gossip(c, g, steps, c2, c3)) for c in columns])
        ours = np.eye(n) - chebyshev(w, steps).toarray()
        np.testing.assert_allclose(ours, paper, atol=1e-12)
        values = np.linalg.eigvalsh(0.5 * (paper + paper.T))
        assert abs(values[0]) < 1e-12  # kernel span(1)
        power = c1**steps
        assert values[1] >= (1 - power) ** 2 / (1 + power**2) - 1e-12
        assert values[-1] <= (1 + power) ** 2 / (1 + power**2) + 1e-12


def test_costs_per_iteration():
    """One gradient per node per iteration; messages: one round of W's (2|E|) for APAPC,
    T rounds for OPAPC."""
    n = 10
    graph = nx.cycle_graph(n)
    graph.add_edge(0, 5)
    ring = StaticSequence(graph)
    problem = Quadratic.random(n, 2, seed=3)
    for method, rounds in ((APAPC(None, ring), 1), (OPAPC(None, ring), None)):
        result = run(method, problem, Full(n), 5, progress=False)
        rounds = rounds or method.constants["steps"]
        assert rounds >= 2 or method.name == "APAPC"
        assert np.all(result.gradients[1:] == n)
        assert np.all(result.messages[1:] == rounds * 2 * graph.number_of_edges())


def test_bad_input_is_refused_before_any_work():
    n = 5
    ring = StaticSequence(nx.cycle_graph(n))
    with pytest.raises(ValueError, match="graphs must be a fixed graph"):
        APAPC(None, RandomSequence(n, "erdos_renyi", seed=0))
    with pytest.raises(ValueError, match="tau"):
        APAPC(None, ring, tau=1.5)
    with pytest.raises(ValueError, match="mu must be <= L"):
        OPAPC(None, ring, L=1.0, mu=2.0)
    with pytest.raises(ValueError, match="gossip_steps"):
        OPAPC(None, ring, gossip_steps=0)
    with pytest.raises(ValueError, match="L"):
        APAPC(None, ring, L=-1.0)
    with pytest.raises(ValueError, match="lr"):
        OPAPC(-0.1, ring)
    problem = Quadratic.random(n, 2, seed=0)
    with pytest.raises(ValueError, match="participation must be Full"):
        run(APAPC(None, ring), problem, Bernoulli(0.5, n), 3, progress=False)
    logistic = Logistic.random(n, 3, seed=0)
    with pytest.raises(ValueError, match="problem: .*mu=.*Logistic"):
        run(OPAPC(None, ring), logistic, Full(n), 3, progress=False)
    run(OPAPC(None, ring, mu=logistic.strong_convexity), logistic, Full(n), 3, progress=False)
    with pytest.raises(ValueError, match="mu must be <= L"):
        run(APAPC(None, ring, mu=1e6), problem, Full(n), 3, progress=False)
    singular = Quadratic(np.ones((n, 2)), np.array([[1.0, 0.0]] + [[1.0, 1.0]] * (n - 1)))
    with pytest.raises(ValueError, match="problem: every local function"):
        run(APAPC(None, ring), singular, Full(n), 3, progress=False)


# --------------------------------------------------------------------------- claims


def hard_quadratic(n, kappa, d=4, seed=0):
    """Every local Hessian diag(logspace(1, kappa)): L / mu = kappa exactly for every f_i;
    the centers differ, so the nodes must agree."""
    rng = np.random.default_rng(seed)
    h = np.tile(np.logspace(0.0, np.log10(kappa), d), (n, 1))
    return Quadratic(rng.normal(size=(n, d)), h)


def iterations_to(method, problem, rounds, tol=1e-8):
    """The first iteration whose nodes' root mean squared distance to x_star,
    sqrt(||mean - x*||^2 + consensus), is at most ``tol`` times the start's."""
    n = problem.n_clients
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = run(method, problem, Full(n), rounds, progress=False)
    error = np.sqrt(result.distance**2 + result.consensus) / result.distance[0]
    hit = np.flatnonzero(error <= tol)
    assert hit.size, f"{method.name} did not reach {tol} in {rounds} iterations"
    return int(hit[0])


def slope(xs, ys):
    return float(np.polyfit(np.log(xs), np.log(ys), 1)[0])


def test_gradient_steps_grow_like_sqrt_kappa_quick(unchecked):
    """The quick form of the claim below: kappa in {10, 100} on a ring of 8."""
    n = 8
    ring = StaticSequence(nx.cycle_graph(n))
    kappas = [10.0, 100.0]
    for make, budget in ((APAPC, (400, 1200)), (OPAPC, (250, 700))):
        found = [
            iterations_to(make(None, ring), hard_quadratic(n, k), b)
            for k, b in zip(kappas, budget, strict=True)
        ]
        assert 0.35 < slope(kappas, found) < 0.65, (make.name, found)


@pytest.mark.slow
def test_gradient_steps_grow_like_sqrt_kappa(unchecked):
    """kappa in {10, 100, 1000} on a ring of 8 (chi = 6.83): measured 312, 965, 3032
    (APAPC, slope 0.49) and 183, 557, 1742 (OPAPC, slope 0.49) iterations; gradient
    tracking at step 0.2 / kappa: 906, 9135 (slope 1.00)."""
    n = 8
    ring = StaticSequence(nx.cycle_graph(n))
    kappas = [10.0, 100.0, 1000.0]
    budget = {"APAPC": [400, 1200, 3800], "OPAPC": [250, 700, 2200]}
    for make in (APAPC, OPAPC):
        found = [
            iterations_to(make(None, ring), hard_quadratic(n, k), b)
            for k, b in zip(kappas, budget[make.name], strict=True)
        ]
        assert 0.35 < slope(kappas, found) < 0.65, (make.name, found)  # sqrt(kappa)
    tracking = [
        iterations_to(GradientTracking(0.2 / k, ring), hard_quadratic(n, k), rounds)
        for k, rounds in ((10.0, 1200), (100.0, 11000))
    ]
    assert slope(kappas[:2], tracking) > 0.85, tracking  # kappa


def opapc_on_rings(kappa, sizes):
    """(chi, iterations, communication rounds) of OPAPC over rings of the given sizes."""
    chis, found, rounds = [], [], []
    for n in sizes:
        method = OPAPC(None, StaticSequence(nx.cycle_graph(n)))
        found.append(iterations_to(method, hard_quadratic(n, kappa), int(80 * math.sqrt(kappa))))
        chis.append(method.constants["chi"])
        rounds.append(found[-1] * method.constants["steps"])
    return chis, found, rounds


def test_opapc_communications_grow_like_sqrt_chi_quick(unchecked):
    """Rings of 8 to 64 nodes (chi from 6.8 to 415) at kappa = 10: OPAPC's iterations stay
    about the same (measured 183, 159, 156, 140) while its communication rounds T x
    iterations grow like sqrt(chi) (T = floor(sqrt(chi)) = 2, 5, 10, 20)."""
    chis, found, rounds = opapc_on_rings(10.0, (8, 16, 32, 64))
    assert abs(slope(chis, found)) < 0.15, found
    assert 0.35 < slope(chis, rounds) < 0.65, rounds


@pytest.mark.slow
def test_communications_grow_like_sqrt_kappa_chi(unchecked):
    """OPAPC's communication rounds over kappa in {10, 100} and rings of 8, 16, 32 nodes fit
    sqrt(kappa) sqrt(chi) (both exponents near 1/2); APAPC's iterations (one communication
    each) grow with chi too, for contrast (measured 312, 590, 784 at kappa = 10)."""
    sizes = (8, 16, 32)
    logs = []
    for kappa in (10.0, 100.0):
        chis, _, rounds = opapc_on_rings(kappa, sizes)
        logs += [
            (math.log(kappa), math.log(c), math.log(r)) for c, r in zip(chis, rounds, strict=True)
        ]
    a = np.array([[k, c, 1.0] for k, c, _ in logs])
    (on_kappa, on_chi, _), *_ = np.linalg.lstsq(a, np.array([r for *_, r in logs]), rcond=None)
    assert 0.35 < on_kappa < 0.65 and 0.35 < on_chi < 0.65, (on_kappa, on_chi)
    found, chis = [], []
    for n in sizes:
        method = APAPC(None, StaticSequence(nx.cycle_graph(n)))
        found.append(iterations_to(method, hard_quadratic(n, 10.0), 2000))
        chis.append(method.constants["chi"])
    assert slope(chis, found) > 0.3, found

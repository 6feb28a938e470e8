"""Relaxed ADMM (Bastianello et al. 2021): the engine's node-sum form equals the per-node
edge-variable reference (tests/reference/relaxed_admm.py) to 1e-10, alpha = 1/2 is
Shi et al.'s decentralized ADMM, and the paper's claim holds: linear convergence to the
exact minimiser for strongly convex costs with any alpha in (0, 1)."""

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stochmix import run
from stochmix.algorithms import DGD, DecentralizedADMM
from stochmix.algorithms.relaxed_admm import RelaxedADMM
from stochmix.mixing import RandomSequence, StaticSequence
from stochmix.participation import Bernoulli, Full
from stochmix.problems import LeastSquares, Quadratic
from tests import examples
from tests.algorithms.test_method_family import KINDS, assert_close, make_problem
from tests.reference.relaxed_admm import relaxed_admm


def graphs(rng, n):
    """A ring and a connected random graph (a G(n, 0.4) with a path added)."""
    random = nx.gnp_random_graph(n, 0.4, seed=int(rng.integers(2**31)))
    random.add_edges_from(zip(range(n - 1), range(1, n), strict=True))
    return [StaticSequence(nx.cycle_graph(n)), StaticSequence(random)]


@settings(max_examples=examples(12), deadline=None)
@given(seed=st.integers(0, 2**31 - 1), kind=st.sampled_from(KINDS), n=st.integers(2, 8))
def test_engine_equals_reference(seed, kind, n):
    rng = np.random.default_rng(seed)
    d = int(rng.integers(1, 4))
    problem = make_problem(rng, n, d, kind)
    x0, iters = rng.normal(size=d), 10
    rho, alpha = float(rng.uniform(0.2, 3.0)), float(rng.uniform(0.05, 0.95))
    steps = int(rng.integers(1, 4))
    for g in graphs(rng, n):
        gamma = 1.0 / (problem.smoothness + rho * n)
        exact = RelaxedADMM(1.0 / rho, g, alpha)
        got = run(exact, problem, Full(n), iters, x0=x0, progress=False).server
        assert_close(got, relaxed_admm(problem, g, iters, x0, rho, alpha))
        local = RelaxedADMM(1.0 / rho, g, alpha, "gradient", gamma, steps)
        got = run(local, problem, Full(n), iters, x0=x0, progress=False).server
        assert_close(got, relaxed_admm(problem, g, iters, x0, rho, alpha, gamma, steps))


def test_half_relaxation_is_decentralized_admm():
    """alpha = 1/2 with penalty rho is Shi et al.'s ADMM with c = rho / 2 (from x0 = 0,
    where both start with the same local problems)."""
    n, d = 7, 3
    problem = LeastSquares.random(n, d, rows_per_client=(2, 6), reg=0.1, seed=8)
    rng = np.random.default_rng(8)
    for g in graphs(rng, n):
        ours = run(RelaxedADMM(0.4, g), problem, Full(n), 30, x0=np.zeros(d), progress=False)
        shi = run(DecentralizedADMM(0.8, g), problem, Full(n), 30, x0=np.zeros(d), progress=False)
        assert_close(ours.server, shi.server)
        assert ours.relative_error[-1] < 0.05  # it moved (from 1): not two runs that stay at x0


def linear_convergence(which, alphas, iterations):
    n, d = 8, 4
    problem = Quadratic.random(n, d, condition=10.0, seed=4)
    g = graphs(np.random.default_rng(3), n)[which]
    zero = np.zeros(d)
    for alpha in alphas:
        method = RelaxedADMM(0.3, g, alpha)
        err = run(method, problem, Full(n), iterations, x0=zero, progress=False).relative_error
        assert err[-1] < 1e-10, (alpha, err[-1])
        k4, k8 = int(np.argmax(err < 1e-4)), int(np.argmax(err < 1e-8))
        assert 0 < k8 <= 3 * k4, (alpha, k4, k8)  # linear: 4 more digits in about as many
    dgd = run(DGD(0.5 / problem.smoothness, g), problem, Full(n), iterations, x0=zero)
    assert dgd.relative_error[-1] > 1e-3


def test_paper_claim_linear_convergence(unchecked):
    """Bastianello et al. 2021, Sections IV-V: with strongly convex costs R-ADMM converges
    linearly to the exact minimiser: the iterations from relative error 1e-4 to 1e-8 are
    about those from 1 to 1e-4 (a sublinear O(1/k) method would need 10^4 times more).
    DGD with a fixed step, for contrast, stalls away from it. Quick: two alphas, one graph;
    the slow test below covers alpha in (0, 1) on both graphs."""
    linear_convergence(1, (0.5, 0.9), 250)


@pytest.mark.slow
@pytest.mark.parametrize("which", [0, 1])
def test_paper_claim_linear_convergence_for_any_relaxation(which, unchecked):
    """As above for alpha = 0.1, ..., 0.9 on the ring and the random graph."""
    linear_convergence(which, (0.1, 0.3, 0.5, 0.7, 0.9), 700)


def test_arguments_are_checked_at_the_entry():
    ring = StaticSequence(nx.cycle_graph(5))
    for bad in (0.0, 1.0, 1.5, -0.2):
        with pytest.raises(ValueError, match=r"relaxation must be in \(0, 1\), got"):
            RelaxedADMM(1.0, ring, bad)
    with pytest.raises(ValueError, match="local_lr must be given"):
        RelaxedADMM(1.0, ring, solver="gradient")
    with pytest.raises(ValueError, match="local_lr must be None"):
        RelaxedADMM(1.0, ring, local_lr=0.1)
    with pytest.raises(ValueError, match="graphs must be static"):
        RelaxedADMM(1.0, RandomSequence(5, "erdos_renyi", seed=0))
    with pytest.raises(ValueError, match="lr"):
        RelaxedADMM(-1.0, ring)
    problem = LeastSquares.random(5, 2, seed=0)
    with pytest.raises(ValueError, match="participation must be Full"):
        run(RelaxedADMM(1.0, ring), problem, Bernoulli(0.5, 5), 3)

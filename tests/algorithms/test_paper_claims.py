"""The papers' claims, tested as the papers state them (on the engine)."""

import numpy as np
import pytest

from stochmix import run
from stochmix.algorithms import DGD, AmplifiedFedAvg, FedStale, GradientTracking, PushPull
from stochmix.mixing import RandomSequence, is_strongly_connected_union
from stochmix.participation import Bernoulli, Full, Trace
from stochmix.problems import LeastSquares, Quadratic
from tests.reference.amplified import amplified_fedavg

pytestmark = pytest.mark.slow  # minutes of work: run in CI's slow stage (-m slow)

# ---------------------------------------------------------------- Wang & Ji (2022), App. B.1


def wang_ji_example():
    """Three clients F_n(x) = 1/2 ||x - z_n||^2, client 1 alone in round 0, client 2 in
    round 1, client 3 in round 2, and so on; x* is the centroid (0, sqrt(3)/3)."""
    centers = np.array([[-1.0, 0.0], [1.0, 0.0], [0.0, np.sqrt(3.0)]])
    problem = Quadratic(centers, np.ones((3, 2)))
    masks = np.eye(3, dtype=bool)[np.arange(15) % 3]
    return problem, masks, np.array([1.0, 2.0])


# distances ||x_15 - x*|| computed independently from Algorithm 1 (one local step, q = 1)
WANG_JI_DISTANCES = {1: 0.823888603052, 2: 0.352051543927, 5: 0.037479992367, 10: 0.010635749595}


def test_wang_ji_amplification_shrinks_the_distance_after_15_rounds():
    problem, masks, x0 = wang_ji_example()
    np.testing.assert_allclose(problem.x_star, [0.0, np.sqrt(3.0) / 3.0], atol=1e-15)
    distances = {}
    for eta, expected in WANG_JI_DISTANCES.items():
        method = AmplifiedFedAvg(0.05, local_steps=1, amplification=eta, period=3)
        result = run(method, problem, Trace(masks), 15, x0=x0)
        reference = amplified_fedavg(problem, masks, x0, 0.05, 1, eta, 3)
        np.testing.assert_allclose(result.server, reference, atol=1e-12)
        distances[eta] = result.distance[-1]
        assert distances[eta] == pytest.approx(expected, abs=1e-11)
    assert distances[1] > distances[2] > distances[5] > distances[10]


def test_wang_ji_amplification_does_not_remove_the_cyclic_bias():
    """What the example also shows: with a fixed step every eta in (0, 2/(1 - (1-g)^3))
    converges to the same cyclic fixed point, 0.0342 away from x*; amplification only
    gets there faster."""
    problem, _, x0 = wang_ji_example()
    masks = np.eye(3, dtype=bool)[np.arange(600) % 3]
    ends = [
        run(AmplifiedFedAvg(0.05, 1, eta, 3), problem, Trace(masks), 600, x0=x0).final
        for eta in (1, 5)
    ]
    np.testing.assert_allclose(ends[0], ends[1], atol=1e-9)
    assert np.linalg.norm(ends[0] - problem.x_star) == pytest.approx(0.034184, abs=1e-5)


# ------------------------------------------------------------ Rodio & Neglia (2024), Fig. 1


def fedstale_two_clients():
    """Two 2-D quadratics whose optimum is not the mean of the local optima; p1/p2 = 100.

    The paper gives neither the objectives nor the step sizes; these are ours (see the
    README): H1 = [[2, 1], [1, 2]], c1 = (0, 5); H2 = diag(1, 0.2), c2 = (5, 0);
    p = (1, 0.01); client step 3e-3, server step 1, K = 5, T = 4000, start (-10, -10).
    """
    hessians = np.array([[[2.0, 1.0], [1.0, 2.0]], [[1.0, 0.0], [0.0, 0.2]]])
    problem = Quadratic(np.array([[0.0, 5.0], [5.0, 0.0]]), hessians)
    return problem, Bernoulli(np.array([1.0, 0.01]))


def test_fedstale_intermediate_beta_beats_both_ends_on_the_learning_curve(unchecked):
    problem, participation = fedstale_two_clients()
    x0 = np.array([-10.0, -10.0])
    mean_loss = {}
    for beta in (0.0, 0.8, 1.0):
        losses = [
            run(
                FedStale(3e-3, 5, beta),
                problem,
                participation,
                4000,
                x0=x0,
                seed=seed,
                metrics=("objective",),
            ).objective_gap.mean()
            for seed in range(10)
        ]
        mean_loss[beta] = float(np.mean(losses))
    # measured: 2.449 (FedAvg), 1.791 (beta 0.8), 1.939 (FedVARP)
    assert mean_loss[0.8] < mean_loss[1.0] < mean_loss[0.0]
    assert mean_loss[0.8] < 0.95 * mean_loss[1.0]


# ----------------------------------------------- decentralized: exact vs inexact fixed step


def test_tracking_methods_are_exact_and_dgd_is_not(unchecked):
    n = 10
    problem = LeastSquares.random(n, 5, rows_per_client=8, reg=0.05, heterogeneity=2.0, seed=3)
    undirected = RandomSequence(n, "erdos_renyi", p=0.3, seed=1)
    directed = RandomSequence(n, "random_directed", p=0.2, seed=2)
    assert is_strongly_connected_union(undirected, 0, 1)
    assert is_strongly_connected_union(directed, 0, 1)
    lr = 0.3 / problem.smoothness
    gt = run(GradientTracking(lr, undirected), problem, Full(n), 600)
    pp = run(PushPull(lr, directed), problem, Full(n), 600)
    dgd = run(DGD(lr, undirected), problem, Full(n), 600)
    assert gt.relative_error[-1] < 1e-10 and gt.consensus[-1] < 1e-20
    assert pp.relative_error[-1] < 1e-10 and pp.consensus[-1] < 1e-20
    assert gt.rate() < 0.95 and pp.rate() < 0.95  # linear
    assert dgd.relative_error[-1] > 1e-3  # stalls at an O(lr) distance
    assert dgd.relative_error[-300:].min() > 1e-3
    # and the DGD bias shrinks with the step, as O(lr)
    smaller = run(DGD(lr / 3, undirected), problem, Full(n), 1000, metrics=("distance",))
    assert smaller.relative_error[-300:].mean() < 0.5 * dgd.relative_error[-300:].mean()

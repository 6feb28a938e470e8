"""Sanity checks of the per-client references themselves (no engine involved): the
identities between methods that follow from their definitions, and convergence where the
papers promise it."""

import networkx as nx
import numpy as np
import pytest

from stochmix.mixing import OnePeerExponential, StaticSequence
from stochmix.problems import Quadratic
from tests.reference.amplified import amplified_fedavg
from tests.reference.decentralized import dgd, gradient_tracking, push_pull, push_sum
from tests.reference.fedau import FedAUCounter, fedavg_fedau
from tests.reference.fedavg import fedavg
from tests.reference.fedstale import fedstale, fedvarp, unbiased_fedavg
from tests.reference.mifa import mifa
from tests.reference.scaffold import scaffold

TOL = 1e-12


def setup(seed, n=5, d=3, rounds=10, density=0.5):
    rng = np.random.default_rng(seed)
    problem = Quadratic.random(n, d, seed=seed)
    masks = rng.random((rounds, n)) < density
    if rounds >= 6:
        masks[2] = False  # a round nobody joins
        masks[5] = True  # a full round
    p = rng.uniform(0.2, 1.0, n)
    x0 = rng.normal(size=d)
    lr = 0.3 / problem.smoothness
    return problem, masks, p, x0, lr


def close(got, want, tol=TOL):
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * (1 + np.abs(want).max()))


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("weights", ["uniform", "unbiased"])
def test_amplified_without_amplification_is_fedavg(seed, weights):
    problem, masks, p, x0, lr = setup(seed)
    got = amplified_fedavg(problem, masks, x0, lr, 3, 1.0, 4, weights, p)
    close(got, fedavg(problem, masks, x0, lr, 3, 1.0, weights, p))


def test_amplified_every_round_is_fedavg_with_server_rate():
    problem, masks, p, x0, lr = setup(2)
    got = amplified_fedavg(problem, masks, x0, lr, 2, 2.5, 1, "unbiased", p)
    close(got, fedavg(problem, masks, x0, lr, 2, 2.5, "unbiased", p))


def test_amplified_scales_the_interval_update():
    # Within an interval the rounds are FedAvg's; at its end x = x_t0 + eta (x - x_t0), also
    # when the interval's last round is empty (u is then what the earlier rounds left).
    problem, masks, p, x0, lr = setup(3, rounds=6)
    masks[2] = False
    got = amplified_fedavg(problem, masks, x0, lr, 2, 3.0, 3)
    first = fedavg(problem, masks[:3], x0, lr, 2)
    close(got[:3], first[:3])
    close(got[3], x0 + 3.0 * (first[3] - x0))
    second = fedavg(problem, masks[3:], got[3], lr, 2)
    close(got[3:6], second[:3])
    close(got[6], got[3] + 3.0 * (second[3] - got[3]))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_fedstale_ends(seed):
    problem, masks, p, x0, lr = setup(seed)
    for server_lr in (1.0, 0.7):
        args = (problem, masks, x0, lr, 3)
        close(fedstale(*args, 0.0, server_lr, p), unbiased_fedavg(*args, server_lr, p))
        close(fedstale(*args, 1.0, server_lr, p), fedvarp(*args, server_lr, p))
        close(
            fedstale(*args, 0.0, server_lr, "fedau", cutoff=4),
            unbiased_fedavg(*args, server_lr, "fedau", cutoff=4),
        )
        close(
            fedstale(*args, 1.0, server_lr, "fedau", cutoff=4),
            fedvarp(*args, server_lr, "fedau", cutoff=4),
        )


def test_fedstale_first_round_does_not_depend_on_beta():
    # From h = 0 the stale terms vanish: every beta gives U-FedAvg's (= FedVARP's) first round.
    problem, masks, p, x0, lr = setup(4, rounds=1)
    masks[0, :2] = True
    close(
        fedstale(problem, masks, x0, lr, 2, 0.4, 1.0, p), fedvarp(problem, masks, x0, lr, 2, 1.0, p)
    )


def test_unbiased_fedavg_is_fedavg_with_unbiased_weights():
    problem, masks, p, x0, lr = setup(5)
    close(
        unbiased_fedavg(problem, masks, x0, lr, 2, 0.8, p),
        fedavg(problem, masks, x0, lr, 2, 0.8, "unbiased", p),
    )


def test_fedavg_fedau_is_unbiased_fedavg_with_fedau_estimates():
    problem, masks, p, x0, lr = setup(6, rounds=15, density=0.3)
    close(
        fedavg_fedau(problem, masks, x0, lr, 2, 3, 0.9),
        unbiased_fedavg(problem, masks, x0, lr, 2, 0.9, "fedau", cutoff=3),
    )


def test_fedavg_fedau_full_participation_is_fedavg():
    problem, masks, p, x0, lr = setup(7)
    masks[:] = True
    close(fedavg_fedau(problem, masks, x0, lr, 3, 5, 1.3), fedavg(problem, masks, x0, lr, 3, 1.3))


def test_mifa_full_participation_is_fedavg():
    # Every h_i is overwritten each round, so the update is (1/N) sum of fresh updates from
    # the first round on.
    problem, masks, p, x0, lr = setup(8)
    masks[:] = True
    close(mifa(problem, masks, x0, lr, 3, 0.8), fedavg(problem, masks, x0, lr, 3, 0.8))


def test_mifa_is_fedvarp_with_probabilities_one():
    # With p_i = 1: Delta = 1/N sum_{i not in S} h_i + 1/N sum_{i in S} Delta_i, MIFA's update.
    problem, masks, p, x0, lr = setup(9)
    ones = np.ones(problem.n_clients)
    got = mifa(problem, masks, x0, lr, 2, 0.9)
    close(got, fedvarp(problem, masks, x0, lr, 2, 0.9, ones, skip_empty_rounds=False))
    # Unlike FedAvg, MIFA moves in a round nobody joins (on the stale updates) ...
    assert not np.allclose(got[3], got[2])
    # ... unless told to skip it, as the FedStale authors' aggregator (and FedVARP's
    # default here) does
    skipped = mifa(problem, masks, x0, lr, 2, 0.9, skip_empty_rounds=True)
    close(skipped, fedvarp(problem, masks, x0, lr, 2, 0.9, ones))
    np.testing.assert_array_equal(skipped[3], skipped[2])


@pytest.mark.parametrize("server_lr", [1.0, 0.6])
def test_scaffold_full_participation_one_step_is_gradient_descent(server_lr):
    # With K = 1 and everyone in: c_i+ = grad F_i(x) and c = mean c_i stays true, so
    # x+ = x - lr server_lr (mean grad F_i(x) - mean c_i + c) = x - lr server_lr grad f(x).
    problem, masks, p, x0, lr = setup(10)
    masks[:] = True
    got = scaffold(problem, masks, x0, lr, 1, server_lr)
    x = x0.copy()
    want = [x]
    for _ in range(len(masks)):
        x = x - lr * server_lr * problem.gradient(x)
        want.append(x)
    close(got, np.array(want))


def test_scaffold_empty_round_changes_nothing():
    problem, masks, p, x0, lr = setup(11)
    got = scaffold(problem, masks, x0, lr, 3)
    np.testing.assert_array_equal(got[3], got[2])
    close(scaffold(problem, masks[:3], x0, lr, 3), got[:4])


FEDAU_TRACE = [[1, 0, 0], [0, 0, 0], [1, 0, 1], [0, 0, 0], [0, 0, 0], [1, 0, 0]]


def test_fedau_counter_by_hand_inclusive():
    counter = FedAUCounter(3, cutoff=3, timing="inclusive")
    omegas = [counter.step(np.array(m, dtype=bool)) for m in FEDAU_TRACE]
    np.testing.assert_array_equal(omegas[0], [1.0, np.nan, np.nan])
    np.testing.assert_array_equal(omegas[1], [1.0, np.nan, np.nan])
    np.testing.assert_array_equal(omegas[2], [1.5, 3.0, 3.0])  # client 1 hits the cutoff
    np.testing.assert_array_equal(omegas[5], [2.0, 3.0, 3.0])  # 1, 2, 3 ; 3, 3 ; 3, 3


def test_fedau_counter_by_hand_authors():
    # the same intervals are recorded; a participation is weighed by those recorded before
    # its round (1 while there is none)
    counter = FedAUCounter(3, cutoff=3)
    omegas = [counter.step(np.array(m, dtype=bool)) for m in FEDAU_TRACE]
    np.testing.assert_array_equal(omegas[0], [1.0, 1.0, 1.0])  # nothing recorded yet
    np.testing.assert_array_equal(omegas[2], [1.0, 1.0, 1.0])  # client 0: only "1" so far
    np.testing.assert_array_equal(omegas[5], [1.5, 3.0, 3.0])  # client 0: 1, 2 (not 3)
    np.testing.assert_array_equal(counter.omega(), [2.0, 3.0, 3.0])


def test_fedau_counter_estimates_inverse_probability():
    # Bernoulli(p) participation: the intervals are geometric with mean 1/p.
    rng = np.random.default_rng(0)
    p = np.array([0.05, 0.1, 0.2])
    masks = rng.random((5000, 3, 10)) < p[None, :, None]
    counter = FedAUCounter(30, cutoff=10**6)
    for mask in masks.reshape(5000, 30):
        omega = counter.step(mask)
    omega = omega.reshape(3, 10)
    np.testing.assert_allclose(omega.mean(axis=1), 1 / p, rtol=0.06)
    np.testing.assert_allclose(omega, np.broadcast_to(1 / p[:, None], omega.shape), rtol=0.3)


def ring(n):
    return StaticSequence(nx.cycle_graph(n))


def directed_graph(n):
    graph = nx.DiGraph()
    graph.add_edges_from((i, (i + 1) % n) for i in range(n))
    graph.add_edges_from([(0, 3), (2, 6), (5, 1), (7, 4), (0, 5)])
    return StaticSequence(graph)


def distance(history, problem):
    return np.linalg.norm(history[-1] - problem.x_star) / np.linalg.norm(problem.x_star)


@pytest.mark.parametrize(
    ("graphs", "rule"), [(OnePeerExponential(8), "row"), (ring(8), "metropolis")]
)
def test_gradient_tracking_converges(graphs, rule):
    problem = Quadratic.random(8, 3, condition=4.0, seed=1)
    history = gradient_tracking(problem, graphs, 300, np.zeros(3), 0.2 / problem.smoothness, rule)
    assert distance(history, problem) < 1e-10


@pytest.mark.parametrize("graphs", [OnePeerExponential(8), directed_graph(8)])
def test_push_pull_converges(graphs):
    problem = Quadratic.random(8, 3, condition=4.0, seed=2)
    history = push_pull(problem, graphs, 300, np.zeros(3), 0.2 / problem.smoothness)
    assert distance(history, problem) < 1e-10


def test_dgd_with_constant_step_stalls_at_a_bias_of_order_lr():
    problem = Quadratic.random(8, 3, condition=4.0, seed=3)
    errors = []
    for lr in (0.4 / problem.smoothness, 0.1 / problem.smoothness):
        history = dgd(problem, ring(8), 400, np.zeros(3), lr)
        close(history[-1], history[-2], 1e-6)  # settled
        errors.append(distance(history, problem))
    assert errors[0] > 1e-3
    assert errors[1] < 0.5 * errors[0]


def test_push_sum_on_doubly_stochastic_graph_is_dgd_one_step_late():
    # With a static doubly stochastic C the weights stay 1, z^1 = C x0 = x0 and
    # z^{k+2} = C (z^{k+1} - a_k grad F(z^{k+1})): DGD's recursion, so z^{k+1} = x_DGD^k.
    problem = Quadratic.random(8, 3, seed=4)
    x0 = np.arange(3.0)
    lr = 0.3 / problem.smoothness
    for decay in (0.0, 0.5):
        got = push_sum(problem, ring(8), 30, x0, lr, decay)
        close(got[1:], dgd(problem, ring(8), 29, x0, lr, rule="column", decay=decay))


def test_push_sum_removes_the_bias_of_a_directed_graph():
    # On a directed graph column-stochastic mixing alone (DGD with C) keeps a bias that does not
    # shrink with the step; the push-sum ratio z = u / w leaves only a bias of order lr.
    problem = Quadratic.random(8, 3, condition=4.0, seed=3)
    graphs = directed_graph(8)
    push, plain = [], []
    for lr in (0.4 / problem.smoothness, 0.1 / problem.smoothness):
        history = push_sum(problem, graphs, 300, np.zeros(3), lr)
        close(history[-1], history[-2], 1e-6)
        push.append(distance(history, problem))
        plain.append(distance(dgd(problem, graphs, 300, np.zeros(3), lr, rule="column"), problem))
    assert push[1] < 0.5 * push[0]
    assert plain[1] > 0.5 * plain[0]
    assert push[1] < 0.5 * plain[1]

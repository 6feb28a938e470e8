"""Sanity checks of the FedNova and asynchronous (FedBuff, FedAsync) references themselves:
identities with simpler methods that follow from their definitions, hand-worked event
orders, and the objective-inconsistency claim of the FedNova paper."""

import numpy as np
import pytest

from stochmix.problems import Quadratic
from tests.reference.asynchronous import constant, fedasync, fedbuff, hinge, polynomial
from tests.reference.fedavg import fedavg
from tests.reference.fednova import fedavg_uneven, fednova, surrogate_minimizer

TOL = 1e-12


def close(got, want, tol=TOL):
    np.testing.assert_allclose(got, want, rtol=0, atol=tol * (1 + np.abs(want).max()))


def local_sgd(problem, client, x, lr, k):
    x = np.array(x, dtype=float)
    for _ in range(k):
        x = x - lr * problem.gradients(np.array([client]), x[None, :])[0]
    return x


# ------------------------------------------------------------------ staleness functions
def test_staleness_functions():
    assert constant()(0) == 1.0 and constant()(7) == 1.0
    s = polynomial(0.5)
    close(np.array([s(0), s(3), s(8)]), np.array([1.0, 0.5, 1 / 3]))
    h = hinge(2.0, 3)
    assert h(0) == 1.0 and h(3) == 1.0
    close(np.array([h(4), h(6)]), np.array([1 / 3, 1 / 7]))  # 1 / (a (tau - b) + 1)


# ------------------------------------------------------------------ FedNova
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("server_lr", [1.0, 0.7])
def test_fednova_equal_steps_is_fedavg(seed, server_lr):
    rng = np.random.default_rng(seed)
    n, d, rounds, k = 5, 3, 8, 3
    problem = Quadratic.random(n, d, seed=seed)
    masks = rng.random((rounds, n)) < 0.5
    masks[2] = False  # nobody joins
    masks[5] = True
    steps = np.full((rounds, n), k)
    x0 = rng.normal(size=d)
    lr = 0.3 / problem.smoothness
    nova = fednova(problem, masks, steps, x0, lr, server_lr)
    uneven = fedavg_uneven(problem, masks, steps, x0, lr, server_lr)
    plain = fedavg(problem, masks, x0, lr, k, server_lr=server_lr)
    assert nova.shape == (rounds + 1, d)
    close(nova, plain)
    close(uneven, plain)
    close(nova[3], nova[2])  # the empty round
    assert np.abs(nova[-1] - x0).max() > 1e-3


def test_fednova_differs_from_fedavg_with_uneven_steps():
    problem = Quadratic.random(4, 3, seed=5)
    masks = np.ones((3, 4), dtype=bool)
    steps = np.array([[1, 5, 2, 3]] * 3)
    lr = 0.1 / problem.smoothness
    x0 = np.zeros(3)
    nova = fednova(problem, masks, steps, x0, lr)
    avg = fedavg_uneven(problem, masks, steps, x0, lr)
    assert np.abs(nova[-1] - avg[-1]).max() > 1e-3
    # one round by hand: tau_eff * mean(d_i), d_i = (x - x_i) / K_i
    k = steps[0]
    xs = [local_sgd(problem, i, x0, lr, k[i]) for i in range(4)]
    d = np.mean([(x0 - xs[i]) / k[i] for i in range(4)], axis=0)
    close(nova[1], x0 - k.mean() * d)
    close(avg[1], np.mean(xs, axis=0))


def test_surrogate_minimizer_uniform_weights_is_x_star():
    problem = Quadratic.random(6, 4, seed=2, diagonal=False)
    h, b = problem.hessians_and_linear_terms()
    close(surrogate_minimizer(h, b, np.ones(6)), problem.x_star, tol=1e-10)
    close(surrogate_minimizer(h, b, 3 * np.ones(6)), problem.x_star, tol=1e-10)


def test_objective_inconsistency(unchecked):
    """FedNova paper: with K_i local steps, full participation and a small lr, FedAvg
    settles near the minimiser of sum_i K_i f_i, FedNova near the true minimiser. (Runs
    without the runtime shape checks: 800 rounds of per-client loops.)"""
    n, d, rounds = 6, 3, 800
    problem = Quadratic.random(n, d, seed=3, heterogeneity=2.0)
    h, b = problem.hessians_and_linear_terms()
    k = np.array([1, 8, 1, 8, 2, 12])
    x_star = problem.x_star
    x_sur = surrogate_minimizer(h, b, k)
    gap = np.linalg.norm(x_sur - x_star)
    assert gap > 0.3  # the two targets are far apart
    masks = np.ones((rounds, n), dtype=bool)
    steps = np.tile(k, (rounds, 1))
    lr = 0.003
    x0 = np.zeros(d)
    avg = fedavg_uneven(problem, masks, steps, x0, lr)[-1]
    nova = fednova(problem, masks, steps, x0, lr)[-1]
    assert np.linalg.norm(avg - x_sur) < 0.05 * np.linalg.norm(avg - x_star)
    assert np.linalg.norm(nova - x_star) < 0.1 * np.linalg.norm(nova - x_sur)


# ------------------------------------------------------------------ FedBuff
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("staleness", [None, polynomial(0.5)])
def test_fedbuff_synchronous_is_fedavg(seed, staleness):
    """buffer = concurrency = C and equal durations: every cohort of C pulls the same
    model (staleness 0) and the flush is FedAvg over launches[rC:(r+1)C]."""
    rng = np.random.default_rng(seed)
    n, d, c, rounds, k = 7, 3, 3, 6, 4
    problem = Quadratic.random(n, d, seed=seed)
    launches = np.concatenate([rng.permutation(n)[:c] for _ in range(rounds + 1)])
    durations = np.full(len(launches), 1.5)
    x0 = rng.normal(size=d)
    lr = 0.2 / problem.smoothness
    models, times = fedbuff(
        problem, x0, lr, k, 0.8, c, c, launches, durations, rounds, staleness=staleness
    )
    masks = np.zeros((rounds, n), dtype=bool)
    for r in range(rounds):
        masks[r, launches[r * c : (r + 1) * c]] = True
    want = fedavg(problem, masks, x0, lr, k, server_lr=0.8)
    assert models.shape == (rounds + 1, d) and times.shape == (rounds + 1,)
    close(models, want)
    close(times, 1.5 * np.arange(rounds + 1))


def test_fedbuff_by_hand_with_staleness():
    """concurrency 2, buffer 1: a slow task arrives one server update late and is
    down-weighted by s(1)."""
    problem = Quadratic.random(4, 2, seed=4)
    lr, eta, k = 0.1, 0.9, 2
    s = polynomial(0.5)
    x0 = np.array([1.0, -2.0])
    launches = [0, 1, 2, 3]
    durations = [1.0, 2.0, 1.5, 5.0]
    models, times = fedbuff(problem, x0, lr, k, eta, 1, 2, launches, durations, 3, s)
    # t=1: task 0 (pulled x0, version 0) arrives, tau 0; task 2 launches pulling x1
    x1 = x0 + eta * (local_sgd(problem, 0, x0, lr, k) - x0)
    # t=2: task 1 (pulled x0) arrives, version is 1, so tau 1; task 3 launches
    x2 = x1 + eta * s(1) * (local_sgd(problem, 1, x0, lr, k) - x0)
    # t=2.5: task 2 (pulled x1, version 1) arrives at version 2: tau 1
    x3 = x2 + eta * s(1) * (local_sgd(problem, 2, x1, lr, k) - x1)
    close(models, np.array([x0, x1, x2, x3]))
    close(times, np.array([0.0, 1.0, 2.0, 2.5]))


def test_fedbuff_simultaneous_arrivals_and_per_task_steps():
    """buffer 2 with three tasks arriving together: the first two flush (tau 0), the third
    is stale by one when it arrives in the same instant; launches follow the flushes."""
    problem = Quadratic.random(5, 2, seed=6)
    lr, eta = 0.1, 1.0
    s = hinge(2.0, 0)
    x0 = np.array([0.5, 0.5])
    launches = [0, 1, 2, 3, 4]
    steps = [1, 2, 3, 1, 2]
    durations = [1.0, 1.0, 1.0, 1.0, 0.5]
    models, times = fedbuff(problem, x0, lr, steps, eta, 2, 3, launches, durations, 2, s)
    locals_ = [local_sgd(problem, i, x0, lr, steps[i]) for i in range(3)]
    x1 = x0 + eta * ((locals_[0] - x0) + (locals_[1] - x0)) / 2
    # t=1: task 2 arrives after the flush (tau 1, s = 1/3); tasks 3, 4 launch from x1
    stale = s(1) * (locals_[2] - x0)
    # t=1.5: task 4 (client 4, pulled x1, tau 0) completes the buffer
    fresh = local_sgd(problem, 4, x1, lr, steps[4]) - x1
    x2 = x1 + eta * (stale + fresh) / 2
    close(models, np.array([x0, x1, x2]))
    close(times, np.array([0.0, 1.0, 1.5]))


def test_client_in_flight_twice_is_refused():
    problem = Quadratic.random(3, 2, seed=0)
    with pytest.raises(AssertionError):
        fedbuff(problem, np.zeros(2), 0.1, 1, 1.0, 1, 2, [0, 0, 1], [1.0] * 3, 1)


# ------------------------------------------------------------------ FedAsync
@pytest.mark.parametrize("seed", [0, 1])
def test_fedasync_alpha_one_is_sequential_local_sgd(seed):
    rng = np.random.default_rng(seed)
    n, d, rounds = 5, 3, 9
    problem = Quadratic.random(n, d, seed=seed)
    launches = rng.integers(0, n, size=rounds + 1)
    durations = rng.uniform(0.5, 2.0, size=rounds + 1)
    steps = rng.integers(1, 5, size=rounds + 1)
    x0 = rng.normal(size=d)
    lr = 0.2 / problem.smoothness
    models, times = fedasync(
        problem, x0, lr, steps, 1.0, 1, launches, durations, rounds, staleness=constant()
    )
    x = x0.copy()
    want = [x.copy()]
    for j in range(rounds):
        x = local_sgd(problem, launches[j], x, lr, steps[j])
        want.append(x.copy())
    close(models, np.array(want))
    close(times, np.concatenate([[0.0], np.cumsum(durations[:rounds])]))


def test_fedasync_by_hand_with_hinge():
    problem = Quadratic.random(3, 2, seed=8)
    lr, alpha, k = 0.1, 0.6, 3
    s = hinge(1.5, 0)
    x0 = np.array([2.0, 1.0])
    launches = [0, 1, 2]
    durations = [1.0, 3.0, 1.0]
    models, times = fedasync(problem, x0, lr, k, alpha, 2, launches, durations, 3, s)
    x1 = (1 - alpha) * x0 + alpha * local_sgd(problem, 0, x0, lr, k)  # t=1, tau 0
    x2 = (1 - alpha) * x1 + alpha * local_sgd(problem, 2, x1, lr, k)  # t=2, tau 0
    a = alpha * s(2)  # task 1 pulled version 0, arrives at version 2
    x3 = (1 - a) * x2 + a * local_sgd(problem, 1, x0, lr, k)  # t=3
    close(models, np.array([x0, x1, x2, x3]))
    close(times, np.array([0.0, 1.0, 2.0, 3.0]))

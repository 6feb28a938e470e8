"""Minibatch and noisy gradients: unbiased, seeded, and reseeded by every run."""

import numpy as np
import pytest

from stochmix import run
from stochmix.algorithms import FOCUS
from stochmix.participation import Full
from stochmix.problems import LeastSquares, Quadratic


def test_minibatch_gradient_is_unbiased():
    problem = LeastSquares.random(6, 3, rows_per_client=(4, 9), reg=0.2, seed=0)
    mb = problem.minibatch(2, seed=1)
    clients = np.array([0, 3, 3, 5])
    points = np.random.default_rng(2).normal(size=(4, 3))
    draws = np.array([mb.gradients(clients, points) for _ in range(20000)])
    exact = problem.gradients(clients, points)
    stderr = draws.std(axis=0) / np.sqrt(draws.shape[0])
    assert (np.abs(draws.mean(axis=0) - exact) < 5 * stderr + 1e-12).all()
    assert draws.std(axis=0).max() > 0.1  # it is random


def test_full_batch_when_batch_covers_nothing_random_for_single_row_clients():
    problem = LeastSquares.random(4, 2, rows_per_client=1, reg=0.1, seed=0)
    mb = problem.minibatch(3, seed=0)
    clients, points = np.arange(4), np.ones((4, 2))
    np.testing.assert_allclose(mb.gradients(clients, points), problem.gradients(clients, points))


def test_noisy_gradient_mean_and_spread():
    problem = Quadratic.random(3, 2, seed=0)
    noisy = problem.noisy(0.5, seed=0)
    clients, points = np.array([0, 1, 2]), np.zeros((3, 2))
    draws = np.array([noisy.gradients(clients, points) for _ in range(20000)])
    np.testing.assert_allclose(draws.mean(axis=0), problem.gradients(clients, points), atol=0.03)
    np.testing.assert_allclose(draws.std(axis=0), 0.5, rtol=0.05)


def test_runs_are_reproducible_and_seeded():
    problem = LeastSquares.random(5, 3, rows_per_client=6, seed=0).minibatch(2, seed=9)
    lr = 0.05 / (5 * problem.smoothness)
    a = run(FOCUS(lr, 2), problem, Full(5), 20, seed=1)
    b = run(FOCUS(lr, 2), problem, Full(5), 20, seed=1)
    c = run(FOCUS(lr, 2), problem, Full(5), 20, seed=2)
    np.testing.assert_array_equal(a.server, b.server)
    assert not np.array_equal(a.server, c.server)
    assert problem.x_star is problem.problem.x_star


def test_stochastic_wrappers_check_their_arguments():
    with pytest.raises(TypeError, match="no samples"):
        Quadratic.random(3, 2, seed=0).minibatch(2)
    with pytest.raises(ValueError, match="batch_size"):
        LeastSquares.random(3, 2, seed=0).minibatch(0)
    with pytest.raises(ValueError, match="sigma"):
        Quadratic.random(3, 2, seed=0).noisy(-1.0)

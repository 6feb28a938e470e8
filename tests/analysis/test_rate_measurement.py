"""Result.rate(tail=True): the asymptotic rate of a run, the one a certificate bounds, against
rates known independently: a geometric sequence, gradient descent on a quadratic (the
closed form max |1 - lr lambda|) and decentralized runs on quadratics (the spectral radius
of the round's map, computed here with NumPy from the method's recursion)."""

import networkx as nx
import numpy as np
import pytest

import stochmix as sm
from stochmix.algorithms import EXTRA, FedAvg
from stochmix.mixing import StaticSequence
from stochmix.participation import Full
from stochmix.problems import Quadratic


def _geometric(rho, rounds, start=3.0):
    k = np.arange(rounds + 1)
    return sm.Result(
        method="geometric",
        server=np.zeros((rounds + 1, 1)),
        participants=np.zeros(rounds + 1),
        wall_time=np.zeros(rounds + 1),
        distance=start * rho**k,
    )


@pytest.mark.parametrize("rho", [0.3, 0.9, 0.995])
def test_both_fits_are_exact_on_a_geometric_curve(rho):
    result = _geometric(rho, int(np.log(1e-14) / np.log(rho)))
    assert result.rate(tail=True) == pytest.approx(rho, abs=1e-12)
    assert result.rate() == pytest.approx(rho, abs=1e-12)


@pytest.mark.slow  # (long: run after the quick suite)
def test_gradient_descent_rate_is_the_closed_form():
    """FedAvg with one client and one local step is gradient descent: on a diagonal
    quadratic with curvatures lambda its rate is max |1 - lr lambda|: met to 1e-7 when the
    next mode is 5% faster, and never exceeded (a slower second mode lowers the estimate)."""
    worst, strict = 0.0, 0
    for seed in range(8):
        rng = np.random.default_rng(seed)
        dim = int(rng.integers(2, 6))
        lam = np.concatenate([[0.1, 1.0], rng.uniform(0.1, 1.0, dim - 2)])
        lr = float(rng.uniform(0.3, 1.6))
        exact = float(np.max(np.abs(1 - lr * lam)))
        problem = Quadratic(rng.standard_normal((1, dim)), lam[None, :])
        rounds = int(np.log(1e-13) / np.log(exact)) + 20
        result = sm.run(FedAvg(lr, 1), problem, Full(1), rounds, progress=False)
        measured = result.rate(tail=True)
        factors = np.sort(np.abs(1 - lr * lam))
        if factors[-2] < 0.95 * factors[-1]:  # the slowest mode alone in the tail
            assert abs(measured - exact) < 1e-7, (seed, measured, exact)
            strict += 1
        assert abs(measured - exact) < 1e-2, (seed, measured, exact)
        worst = max(worst, measured - exact)
    assert worst < 5e-8  # never above the exact rate
    assert strict >= 2


def _extra_radius(w, h, lr):
    """Spectral radius of EXTRA's second-order recursion (Shi et al. 2015) on parts
    h_i / 2 (x - c_i)^2, W~ = (I + W) / 2: x+ = (I + W - lr H) x - (W~ - lr H) x-; its
    eigenvalue 1 (the direction 1 of x- - x, fixed by the first iteration) left out."""
    n = w.shape[0]
    big = np.block([[np.eye(n) + w - lr * np.diag(h), -(np.eye(n) + w) / 2 + lr * np.diag(h)],
                    [np.eye(n), np.zeros((n, n))]])  # fmt: skip
    values = np.linalg.eigvals(big)  # less the eigenvalue 1 of the conserved sum
    return float(np.max(np.abs(values[np.abs(values - 1.0) > 1e-9])))


def _ring_metropolis(n):
    w = np.zeros((n, n))
    for i in range(n):
        w[i, (i + 1) % n] = w[i, (i - 1) % n] = 1.0 / 3.0
    return w + np.diag(1.0 - w.sum(axis=1))


@pytest.mark.parametrize("seed", range(4))
def test_a_decentralized_run_meets_its_spectral_radius(seed):
    """EXTRA on a ring (Metropolis weights 1/3), scalar parts of curvatures h_i: the
    measured tail rate is the spectral radius of the recursion (one mode per node pair),
    to 1e-6 and never above it by more; the default fit is further off."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(4, 8))
    h = rng.uniform(0.1, 1.0, n)
    exact = _extra_radius(_ring_metropolis(n), h, 0.1)
    problem = Quadratic(rng.standard_normal((n, 1)), h[:, None])
    rounds = int(np.log(1e-13) / np.log(exact)) + 20
    graphs = StaticSequence(nx.cycle_graph(n))
    result = sm.run(EXTRA(0.1, graphs), problem, Full(n), rounds, progress=False)
    measured = result.rate(tail=True)
    assert measured <= exact + 1e-6, (measured, exact)
    assert abs(measured - exact) < 1e-3


def test_tail_is_a_flag():
    with pytest.raises(TypeError, match="tail"):
        _geometric(0.9, 50).rate(tail=1)

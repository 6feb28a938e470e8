"""The lower bounds of Theorem 2 of Scaman et al. 2017 (stochmix.analysis.lower_bounds):
values computed by hand, monotone in kappa and gamma, bad input refused, and MSDA's
measured counts above them."""

import math
import warnings

import networkx as nx
import numpy as np
import pytest

from stochmix import run
from stochmix.algorithms.dual_accelerated import MSDA
from stochmix.analysis.lower_bounds import (
    communication_rounds_lower_bound,
    decentralized_time_lower_bound,
    gradient_steps_lower_bound,
)
from stochmix.mixing import StaticSequence
from stochmix.participation import Full
from stochmix.problems import Quadratic


def test_values_by_hand():
    # kappa = 1024: q = 1 - 16/32 = 1/2; eps = 3 * 2^-10: ln(3/eps) / ln 2 - 1 = 9
    eps = 3 * 2.0**-10
    assert math.isclose(gradient_steps_lower_bound(1024, eps), 9.0)
    # gamma = 0.04: 5 sqrt(gamma) = 1, so the rounds are N itself; gamma = 0.01: 2 N
    assert math.isclose(communication_rounds_lower_bound(1024, 0.04, eps), 9.0)
    assert math.isclose(communication_rounds_lower_bound(1024, 0.01, eps), 18.0)
    # time (1 + tau / (5 sqrt(gamma))) N = (1 + 2) 9
    assert math.isclose(decentralized_time_lower_bound(1024, 0.04, eps, tau=2.0), 27.0)
    assert math.isclose(decentralized_time_lower_bound(1024, 0.04, eps, tau=0.0), 9.0)
    # kappa = 4096: q = 3/4, eps = 3 (3/4)^5: N = 4
    assert math.isclose(gradient_steps_lower_bound(4096, 3 * 0.75**5), 4.0)
    # the theorem says nothing for kappa <= 256, nor before the precision of the start
    assert gradient_steps_lower_bound(256, 1e-8) == 0.0
    assert gradient_steps_lower_bound(100, 1e-8) == 0.0
    assert gradient_steps_lower_bound(1024, 10.0) == 0.0


def theorem_gap(kappa, gamma, tau, t):
    """The right-hand side of Theorem 2 over (alpha / 2) ||theta_0 - theta*||^2, written
    from the statement: 3 (1 - 16 / sqrt(kappa))^(1 + t / (1 + tau / (5 sqrt(gamma))))."""
    spread = 1.0 + tau / (5.0 * math.sqrt(gamma))
    return 3.0 * (1.0 - 16.0 / math.sqrt(kappa)) ** (1.0 + t / spread)


@pytest.mark.parametrize("kappa, gamma, eps, tau", [(1e3, 0.15, 1e-13, 1.0),
                                                     (1e5, 1e-3, 1e-6, 0.0),
                                                     (400.0, 1.0, 1e-2, 30.0)])  # fmt: skip
def test_time_bound_is_where_the_theorems_gap_reaches_eps(kappa, gamma, eps, tau):
    time = decentralized_time_lower_bound(kappa, gamma, eps, tau=tau)
    assert time > 0
    assert math.isclose(theorem_gap(kappa, gamma, tau, time), eps, rel_tol=1e-9)
    assert theorem_gap(kappa, gamma, tau, 0.99 * time) > eps  # not reached before it
    # a procedure of G gradient steps and C rounds one after another takes G + C tau
    steps = gradient_steps_lower_bound(kappa, eps)
    rounds = communication_rounds_lower_bound(kappa, gamma, eps)
    assert math.isclose(steps + rounds * tau, time, rel_tol=1e-12)


@pytest.mark.parametrize("n", [4, 8, 20])
def test_gamma_of_a_metropolis_ring(n):
    """gamma = lambda_{n-1}(G) / lambda_1(G) of G = I - W: on an even ring W's eigenvalues
    are 1/3 + 2/3 cos(2 pi k / n), so gamma = (1 - cos(2 pi / n)) / 2 = sin(pi / n)^2
    (0.1464 at n = 8, the number on the certificates page)."""
    from stochmix.algorithms.dual_accelerated import gossip_spectrum

    top, low = gossip_spectrum(StaticSequence(nx.cycle_graph(n)).matrix(0, "metropolis"))
    assert math.isclose(top, 4.0 / 3.0, rel_tol=1e-12)
    assert math.isclose(low / top, math.sin(math.pi / n) ** 2, rel_tol=1e-10)


def test_monotone():
    kappas = [300, 1000, 1e4, 1e6]
    steps = [gradient_steps_lower_bound(k, 1e-8) for k in kappas]
    assert all(a < b for a, b in zip(steps, steps[1:], strict=False))
    gaps = [1.0, 0.1, 0.01, 1e-4]
    rounds = [communication_rounds_lower_bound(1e4, g, 1e-8) for g in gaps]
    assert all(a < b for a, b in zip(rounds, rounds[1:], strict=False))
    precisions = [1e-2, 1e-4, 1e-8]
    steps = [gradient_steps_lower_bound(1e4, e) for e in precisions]
    assert all(a < b for a, b in zip(steps, steps[1:], strict=False))
    # large kappa: N ~ sqrt(kappa) ln(3 / eps) / 16
    big = gradient_steps_lower_bound(1e10, 1e-8)
    assert math.isclose(big, 1e5 * math.log(3e8) / 16, rel_tol=1e-3)


def test_bad_input_names_the_argument():
    with pytest.raises(ValueError, match="kappa"):
        gradient_steps_lower_bound(0.5, 1e-3)
    with pytest.raises(ValueError, match="eps"):
        gradient_steps_lower_bound(1e3, 0.0)
    with pytest.raises(ValueError, match="gamma"):
        communication_rounds_lower_bound(1e3, 1.5, 1e-3)
    with pytest.raises(ValueError, match="tau"):
        decentralized_time_lower_bound(1e3, 0.5, 1e-3, tau=-1.0)


def test_msda_counts_are_above_the_bounds():
    # The theorem bounds the worst case over the class (its hard instance lives in l2);
    # one finite problem may be easier, so this is a check of MSDA on this problem, with
    # the precision the bounds read (the objective gap over (alpha / 2) ||x0 - x*||^2,
    # here at most kappa times the squared relative distance), not a consequence of it.
    n, d, kappa, eps = 4, 3, 300.0, 1e-2
    rng = np.random.default_rng(0)
    problem = Quadratic(rng.normal(size=(n, d)), np.tile(np.logspace(0, np.log10(kappa), d),
                                                         (n, 1)))  # fmt: skip
    method = MSDA(None, StaticSequence(nx.cycle_graph(n)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = run(method, problem, Full(n), 200, x0=3 * rng.normal(size=d), progress=False)
    # the nodes' objective gap over (alpha / 2) ||x0 - x*||^2, alpha = 1 (every H_i)
    nodes = result.distance**2 + result.consensus  # mean over nodes of ||theta_i - x*||^2
    gap = 0.5 * kappa * nodes / (0.5 * result.distance[0] ** 2)  # >= the objective gaps
    reached = int(np.flatnonzero(gap <= eps)[0])
    steps = gradient_steps_lower_bound(kappa, eps)
    assert steps > 0
    assert reached >= steps  # one conjugate gradient per iteration
    rounds = communication_rounds_lower_bound(kappa, method.constants["gamma"], eps)
    assert reached * method.constants["steps"] >= rounds

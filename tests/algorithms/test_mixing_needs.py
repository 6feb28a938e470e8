"""Decentralized methods check the mixing their convergence needs; a run whose model
grows past the divergence threshold stops as diverged."""

import networkx as nx
import numpy as np
import pytest

import stochmix as sm
from stochmix.algorithms import DGD, GradientTracking, PushPull, PushSum
from stochmix.engine import DivergenceWarning
from stochmix.mixing import OnePeerExponential, RandomSequence, StaticSequence
from stochmix.participation import Full
from stochmix.problems import Quadratic

N = 8


@pytest.fixture
def problem():
    return Quadratic.random(N, 3, seed=0)


def _run(method, problem, rounds=30):
    return sm.run(method, problem, Full(N), rounds, progress=False)


BROKEN = {
    "tracking with row weights on a directed graph": (
        lambda: GradientTracking(0.05, RandomSequence(N, "random_directed", seed=0), rule="row"),
        r"GradientTracking: W_0 under rule='row' is not doubly stochastic \(column",
    ),
    "push-sum with row weights": (
        lambda: PushSum(0.05, RandomSequence(N, "random_directed", seed=0), rule="row"),
        r"PushSum: W_0 under rule='row' is not column-stochastic",
    ),
    "push-pull with its rules swapped": (
        lambda: PushPull(
            0.05,
            RandomSequence(N, "random_directed", seed=0),
            row_rule="column",
            column_rule="row",
        ),
        r"PushPull: W_0 under row_rule='column' is not row-stochastic",
    ),
    "natural weights of a 0/1 adjacency": (
        lambda: DGD(0.05, StaticSequence(nx.cycle_graph(N)), rule="natural"),
        r"DGD: W_0 under rule='natural' is not row-stochastic \(row 0 sums to 2.0",
    ),
    "a disconnected graph": (
        lambda: GradientTracking(
            0.05, StaticSequence(nx.disjoint_union(nx.cycle_graph(4), nx.cycle_graph(4)))
        ),
        r"GradientTracking: the graph of step 0 is not strongly connected \(2 strongly",
    ),
    "self-loops only": (
        lambda: GradientTracking(0.05, StaticSequence(nx.empty_graph(N)), rule="metropolis"),
        "is not strongly connected",
    ),
}


@pytest.mark.parametrize("make, message", BROKEN.values(), ids=BROKEN)
def test_mixing_a_method_cannot_converge_with_is_refused(problem, make, message):
    with pytest.raises(ValueError, match=message):
        _run(make(), problem)


def test_check_mixing_false_runs_broken_mixing_for_research(problem):
    seq = RandomSequence(N, "random_directed", seed=0)
    method = GradientTracking(0.05, seq, rule="row", check_mixing=False)
    res = _run(method, problem)
    assert res.rounds == 30
    with pytest.raises(TypeError, match="check_mixing must be True or False"):
        GradientTracking(0.05, OnePeerExponential(N), check_mixing="no")


def test_a_period_whose_union_is_connected_is_accepted(problem):
    # each step of one-peer exponential is a perfect matching plus loops on 8 nodes: not
    # strongly connected alone, connected over the period
    res = _run(GradientTracking(0.05, OnePeerExponential(N), rule="natural"), problem, 40)
    assert res.relative_error[-1] < res.relative_error[0]
    assert not np.isnan(res.server).any()


def test_random_sequences_are_checked_at_every_step(problem):
    seq = RandomSequence(N, "erdos_renyi", p=0.05, seed=3, connected=False)
    with pytest.raises(ValueError, match=r"the graph of step \d+ is not strongly connected"):
        _run(GradientTracking(0.05, seq), problem)
    connected = RandomSequence(N, "erdos_renyi", p=0.05, seed=3, connected=True)
    assert _run(GradientTracking(0.05, connected), problem).rounds == 30


def test_a_finite_but_huge_model_is_treated_as_diverged(problem):
    method = PushPull(
        0.5,
        RandomSequence(N, "random_directed", seed=0),
        row_rule="column",
        column_rule="row",
        check_mixing=False,
    )  # grows like 1e24 in 300 rounds, never reaching Inf in 600
    with pytest.warns(DivergenceWarning, match="divergence_threshold=1e\\+06"):
        res = sm.run(method, problem, Full(N), 400, divergence_threshold=1e6, progress=False)
    assert res.diverged and res.rounds < 100 and np.isfinite(res.server).all()
    assert np.abs(res.server[-1]).max() > 1e6 * max(1, np.abs(res.server[0]).max())
    with pytest.raises(ValueError, match="divergence_threshold"):
        sm.run(method, problem, Full(N), 4, divergence_threshold=-1.0)

"""K-GT: gradient tracking with local steps, against its per-node reference and its claim."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

import stochmix as sm
from stochmix.algorithms import DGD, KGT
from stochmix.engine.model.layout import Layout
from stochmix.mixing import RandomSequence, StaticSequence
from stochmix.participation import Full
from tests.reference.kgt import kgt


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("local_steps", [1, 3])
@pytest.mark.parametrize("server_lr", [1.0, 0.7])
def test_engine_equals_the_reference(seed, local_steps, server_lr):
    rng = np.random.default_rng(seed)
    n, d = 7, 3
    problem = sm.problems.LeastSquares.random(n, d, seed=seed)
    graphs = RandomSequence(n, "erdos_renyi", p=0.6, seed=seed)
    x0 = rng.standard_normal((n, d)) if seed % 2 else rng.standard_normal(d)
    lr = 0.1 / problem.smoothness
    method = KGT(lr, graphs, local_steps, server_lr, check_mixing=False)
    result = sm.run(method, problem, Full(n), 12, x0=x0, metrics=(), progress=False)
    expected = kgt(problem, graphs, 12, x0, lr, local_steps, server_lr)
    np.testing.assert_allclose(result.server, expected, rtol=0, atol=1e-10)


def test_one_local_step_is_gradient_tracking_in_another_variable():
    """With K = 1 and eta_s = 1, y = grad F(x) + c follows x+ = W (x - a y),
    y+ = W y + grad F(x+) - grad F(x): K-GT's iterates are those of that recursion."""
    n, d = 8, 2
    problem = sm.problems.Quadratic.random(n, d, seed=3)
    graphs = StaticSequence(nx.cycle_graph(n))
    lr = 0.2 / problem.smoothness
    kgt_run = sm.run(KGT(lr, graphs), problem, Full(n), 40, metrics=(), progress=False)
    x = np.zeros((n, d))
    w = graphs.matrix(0, "metropolis").toarray()
    y = problem.gradients(np.arange(n), x)
    for _ in range(40):
        new = w @ (x - lr * y)
        y = w @ y + problem.gradients(np.arange(n), new) - problem.gradients(np.arange(n), x)
        x = new
    np.testing.assert_allclose(kgt_run.server[-1], x.mean(axis=0), rtol=0, atol=1e-12)


@pytest.mark.slow
def test_local_steps_reach_the_exact_optimum_where_local_dgd_stalls():
    """The paper's claim: with K local steps and fixed step sizes, K-GT converges linearly
    to the optimum of heterogeneous problems; decentralized gradient descent without a
    correction keeps an O(step) bias."""
    n, d = 10, 4
    problem = sm.problems.LeastSquares.random(n, d, seed=5)
    graphs = StaticSequence(nx.cycle_graph(n))
    lr = 0.1 / problem.smoothness
    run = sm.run(KGT(lr, graphs, local_steps=5), problem, Full(n), 1500, progress=False)
    assert run.relative_error[-1] < 1e-10
    rate = run.rate()
    assert rate < 1.0
    dgd = sm.run(DGD(lr, graphs), problem, Full(n), 1500, progress=False)
    assert dgd.relative_error[-1] > 1e-4


def test_bad_arguments_are_named():
    graphs = StaticSequence(nx.cycle_graph(4))
    with pytest.raises((TypeError, ValueError), match="local_steps"):
        KGT(0.1, graphs, local_steps=0)
    with pytest.raises((TypeError, ValueError), match="server_lr"):
        KGT(0.1, graphs, server_lr=-1.0)
    with pytest.raises(ValueError, match="rule"):
        KGT(0.1, graphs, rule="nope")


def test_communicate_phase_is_one_product_per_block():
    n = 6
    method = KGT(0.05, StaticSequence(nx.cycle_graph(n)), local_steps=2)
    ctx = sm.RunContext(Layout(method.blocks(n)), n, 2)
    method.start(ctx)
    phases = method.round_phases(0, np.arange(n), ctx)
    assert [p.label for p in phases] == ["start", "local step", "local step", "communicate"]
    assert phases[-1].blockwise is not None

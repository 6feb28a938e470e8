"""The built-in methods' rounds in the equation form: the public problem members they read
(affine gradients, sampled gradients), the FedAvg extension point, the shared operator
cache, and the aggregation written as an equation against the averaging matrix."""

import networkx as nx
import numpy as np
import pytest

from stochmix import run
from stochmix.algorithms import DLM, AmplifiedFedAvg, DecentralizedADMM, FedAvg, FedNova
from stochmix.engine import Block, Equations, Layout, RunContext
from stochmix.mixing import RandomSequence, StaticSequence
from stochmix.mixing.federated import average_rows
from stochmix.participation import Bernoulli, Full
from stochmix.problems import L1, Composite, LeastSquares, Logistic, Quadratic
from stochmix.protocols import AffineGradientProblem, FiniteSumProblem


@pytest.mark.parametrize(
    "problem",
    [
        Quadratic.random(5, 3, seed=0),
        Quadratic.random(5, 3, diagonal=False, seed=1),
        LeastSquares.random(5, 3, rows_per_client=(2, 6), reg=0.1, seed=2),
    ],
)
def test_affine_gradients_are_the_gradients(problem):
    assert isinstance(problem, AffineGradientProblem)
    h, c = problem.affine_gradients()
    x = np.random.default_rng(0).normal(size=(5, 3))
    hx = h * x if h.ndim == 2 else np.einsum("nij,nj->ni", h, x)
    np.testing.assert_allclose(hx - c, problem.gradients(np.arange(5), x), atol=1e-12)
    assert not h.flags.writeable or h.ndim == 3  # a Quadratic's own Hessians, read-only


@pytest.mark.parametrize(
    "problem",
    [
        LeastSquares.random(4, 3, rows_per_client=5, reg=0.1, seed=3),
        Logistic.random(4, 3, rows_per_client=5, seed=4),
    ],
)
def test_sampled_gradients_of_every_sample_are_the_gradient(problem):
    assert isinstance(problem, FiniteSumProblem)
    assert not isinstance(Quadratic.random(4, 3, seed=0), FiniteSumProblem)
    clients = np.arange(4)
    x = np.random.default_rng(1).normal(size=(4, problem.dim))
    picks = np.tile(np.arange(5), (4, 1))  # every sample once: scale 1 is the full gradient
    got = problem.sampled_gradients(clients, x, picks, np.ones(4))
    np.testing.assert_allclose(got, problem.gradients(clients, x), atol=1e-12)
    old = problem._sampled_gradient_formula  # the former private name stays
    assert callable(old)
    # the composite forwards both to its smooth part (what the methods look up)
    assert callable(Composite(problem, L1(0.1)).sampled_gradients)


@pytest.mark.parametrize("weights", ["uniform", "unbiased"])
def test_fedavg_aggregate_is_the_averaging_matrix(weights):
    n = 6
    p = np.linspace(0.3, 0.9, n)
    method = FedAvg(0.1, 2, 0.7, weights, probabilities=p)
    ctx = RunContext(Layout(method.blocks(n)), n, 3, p)
    method.start(ctx)
    S = np.array([0, 2, 5])
    phase = method.aggregate(0, S, ctx)
    q = np.full(3, 1 / 3) if weights == "uniform" else 1.0 / (n * p[S])
    want = average_rows(S, q, n, 0.7).tocsr().toarray()
    assert np.array_equal(phase.matrix().toarray(), want)
    assert method.aggregate(0, S[:0], ctx).is_identity


class _Subclass(FedAvg):
    """An override of the documented extension point still drives the round."""

    def aggregate(self, r, participants, ctx, steps=None):
        eq = Equations(ctx)
        (x,) = eq.blocks("x")
        x.server = x[int(participants[0])]
        return eq.build("first participant")


def test_aggregate_override_is_used():
    problem = Quadratic.random(4, 2, seed=0)
    got = run(_Subclass(0.1, 1), problem, Full(4), 1, x0=np.ones(2)).server[-1]
    g = problem.gradients(np.array([0]), np.ones((1, 2)))[0]
    np.testing.assert_allclose(got, np.ones(2) - 0.1 * g, atol=1e-15)


@pytest.mark.parametrize("method", ["dlm", "admm"])
def test_laplacian_operators_live_in_the_shared_cache(method):
    n = 6
    problem = Quadratic.random(n, 2, seed=0)
    graphs = RandomSequence(n, "erdos_renyi", p=0.8, seed=1)
    m = DLM(0.1, graphs) if method == "dlm" else DecentralizedADMM(1.0, graphs)
    run(m, problem, Full(n), 3)
    (key,) = m._mixings  # a non-periodic sequence: one step kept
    assert key == (2, "laplacian")
    static = StaticSequence(nx.cycle_graph(n))
    m = DLM(0.1, static) if method == "dlm" else DecentralizedADMM(1.0, static)
    run(m, problem, Full(n), 3)
    assert (0, "laplacian") in m._mixings


def test_fednova_and_amplified_run_on_equations():
    problem = Quadratic.random(5, 3, seed=0)
    p = np.full(5, 0.6)
    for method in (FedNova(0.1, np.array([1, 2, 3, 1, 2])), AmplifiedFedAvg(0.1, 2, 1.5, 2)):
        res = run(method, problem, Bernoulli(p), 6, seed=0)
        assert np.isfinite(res.server).all()
    layout = Layout([Block("x", 4, "model"), Block("a", 1, "model")])
    ctx = RunContext(layout, 3, 2)
    phases = AmplifiedFedAvg(0.1, 1, 1.5, 1).round_phases(0, np.array([0, 1]), ctx)
    amplify = phases[-1].matrix().toarray()
    assert amplify[0, 0] == 1.5 and amplify[0, 4] == -0.5 and amplify[4, 0] == 1.5

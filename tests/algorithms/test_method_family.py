"""Every method of the family on the one engine equals its per-client reference (1e-10),
on random problems, random masks (with empty and full rounds) and random graph sequences."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stochmix import run
from stochmix.algorithms import (
    DGD,
    MIFA,
    SCAFFOLD,
    AmplifiedFedAvg,
    FedAvg,
    FedStale,
    FedVARP,
    GradientTracking,
    PushPull,
    PushSum,
)
from stochmix.engine import Layout, RunContext
from stochmix.mixing import DirectedRingSequence, OnePeerExponential, RandomSequence
from stochmix.participation import Bernoulli, Full, Trace
from stochmix.problems import LeastSquares, Quadratic
from tests import examples
from tests.reference.amplified import amplified_fedavg
from tests.reference.decentralized import dgd, gradient_tracking, push_pull, push_sum
from tests.reference.fedau import fedavg_fedau
from tests.reference.fedstale import fedstale, fedvarp, unbiased_fedavg
from tests.reference.mifa import mifa
from tests.reference.scaffold import scaffold

ROUNDS = 14
KINDS = ["diagonal", "full", "least_squares"]


def make_problem(rng, n, d, kind):
    seed = int(rng.integers(2**31))
    if kind == "diagonal":
        return Quadratic.random(n, d, seed=seed)
    if kind == "full":
        return Quadratic.random(n, d, diagonal=False, seed=seed)
    return LeastSquares.random(n, d, rows_per_client=(2, 8), reg=0.1, seed=seed)


def make_masks(rng, rounds, n):
    masks = rng.random((rounds, n)) < rng.uniform(0.1, 0.9)
    masks[rng.integers(rounds)] = False  # a round nobody joins
    masks[rng.integers(rounds)] = True
    return masks


def assert_close(got, want):
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10 * (1 + np.abs(want).max()))


case = given(
    seed=st.integers(0, 2**31 - 1),
    kind=st.sampled_from(KINDS),
    n=st.integers(1, 8),
    local_steps=st.integers(1, 3),
)


def setup(seed, kind, n):
    rng = np.random.default_rng(seed)
    d = int(rng.integers(1, 4))
    problem = make_problem(rng, n, d, kind)
    return rng, problem, make_masks(rng, ROUNDS, n), rng.normal(size=d), 0.4 / problem.smoothness


@settings(max_examples=examples(20), deadline=None)
@case
def test_amplified_fedavg(seed, kind, n, local_steps):
    rng, problem, masks, x0, lr = setup(seed, kind, n)
    eta, period = float(rng.choice([0.5, 1.0, 3.0])), int(rng.integers(1, 5))
    weights = str(rng.choice(["uniform", "unbiased"]))
    p = rng.uniform(0.3, 1.0, n)
    method = AmplifiedFedAvg(lr, local_steps, eta, period, weights, probabilities=p)
    got = run(method, problem, Trace(masks), ROUNDS, x0=x0).server
    want = amplified_fedavg(problem, masks, x0, lr, local_steps, eta, period, weights, p)
    assert_close(got, want)


@settings(max_examples=examples(20), deadline=None)
@case
def test_fedstale_fedvarp_unbiased_fedavg(seed, kind, n, local_steps):
    rng, problem, masks, x0, lr = setup(seed, kind, n)
    p = rng.uniform(0.2, 1.0, n)
    beta, eta = float(rng.uniform(0, 1)), float(rng.choice([1.0, 0.7]))
    part = Trace(masks)
    got = run(FedStale(lr, local_steps, beta, eta, p), problem, part, ROUNDS, x0=x0).server
    assert_close(got, fedstale(problem, masks, x0, lr, local_steps, beta, eta, p))
    varp = run(FedVARP(lr, local_steps, eta, p), problem, part, ROUNDS, x0=x0).server
    assert_close(varp, fedvarp(problem, masks, x0, lr, local_steps, eta, p))
    # the two ends of FedStale are the named methods (Rodio & Neglia, eq. 8)
    zero = run(FedStale(lr, local_steps, 0.0, eta, p), problem, part, ROUNDS, x0=x0).server
    unbiased = FedAvg(lr, local_steps, eta, "unbiased", p)
    assert_close(zero, run(unbiased, problem, part, ROUNDS, x0=x0).server)
    assert_close(zero, unbiased_fedavg(problem, masks, x0, lr, local_steps, eta, p))
    one = run(FedStale(lr, local_steps, 1.0, eta, p), problem, part, ROUNDS, x0=x0).server
    assert_close(one, varp)


@settings(max_examples=examples(20), deadline=None)
@case
def test_fedau_weights_and_fedstale_with_fedau(seed, kind, n, local_steps):
    rng, problem, masks, x0, lr = setup(seed, kind, n)
    cutoff = int(rng.integers(1, 6))
    part = Trace(masks)
    fedau = FedAvg(lr, local_steps, weights="fedau", cutoff=cutoff)
    got = run(fedau, problem, part, ROUNDS, x0=x0).server
    assert_close(got, fedavg_fedau(problem, masks, x0, lr, local_steps, cutoff))
    beta = float(rng.uniform(0, 1))
    stale = FedStale(lr, local_steps, beta, probabilities="fedau", cutoff=cutoff)
    got = run(stale, problem, part, ROUNDS, x0=x0).server
    want = fedstale(problem, masks, x0, lr, local_steps, beta, 1.0, "fedau", cutoff)
    assert_close(got, want)


@settings(max_examples=examples(20), deadline=None)
@case
def test_mifa_and_scaffold(seed, kind, n, local_steps):
    rng, problem, masks, x0, lr = setup(seed, kind, n)
    eta = float(rng.choice([1.0, 0.5, 1.5]))
    part = Trace(masks)
    got = run(MIFA(lr, local_steps, eta), problem, part, ROUNDS, x0=x0).server
    assert_close(got, mifa(problem, masks, x0, lr, local_steps, eta))
    got = run(SCAFFOLD(lr, local_steps, eta), problem, part, ROUNDS, x0=x0).server
    assert_close(got, scaffold(problem, masks, x0, lr, local_steps, eta))


def undirected_sequence(rng, n):
    return RandomSequence(n, "erdos_renyi", seed=int(rng.integers(2**31)))


def directed_sequence(rng, n):
    return RandomSequence(n, "random_directed", seed=int(rng.integers(2**31)))


@settings(max_examples=examples(20), deadline=None)
@given(seed=st.integers(0, 2**31 - 1), kind=st.sampled_from(KINDS), n=st.integers(2, 9))
def test_decentralized_methods(seed, kind, n):
    rng = np.random.default_rng(seed)
    d = int(rng.integers(1, 4))
    problem = make_problem(rng, n, d, kind)
    x0, lr, iters = rng.normal(size=d), 0.2 / problem.smoothness, 12
    undirected, directed = undirected_sequence(rng, n), directed_sequence(rng, n)
    decay = float(rng.choice([0.0, 0.5]))

    def engine(method):
        return run(method, problem, Full(n), iters, x0=x0).server

    assert_close(
        engine(DGD(lr, undirected, decay=decay)),
        dgd(problem, undirected, iters, x0, lr, "metropolis", decay),
    )
    assert_close(
        engine(DGD(lr, directed, rule="row")), dgd(problem, directed, iters, x0, lr, "row")
    )
    assert_close(
        engine(GradientTracking(lr, undirected)),
        gradient_tracking(problem, undirected, iters, x0, lr),
    )
    assert_close(engine(PushPull(lr, directed)), push_pull(problem, directed, iters, x0, lr))
    assert_close(
        engine(PushSum(lr, directed, decay=decay)),
        push_sum(problem, directed, iters, x0, lr, decay),
    )


def test_decentralized_refuses_broken_activation_and_wrong_sizes():
    problem = Quadratic.random(4, 2, seed=0)
    with pytest.raises(ValueError, match="participation: GradientTracking needs doubly"):
        run(GradientTracking(0.1, OnePeerExponential(4), rule="natural"), problem,
            Bernoulli(np.full(4, 0.5)), 3)  # fmt: skip
    # DGD pulls: node activation keeps its row-stochastic mixing
    run(DGD(0.1, DirectedRingSequence(4), rule="row"), problem, Bernoulli(np.full(4, 0.5)), 3)
    with pytest.raises(ValueError, match="graphs has 8 nodes"):
        run(DGD(0.1, OnePeerExponential(8), rule="natural"), problem, Full(4), 3)
    with pytest.raises(TypeError, match="graphs"):
        DGD(0.1, "ring")
    with pytest.raises(ValueError, match="rule"):
        GradientTracking(0.1, OnePeerExponential(4), rule="random")


def test_fedstale_arguments():
    with pytest.raises(ValueError, match="beta"):
        FedStale(0.1, 1, beta=1.5)
    with pytest.raises(ValueError, match="probabilities"):
        FedStale(0.1, 1, probabilities="learned")
    problem = Quadratic.random(3, 2, seed=0)
    masks = np.ones((2, 3), dtype=bool)
    with pytest.raises(ValueError, match="probabilities"):
        run(FedStale(0.1, 1, 0.5), problem, Trace(masks), 2)  # the trace knows no p_i
    with pytest.raises(ValueError, match="amplification"):
        AmplifiedFedAvg(0.1, 1, amplification=0.0, period=2)
    with pytest.raises(ValueError, match="period"):
        AmplifiedFedAvg(0.1, 1, amplification=2.0, period=0)


class CountingQuadratic(Quadratic):
    """A quadratic that records which clients each gradient evaluation was for."""

    def __init__(self, base):
        super().__init__(base.centers, base.hessians)
        self.owner = {row.tobytes(): i for i, row in enumerate(np.asarray(base.centers))}
        assert len(self.owner) == self.n_clients  # every client's center is its own
        self.evaluated = []

    def gradient_formula(self, xp, data, idx, x):
        centers = data["centers"] if idx is None else data["centers"][idx]
        self.evaluated += [self.owner[row.tobytes()] for row in np.asarray(centers)]
        return super().gradient_formula(xp, data, idx, x)


def test_stale_methods_cost_only_the_participants():
    """A round's phases touch the server, the participants and one summary row, and the
    round evaluates the participants' gradients K times each: never N."""
    n, steps = 10_000, 2
    clients = np.array([5, 17, 9000])
    nodes = set((clients + 1).tolist())  # client i is node i + 1, the server node 0
    problem = CountingQuadratic(Quadratic.random(n, 2, seed=0))
    masks = np.zeros((3, n), dtype=bool)
    masks[:, clients] = True
    methods = {
        "FedStale": lambda: FedStale(0.1, steps, 0.5, probabilities=np.full(n, 0.5)),
        "MIFA": lambda: MIFA(0.1, steps),
        "SCAFFOLD": lambda: SCAFFOLD(0.1, steps),
    }
    summaries = {"FedStale": {"hsum"}, "MIFA": {"hsum"}, "SCAFFOLD": set()}
    rounds = []

    def count(r, z, ctx):
        rounds.append(sorted(problem.evaluated))
        problem.evaluated.clear()

    for name, make in methods.items():
        method = make()
        layout = Layout(method.blocks(n))
        ctx = RunContext(layout, n, 2, np.full(n, 0.5))
        method.start(ctx)
        phases = method.round_phases(0, clients, ctx)
        touched = {layout.locate(row) for ph in phases for row in ph.rows.tolist()}
        per_node = {(b, i) for b, i in touched if layout.block(b).rows > 1}
        assert {i + layout.first_node(b) for b, i in per_node} == nodes | {0}, name
        assert {b for b, _ in touched if layout.block(b).rows == 1} == summaries[name]
        assert max(ph.mix.nnz for ph in phases) <= 40

        rounds.clear()
        problem.evaluated.clear()
        run(make(), problem, Trace(masks), 3, callback=count, progress=False)
        assert rounds == [sorted(clients.tolist() * steps)] * 3, name

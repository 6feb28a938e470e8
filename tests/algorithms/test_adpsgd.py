"""AD-PSGD (Lian et al., ICML 2018) against its per-node reference (tests/reference/adpsgd.py),
its gradient accounting, what it refuses, and the paper's convergence claim.

A run with seed s sees the records of ``RandomEdge(...).activations(s)`` in order and the
initiator coins of seed s (the reference derives both itself, from the process and the
seed)."""

import itertools
import warnings

import networkx as nx
import numpy as np
import pytest

import stochmix as sm
from stochmix import run
from stochmix.algorithms import ADPSGD
from stochmix.mixing import StaticSequence
from stochmix.participation import (
    Bernoulli,
    Full,
    OnePeerPermutation,
    PoissonClocks,
    RandomEdge,
    RandomMatching,
)
from stochmix.problems import LeastSquares
from tests._segments import batch_sizes
from tests.reference import adpsgd as ref

N, D, TICKS = 10, 4, 300


def random_graph(n, seed):
    """A connected Erdős–Rényi graph (not regular: initiators are not uniform)."""
    for s in itertools.count(seed):
        g = nx.gnp_random_graph(n, 0.35, seed=s)
        if nx.is_connected(g):
            return g
    raise AssertionError  # pragma: no cover


def records(process, seed, ticks):
    return list(itertools.islice(process.activations(seed), ticks))


class Counted(LeastSquares):
    """Least squares that counts, per client, the gradient rows it evaluates."""

    compiled_gradient = False  # every gradient through gradient_formula, below

    def gradient_formula(self, xp, data, idx, x):
        counts = self.__dict__.setdefault("counts", np.zeros(self.n_clients, dtype=np.int64))
        np.add.at(counts, np.asarray(idx, dtype=np.int64).reshape(-1), 1)
        return super().gradient_formula(xp, data, idx, x)


@pytest.mark.parametrize("mixing", ["pairwise", "weights"])
@pytest.mark.parametrize("seed", [0, 11])
def test_engine_equals_reference(mixing, seed):
    """Every tick: the initiator's gradient at its pre-averaging model, the pair averaged
    (or mixed with W_k's weights); the network average after every tick and every node's
    final model agree with the per-node reference to 1e-10 (float64)."""
    problem = LeastSquares.random(N, D, seed=seed + 1)
    graph = random_graph(N, seed)
    graphs = StaticSequence(graph)
    process = RandomEdge(graph, mixing=mixing)
    x0 = np.random.default_rng(seed).normal(size=(N, D))
    lr = 0.4 / problem.smoothness
    result = run(ADPSGD(lr, graphs), problem, process, TICKS, x0=x0, seed=seed, progress=False)
    means, nodes, pairs = ref.adpsgd(
        problem, records(process, seed, TICKS), seed, x0, lr, graphs=graphs, mixing=mixing
    )
    scale = 1 + np.abs(means).max()
    np.testing.assert_allclose(result.server, means, rtol=0, atol=1e-10 * scale)
    np.testing.assert_allclose(result.node_models, nodes, rtol=0, atol=1e-10 * scale)
    first = sum(int(i < j) for i, j in pairs)  # both endpoints initiate (a fair coin)
    assert 0.35 * TICKS < first < 0.65 * TICKS


def test_decaying_step_equals_reference():
    problem = LeastSquares.random(N, D, seed=4)
    graph = random_graph(N, 4)
    process = RandomEdge(graph)
    lr, seed = 0.8 / problem.smoothness, 5
    result = run(ADPSGD(lr, StaticSequence(graph), decay=0.5), problem, process, 120,
                 seed=seed, progress=False)  # fmt: skip
    means, _, _ = ref.adpsgd(problem, records(process, seed, 120), seed, np.zeros(D), lr, 0.5)
    np.testing.assert_allclose(result.server, means, rtol=0, atol=1e-10 * (1 + np.abs(means).max()))


def test_one_gradient_per_tick():
    """The engine's gradients column is 1 per tick and its sample gradients the
    initiator's rows; counted independently by the problem, every gradient the run
    evaluates is the reference initiator's (a problem without x_star metrics: distance
    only, which reads no gradient)."""
    problem = Counted.random(N, D, rows_per_client=(5, 15), seed=3)  # clients' sizes differ
    graph = random_graph(N, 2)
    process, seed, ticks = RandomEdge(graph), 9, 200
    result = run(ADPSGD(0.1 / problem.smoothness, StaticSequence(graph)), problem, process,
                 ticks, seed=seed, progress=False, metrics=("distance",))  # fmt: skip
    pairs = ref.initiators(records(process, seed, ticks), seed)
    initiators = np.array([i for i, _ in pairs])
    assert result.gradients[0] == 0 and (result.gradients[1:] == 1).all()
    rows = np.asarray(problem.rows_per_client)
    assert len(set(rows.tolist())) > 1
    np.testing.assert_array_equal(result.sample_gradients[1:], rows[initiators])
    np.testing.assert_array_equal(problem.counts, np.bincount(initiators, minlength=N))
    assert (result.messages[1:] == 2).all()  # the pair's two models, one each way


@pytest.mark.parametrize(
    "process",
    [
        Full(N),
        Bernoulli(0.5, n_clients=N),
        PoissonClocks(np.ones(N)),
        RandomMatching(nx.cycle_graph(N)),
        OnePeerPermutation(N),
    ],
    ids=["full", "bernoulli", "poisson", "matching", "one-peer"],
)
def test_refuses_other_activations(process):
    problem = LeastSquares.random(N, D, seed=0)
    method = ADPSGD(0.01, StaticSequence(nx.cycle_graph(N)))
    with pytest.raises(ValueError, match=r"^participation: AD-PSGD .*RandomEdge"):
        run(method, problem, process, 3, progress=False)


def test_long_run_is_not_warned_slow_and_same_seed_same_numbers(unchecked):
    """A long run runs its ticks in compiled segments: no slow-path warning; the same seed
    gives the same numbers (initiators included), another seed others."""
    problem = LeastSquares.random(N, D, seed=0)
    graph = random_graph(N, 1)
    method = ADPSGD(0.2 / problem.smoothness, StaticSequence(graph))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        a = run(method, problem, RandomEdge(graph), 2000, seed=1, progress=False)
    b = run(method, problem, RandomEdge(graph), 2000, seed=1, progress=False)
    c = run(method, problem, RandomEdge(graph), 2000, seed=2, progress=False)
    np.testing.assert_array_equal(a.server, b.server)
    assert not np.array_equal(a.server, c.server)


def test_theorem_1_rate_of_the_averaged_gradient_norm(unchecked):
    """Lian et al. (2018), Theorem 1 (with its step choice of order n / sqrt(K)): the mean
    over the K iterations of ||grad f(x̄_k)||^2, x̄_k the average model, is O(1/sqrt(K)),
    with f = sum_i p_i f_i (p_i: how often worker i updates).

    Here: exact gradients (no sampling noise; the clients' heterogeneity remains), a
    3-regular graph under uniform RandomEdge, so that p_i = 1/n and f is the problem's own
    objective; K = 500, 2000, 8000 with the step n / (L sqrt(K)), means over 8, 4 and 2
    seeds. Then sqrt(K) times the mean stays bounded: it grows by less than a factor 2
    over the 16-fold range of K (a step held at its K = 500 value, which the theorem does
    not cover, lets it grow about 4-fold: the mean stalls), and the mean falls with K."""
    n, d = 8, 3
    graph = nx.random_regular_graph(3, n, seed=1)
    process = RandomEdge(graph)
    np.testing.assert_allclose(process.probabilities / 2, 1 / n)  # p_i = 1/n
    problem = LeastSquares.random(n, d, seed=0)
    L = problem.smoothness
    means = {}
    for ticks, seeds in ((500, 8), (2000, 4), (8000, 2)):
        method = ADPSGD(n / (L * np.sqrt(ticks)), StaticSequence(graph))
        # ||grad f(x̄_k)||^2 at every iteration's average model (the Result's server row;
        # a run in compiled segments records its gradient_norm at a batch's end only)
        models = [
            run(method, problem, process, ticks, seed=s, progress=False, metrics=()).server
            for s in range(seeds)
        ]
        squares = [[float(np.sum(problem.gradient(x) ** 2)) for x in m[:ticks]] for m in models]
        means[ticks] = float(np.mean([np.mean(v) for v in squares]))
    scaled = {k: v * np.sqrt(k) for k, v in means.items()}
    print("mean ||grad f(xbar)||^2:", means, "times sqrt(K):", scaled)
    assert means[500] > means[2000] > means[8000]
    assert scaled[8000] < 2 * scaled[500], scaled


def test_a_resumed_run_ends_bit_for_bit_where_the_uninterrupted_one_does(
    tmp_path, unchecked, monkeypatch
):
    """The initiators are a function of the seed and the tick alone: a run resumed from a
    checkpoint takes the same ones; both run their ticks in compiled segments (learnt
    again after every checkpoint, whatever the phases the planner kept)."""
    problem = LeastSquares.random(N, D, seed=0)
    graph = random_graph(N, 6)
    batches = batch_sizes(monkeypatch)

    def go(ticks, path):
        method = ADPSGD(0.2 / problem.smoothness, StaticSequence(graph))
        return run(method, problem, RandomEdge(graph), ticks, seed=4, progress=False,
                   checkpoint=path, checkpoint_every=100)  # fmt: skip

    whole = go(600, tmp_path / "whole.ckpt")
    go(300, tmp_path / "cut.ckpt")
    resumed = go(600, tmp_path / "cut.ckpt")
    assert resumed.config["resumed_from"] == 300
    np.testing.assert_array_equal(resumed.server, whole.server)
    np.testing.assert_array_equal(resumed.node_models, whole.node_models)
    assert sum(batches) > 0.9 * (600 + 300 + 300)  # the three runs' ticks, nearly all


# ------------------------------------------------------------------ compiled segments
@pytest.mark.parametrize("seed", [0, 11])
def test_segmented_ticks_equal_the_unsegmented_run_and_the_reference(monkeypatch, seed):
    """Ticks run in compiled segments (one program per kind of tick: the smaller or the
    larger endpoint initiates) give the unsegmented run's numbers to rounding (1e-12), its
    traffic exactly (one gradient per tick, the initiator's samples: clients' sizes
    differ), and the per-node reference's."""
    ticks = 2000
    problem = LeastSquares.random(N, D, rows_per_client=(5, 15), seed=seed + 2)
    graph = random_graph(N, seed)
    process = RandomEdge(graph)
    x0 = np.random.default_rng(seed).normal(size=(N, D))
    lr = 0.4 / problem.smoothness
    plain = run(ADPSGD(lr, StaticSequence(graph)), problem, process, ticks, x0=x0, seed=seed,
                progress=False, compiled=False)  # fmt: skip
    batches = batch_sizes(monkeypatch)
    fast = run(ADPSGD(lr, StaticSequence(graph)), problem, process, ticks, x0=x0, seed=seed,
               progress=False)  # fmt: skip
    assert sum(batches) > 0.99 * ticks
    scale = 1 + np.abs(plain.server).max()
    np.testing.assert_allclose(fast.server, plain.server, rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(fast.node_models, plain.node_models, rtol=0, atol=1e-12 * scale)
    for name in ("participants", "gradients", "sample_gradients", "messages", "floats", "time"):
        np.testing.assert_array_equal(getattr(fast, name), getattr(plain, name), err_msg=name)
    means, nodes, _ = ref.adpsgd(problem, records(process, seed, ticks), seed, x0, lr)
    np.testing.assert_allclose(fast.server, means, rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(fast.node_models, nodes, rtol=0, atol=1e-12 * scale)


def test_a_long_run_on_100_nodes_runs_in_segments_unwarned(monkeypatch):
    """n = 100, d = 10, 10000 ticks on a random 4-regular graph: explain says the ticks
    run in compiled segments, the run warns of nothing, all but the few ticks that
    verify the two programs run in batches, and it agrees with the per-node reference."""
    n, d, ticks, seed = 100, 10, 10000, 3
    graph = nx.random_regular_graph(4, n, seed=0)
    problem = LeastSquares.random(n, d, seed=1)
    process = RandomEdge(graph)
    lr = 0.3 / problem.smoothness
    told = sm.explain(ADPSGD(lr, StaticSequence(graph)), problem, process)
    assert told.fast and "run in compiled segments" in str(told)
    batches = batch_sizes(monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = run(ADPSGD(lr, StaticSequence(graph)), problem, process, ticks, seed=seed,
                     progress=False)  # fmt: skip
    assert sum(batches) >= ticks - 10
    means, nodes, _ = ref.adpsgd(problem, records(process, seed, ticks), seed, np.zeros(d), lr)
    scale = 1 + np.abs(means).max()
    np.testing.assert_allclose(result.server, means, rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(result.node_models, nodes, rtol=0, atol=1e-12 * scale)


class CoinBlind(ADPSGD):
    """AD-PSGD that leaves the coin out of its segment keys (a wrong claim: two ticks of
    one edge with different initiators build different phases)."""

    def segment_variants(self, first, nodes):
        return None


def test_a_segment_key_blind_to_the_coin_is_caught(monkeypatch):
    """Without the coin in the key, the segmenter's check of each key's second tick sees
    two different programs (for a seed whose ticks 1 and 2, the first two of the key,
    have different initiators) and segments nothing: the run still equals the reference."""
    seed = next(s for s in itertools.count() if ref.coins(s, 3)[1] != ref.coins(s, 3)[2])
    problem = LeastSquares.random(N, D, seed=5)
    graph = random_graph(N, 3)
    process = RandomEdge(graph)
    lr = 0.3 / problem.smoothness
    batches = batch_sizes(monkeypatch)
    right = run(ADPSGD(lr, StaticSequence(graph)), problem, process, 300, seed=seed,
                progress=False)  # fmt: skip
    assert batches  # the coin in the key: segments run
    batches.clear()
    blind = run(CoinBlind(lr, StaticSequence(graph)), problem, process, 300, seed=seed,
                progress=False)  # fmt: skip
    assert batches == []
    means, _, _ = ref.adpsgd(problem, records(process, seed, 300), seed, np.zeros(D), lr)
    scale = 1 + np.abs(means).max()
    np.testing.assert_allclose(blind.server, means, rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(right.server, means, rtol=0, atol=1e-12 * scale)


def test_segment_variants_are_the_coins():
    """ADPSGD.segment_variants gives tick k's coin c_k (the reference's), across the
    4096-tick blocks of coins."""
    graph = random_graph(N, 0)
    method = ADPSGD(0.1, StaticSequence(graph))
    layout = sm.engine.Layout(method.blocks(N))
    method.start(sm.engine.RunContext(layout=layout, n_clients=N, dim=D, seed=7))
    expected = ref.coins(7, 9000)
    nodes = np.zeros((5000, 2), dtype=np.int64)
    np.testing.assert_array_equal(method.segment_variants(4000, nodes), expected[4000:9000])
    np.testing.assert_array_equal(method.segment_variants(17, nodes[:1]), expected[17:18])

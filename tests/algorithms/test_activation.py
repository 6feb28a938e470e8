"""Decentralized methods under activation processes (node activation, Poisson clocks, edge
gossip) against the per-node references of tests/reference/activation.py, and the
papers' claims.

A run with seed s sees the records of ``process.activations(s)`` in order, so the
references are fed exactly those records.
"""

import itertools

import networkx as nx
import numpy as np
import pytest

from stochmix import run
from stochmix.algorithms import DGD, EXTRA, GradientTracking, PushPull, PushSum
from stochmix.mixing import StaticSequence
from stochmix.participation import (
    Bernoulli,
    Full,
    Markov,
    OnePeerPermutation,
    PoissonClocks,
    RandomEdge,
    RandomMatching,
    Regularized,
    Trace,
)
from stochmix.problems import Quadratic
from tests._problems import Flat
from tests.reference import activation as ref
from tests.reference.decentralized import _grad
from tests.reference.decentralized import dgd as dgd_full
from tests.reference.decentralized import gradient_tracking as gt_full
from tests.reference.decentralized import push_pull as push_pull_full
from tests.reference.decentralized import push_sum as push_sum_full
from tests.reference.decentralized_zoo import extra as extra_full


def assert_close(got, want):
    """Equal to 1e-10, relative to the size of the reference."""
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10 * (1 + np.abs(want).max()))


def undirected_graph(n):
    """A cycle with two chords (connected, not regular)."""
    g = nx.cycle_graph(n)
    g.add_edges_from([(0, n // 2), (1, n - 2)])
    return g


def directed_graph(n):
    """A directed ring with two extra arcs (strongly connected, not balanced)."""
    g = nx.DiGraph()
    g.add_edges_from([(i, (i + 1) % n) for i in range(n)])
    g.add_edges_from([(0, n // 2), (n - 1, 2)])
    return g


def records(process, seed, rounds):
    return list(itertools.islice(process.activations(seed), rounds))


def trace_with_empty_round(n, rounds, seed):
    masks = Bernoulli(0.5, n_clients=n).sample(rounds, seed=seed).copy()
    masks[4] = False
    masks[11] = False
    return Trace(masks)


def processes(n, graph):
    return {
        "bernoulli": Bernoulli(0.45, n_clients=n),
        "bernoulli-hetero": Bernoulli(np.linspace(0.3, 0.6, n)),
        "trace-empty": trace_with_empty_round(n, 30, 7),
        "markov": Markov(0.3, 0.4, n_clients=n),
        "poisson": PoissonClocks(np.linspace(1.0, 2.0, n)),
        "random-edge": RandomEdge(graph),
        "matching": RandomMatching(graph),
        "matching-weights": RandomMatching(graph, mixing="weights"),
        "one-peer": OnePeerPermutation(n),
    }


N, D, ROUNDS = 8, 3, 30
PROCESS_NAMES = list(processes(N, undirected_graph(N)))


def setting(seed=0):
    problem = Quadratic.random(N, D, seed=seed)
    x0 = np.random.default_rng(seed).normal(size=(N, D))
    und = StaticSequence(undirected_graph(N))
    directed = StaticSequence(directed_graph(N))
    return problem, x0, und, directed, 0.2 / problem.smoothness


def engine(method, problem, process, rounds, x0, seed):
    return run(method, problem, process, rounds, x0=x0, seed=seed, progress=False)


def is_edges(process):
    return getattr(process, "activates", "nodes") == "edges"


# ------------------------------------------------------------- engine equals reference


@pytest.mark.parametrize("name", PROCESS_NAMES)
def test_dgd_pushsum_extra_equal_reference(name):
    problem, x0, und, directed, lr = setting(1)
    process = processes(N, undirected_graph(N))[name]
    mixing = getattr(process, "mixing", "pairwise")
    seed = 3
    recs = records(process, seed, ROUNDS)
    assert any(r.nodes.size < N for r in recs)
    cases = [
        (DGD(lr, und), ref.dgd(problem, und, recs, x0, lr, mixing=mixing)),
        (
            DGD(lr, und, form="cta", decay=0.5),
            ref.dgd(problem, und, recs, x0, lr, form="cta", decay=0.5, mixing=mixing),
        ),
        (
            EXTRA(lr, und, check_mixing=False),
            ref.extra(problem, und, recs, x0, lr, mixing=mixing),
        ),
    ]
    if not is_edges(process):  # push-sum over a directed graph under node activation
        cases.append(
            (
                PushSum(lr, directed, decay=0.5),
                ref.push_sum(problem, directed, recs, x0, lr, decay=0.5),
            )
        )
    else:  # gossip on the undirected graph's column weights
        cases.append(
            (
                PushSum(lr, und, rule="metropolis"),
                ref.push_sum(problem, und, recs, x0, lr, rule="metropolis", mixing=mixing),
            )
        )
    for method, want in cases:
        assert_close(engine(method, problem, process, ROUNDS, x0, seed).server, want)


@pytest.mark.parametrize(
    "name", ["bernoulli", "trace-empty", "poisson", "random-edge", "matching-weights"]
)
def test_tracking_methods_equal_reference(name):
    """ENGINE BUG (fails): the engine initialises y and g = grad F(x^0) only at the nodes
    active in round 0, the spec (and the references) at every node."""
    problem, x0, und, directed, lr = setting(2)
    process = processes(N, undirected_graph(N))[name]
    mixing = getattr(process, "mixing", "pairwise")
    seed = 5
    recs = records(process, seed, ROUNDS)
    graph = und if is_edges(process) else directed
    cases = [
        (
            GradientTracking(lr, und, check_mixing=False),
            ref.gradient_tracking(problem, und, recs, x0, lr, mixing=mixing),
        ),
        (
            GradientTracking(lr, und, check_mixing=False, form="atc"),
            ref.gradient_tracking(problem, und, recs, x0, lr, form="atc", mixing=mixing),
        ),
        (PushPull(lr, graph), ref.push_pull(problem, graph, recs, x0, lr, mixing=mixing)),
    ]
    failures = []
    for method, want in cases:
        got = engine(method, problem, process, ROUNDS, x0, seed).server
        err = np.abs(got - want).max() / (1 + np.abs(want).max())
        if err > 1e-10:
            failures.append(f"{method.name}/{method.form}: relative error {err:.2e}")
    assert not failures, failures


def test_tracking_starts_at_every_node():
    """ENGINE BUG (fails): round 0 of a tracking method must set y = g = grad F(x^0) at
    EVERY node, whatever the activation (initialisation is not an iteration). With round
    0 empty (a Trace), nothing moves in round 0, so y after it must be grad F(x^0)."""
    problem, x0, und, directed, lr = setting(3)
    masks = np.ones((3, N), dtype=bool)
    masks[0] = False
    seen = {}

    def keep(r, z, ctx):
        if r == 0 or r == 1:
            lay = ctx.layout
            seen[r] = (np.array(z[lay.slice("y")]), np.array(z[lay.slice("g")]))

    run(PushPull(lr, directed), problem, Trace(masks), 2, x0=x0, callback=keep, progress=False)
    first = next(iter(seen))
    y, g = seen[first]
    want = np.array([_grad(problem, i, x0[i]) for i in range(N)])
    np.testing.assert_allclose(g, want, atol=1e-12)
    np.testing.assert_allclose(y, want, atol=1e-12)


def test_push_pull_same_rule_still_pushes_tracker():
    """ENGINE BUG (fails): PushPull(row_rule="metropolis", column_rule="metropolis") must
    pull x with R and push y with C (the spec: "PushPull: R pulls, C pushes"). The engine
    picks a matrix's direction from the first rule attribute set to that rule
    (DecentralizedMethod.direction), so with equal rules C is activated as a pull too.
    Round 0 has every node active, so the tracker starts alike in engine and reference."""
    problem, x0, und, directed, lr = setting(10)
    masks = Bernoulli(0.5, n_clients=N).sample(20, seed=1).copy()
    masks[0] = True
    process = Trace(masks)
    recs = records(process, 0, 20)
    method = PushPull(lr, und, row_rule="metropolis", column_rule="metropolis")
    want = ref.push_pull(problem, und, recs, x0, lr, "metropolis", "metropolis")
    assert_close(engine(method, problem, process, 20, x0, 0).server, want)


def test_refusal_names_participation():
    problem, x0, und, directed, lr = setting(4)
    for method in (GradientTracking(lr, und), EXTRA(lr, und)):
        with pytest.raises(ValueError, match="participation"):
            run(method, problem, Bernoulli(0.5, n_clients=N), 3, progress=False)
        with pytest.raises(ValueError, match="participation"):
            run(method, problem, PoissonClocks(1.0, n_nodes=N), 3, progress=False)
        # gossip keeps doubly stochastic mixing: accepted
        run(method, problem, RandomMatching(undirected_graph(N)), 3, progress=False)
    # row- and column-stochastic needs are kept by node activation: accepted
    run(PushPull(lr, directed), problem, Bernoulli(0.5, n_clients=N), 3, progress=False)
    run(DGD(lr, und), problem, Bernoulli(0.5, n_clients=N), 3, progress=False)


def test_full_participation_unchanged():
    problem, x0, und, directed, lr = setting(5)
    rounds = 15
    full = Full(N)
    recs = records(full, 0, rounds)
    cases = [
        (DGD(lr, und), dgd_full(problem, und, rounds, x0, lr), ref.dgd),
        (
            GradientTracking(lr, und),
            gt_full(problem, und, rounds, x0, lr),
            ref.gradient_tracking,
        ),
        (PushPull(lr, directed), push_pull_full(problem, directed, rounds, x0, lr), ref.push_pull),
        (PushSum(lr, directed), push_sum_full(problem, directed, rounds, x0, lr), ref.push_sum),
        (EXTRA(lr, und), extra_full(problem, und, rounds, x0, lr), ref.extra),
    ]
    for method, want, mine in cases:
        graphs = method.graphs
        assert_close(engine(method, problem, full, rounds, x0, 0).server, want)
        assert_close(mine(problem, graphs, recs, x0, lr), want)


# ----------------------------------------------------------------------------- claims


def test_boyd_pairwise_gossip_rate():
    """Boyd et al. (2006), Sec. II-B / Lemma 1 with W^T W = W for a pairwise average:
    E ||x(k) - xbar 1||^2 <= lambda_2(E[W])^k ||x(0) - xbar 1||^2.

    The engine runs DGD on a problem whose gradients vanish (``Flat``), so a round is
    exactly the gossip step of the woken edge: checked, tick by tick, against the per-node
    gossip reference for a few seeds. The mean square deviation is then averaged over many
    seeds with the reference (the same records the engine would see)."""
    n, ticks, seeds = 8, 60, 400
    graph = undirected_graph(n)
    process = RandomEdge(graph)
    lam2 = np.sort(np.linalg.eigvalsh(process.expected_matrix().toarray()))[-2]
    x0 = np.random.default_rng(0).normal(size=(n, 1))
    x0 -= x0.mean()
    method = DGD(1.0, StaticSequence(graph))
    total = np.zeros(ticks + 1)
    for s in range(seeds):
        nodes = ref.gossip_average(x0, records(process, s, ticks), n)
        deviation = ((nodes - nodes.mean(axis=1, keepdims=True)) ** 2).sum(axis=(1, 2))
        total += deviation
        if s < 3:
            result = run(method, Flat(n, 1), process, ticks, x0=x0, seed=s,
                         metrics=("consensus",), progress=False)  # fmt: skip
            np.testing.assert_allclose(result.consensus * n, deviation, rtol=1e-10, atol=1e-14)
            np.testing.assert_allclose(result.server[-1], x0.mean(axis=0), atol=1e-12)
    measured = total / seeds
    bound = lam2 ** np.arange(ticks + 1) * measured[0]
    ratio = measured / bound
    print(f"lambda_2(E[W]) = {lam2:.4f}; measured / bound after {ticks} ticks = {ratio[-1]:.3f}")
    assert ratio.max() <= 1.05, ratio.max()
    slope = np.polyfit(np.arange(ticks // 2, ticks + 1), np.log(measured[ticks // 2 :]), 1)[0]
    print(f"measured rate per tick {np.exp(slope):.4f} vs lambda_2 {lam2:.4f}")
    assert np.exp(slope) <= lam2 + 0.01


@pytest.mark.slow
def test_push_sum_gossip_reaches_average():
    """Kempe, Dobra & Gehrke (2003), Push-Sum: with no gradient, every ratio x_i / w_i goes
    to the average of the starting values, mass sum_i x_i and sum_i w_i = n conserved,
    under Poisson clocks (one node per tick) on a directed strongly connected graph."""
    n, ticks = 6, 400
    graphs = StaticSequence(directed_graph(n))
    x0 = np.random.default_rng(1).normal(size=(n, 2))
    final = {}

    def keep(r, z, ctx):
        if r == ticks - 1:
            lay = ctx.layout
            final.update(x=np.array(z[lay.slice("x")]), w=np.array(z[lay.slice("w")]))

    process = PoissonClocks(np.linspace(0.5, 1.5, n))
    run(PushSum(1.0, graphs), Flat(n, 2), process, ticks, x0=x0, seed=2, callback=keep,
        metrics=("consensus",), progress=False)  # fmt: skip
    ratios = final["x"] / final["w"]
    error = np.abs(ratios - x0.mean(axis=0)).max()
    print(f"push-sum gossip: max |x_i / w_i - mean| after {ticks} ticks = {error:.2e}")
    assert error < 1e-8
    np.testing.assert_allclose(final["x"].sum(axis=0), x0.sum(axis=0), atol=1e-10)
    np.testing.assert_allclose(final["w"].sum(axis=0), n, atol=1e-10)


@pytest.mark.slow
def test_asynchronous_gradient_push_reaches_the_minimiser():
    """Assran & Rabbat (2021), asynchronous gradient push (subgradient-push with push-sum
    de-biasing) under random node activation on a directed strongly connected graph, in
    their bounded-delay setting (every node active at least once in every 2 rounds:
    ``Regularized(n, 3)``): with a diminishing step a_k = lr / (k + 1)^0.6 the de-biased
    models x_i / w_i approach the minimiser of the sum, the error falling by two orders of
    magnitude and still falling (sublinear: a decaying step).

    Under one-node Poisson clocks the same method diverges here: a node that wakes again
    and again before anyone pushes to it divides its weight w_i each time, and its step,
    taken on the numerator, grows as 1 / w_i on its model; the paper's analysis assumes
    bounded delays, which single-node clocks do not give (measured, not asserted)."""
    n = 6
    problem = Quadratic.random(n, 2, seed=3)
    graphs = StaticSequence(directed_graph(n))
    method = PushSum(0.5 / problem.smoothness, graphs, decay=0.6)
    result = run(method, problem, Regularized(n, 3), 8000, seed=4, progress=False)
    errors = result.relative_error[[100, 4000, 8000]]
    print(f"asynchronous gradient push: relative error {errors[0]:.2e} (100 rounds), "
          f"{errors[1]:.2e} (4000), {errors[2]:.2e} (8000)")  # fmt: skip
    assert errors[2] < 1e-2 * errors[0] and errors[2] < errors[1]


def tracking_state(method, problem, process, rounds, x0, seed):
    """The result and the final x, y, g blocks."""
    state = {}

    def keep(r, z, ctx):
        if r == rounds - 1:
            lay = ctx.layout
            state.update({b: np.array(z[lay.slice(b)]) for b in ("x", "y", "g")})

    result = run(method, problem, process, rounds, x0=x0, seed=seed, callback=keep,
                 progress=False)  # fmt: skip
    return result, state


def small(seed, n=6, factor=0.3):
    """(problem, x0, undirected, directed, lr) with n nodes in dimension 2."""
    problem = Quadratic.random(n, 2, seed=seed)
    x0 = np.random.default_rng(seed).normal(size=(n, 2))
    und = StaticSequence(undirected_graph(n))
    return problem, x0, und, StaticSequence(directed_graph(n)), factor / problem.smoothness


def linear_rate(distance):
    k = np.arange(distance.size)
    half = distance.size // 3
    return float(np.exp(np.polyfit(k[half:], np.log(distance[half:]), 1)[0]))


def test_push_pull_node_activation_linear():
    """Push-pull (Pu et al. 2021; asynchronous: Tian, Sun & Scutari 2020, Theorem 1):
    under Bernoulli node activation on a directed graph, every node active with positive
    probability, x reaches x_star at a linear rate and sum_i y_i = sum_i g_i."""
    n, rounds = 6, 300
    problem = Quadratic.random(n, 2, seed=6)
    x0 = np.random.default_rng(6).normal(size=(n, 2))
    directed, lr = StaticSequence(directed_graph(n)), 0.5 / problem.smoothness
    process = Bernoulli(np.linspace(0.3, 0.7, n))
    result, state = tracking_state(PushPull(lr, directed), problem, process, rounds, x0, 1)
    scale = np.linalg.norm(problem.x_star)
    relative = result.distance / scale
    rate = linear_rate(relative)
    print(f"push-pull, Bernoulli: relative error {relative[-1]:.2e}, rate {rate:.4f}/round")
    assert relative[-1] < 1e-8
    assert rate < 0.99
    np.testing.assert_allclose(state["y"].sum(axis=0), state["g"].sum(axis=0), atol=1e-10)
    want = np.array([_grad(problem, i, problem.x_star) for i in range(n)])
    np.testing.assert_allclose(state["g"], want, atol=1e-6 * np.abs(want).max())


def test_node_activation_breaks_gt_keeps_push_pull():
    """GT pulls its tracker: D W + I - D is not column-stochastic, sum y drifts from sum g
    and x_star is missed. Push-pull with both rules metropolis pulls x and pushes y
    (W D + I - D keeps column sums): tracking holds and it converges."""
    problem, x0, und, directed, lr = small(7, factor=0.5)
    rounds, process = 200, Bernoulli(0.5, n_clients=6)
    scale = np.linalg.norm(problem.x_star)
    gt, gt_state = tracking_state(
        GradientTracking(lr, und, check_mixing=False), problem, process, rounds, x0, 4
    )
    pp, pp_state = tracking_state(
        PushPull(lr, und, row_rule="metropolis", column_rule="metropolis"),
        problem, process, rounds, x0, 4,
    )  # fmt: skip
    gt_gap = np.abs(gt_state["y"].sum(axis=0) - gt_state["g"].sum(axis=0)).max()
    pp_gap = np.abs(pp_state["y"].sum(axis=0) - pp_state["g"].sum(axis=0)).max()
    print(
        f"GT: |sum y - sum g| = {gt_gap:.2e}, error {gt.distance[-1] / scale:.2e}; "
        f"push-pull: |sum y - sum g| = {pp_gap:.2e}, error {pp.distance[-1] / scale:.2e}"
    )
    assert gt_gap > 1e-3
    assert gt.distance[-1] / scale > 1e-3
    assert pp_gap < 1e-10
    assert pp.distance[-1] / scale < 1e-8


def test_edge_gossip_exact_and_inexact():
    """Under random matchings (doubly stochastic W_E every round) GT and EXTRA converge to
    x_star, DGD with a fixed step only to an O(lr) neighbourhood (halving lr about halves
    its error)."""
    problem, x0, und, directed, lr = small(8, factor=0.5)
    rounds, process = 200, RandomMatching(undirected_graph(6))
    scale = np.linalg.norm(problem.x_star)

    def error(method):
        return engine(method, problem, process, rounds, x0, 6).distance[-1] / scale

    gt, ex = error(GradientTracking(lr, und)), error(EXTRA(lr, und))
    dgd1, dgd2 = error(DGD(lr, und)), error(DGD(lr / 2, und))
    print(f"matching: GT {gt:.2e}, EXTRA {ex:.2e}, DGD {dgd1:.2e} (lr), {dgd2:.2e} (lr/2)")
    assert gt < 1e-8
    assert ex < 1e-8
    assert dgd1 > 1e-4
    assert 0.3 < dgd2 / dgd1 < 0.7


# ------------------------------------------------------------------------- accounting


def test_accounting_columns():
    n = 8
    problem = Quadratic.random(n, 2, seed=9)
    cycle = nx.cycle_graph(n)
    method = DGD(0.1, StaticSequence(cycle))
    full = engine(method, problem, Full(n), 5, None, 0)
    assert (full.messages[1:] == 2 * n).all(), full.messages
    assert (full.gradients[1:] == n).all(), full.gradients
    assert full.time is None
    edge = engine(method, problem, RandomEdge(cycle), 20, None, 0)
    assert (edge.messages[1:] == 2).all(), edge.messages
    assert (edge.gradients[1:] == 2).all(), edge.gradients
    assert (np.diff(edge.time) > 0).all()
    clocks = engine(method, problem, PoissonClocks(1.0, n_nodes=n), 20, None, 0)
    assert (np.diff(clocks.time) > 0).all()
    want = [r.time for r in records(PoissonClocks(1.0, n_nodes=n), 0, 20)]
    np.testing.assert_allclose(clocks.time[1:], want)
    assert engine(method, problem, Bernoulli(0.5, n_clients=n), 5, None, 0).time is None

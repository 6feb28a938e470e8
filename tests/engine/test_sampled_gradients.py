"""Sampled gradients in the equations (``grad(S, samples=picks)``): each client's minibatch
estimate from the rows it draws, a linear term with the draws fixed. A phase that takes
them gives a per-client loop's numbers on every path (the general path, the NumPy
programs, the compiled setting, Torch), counts one gradient evaluation and b sample
gradients per client, and its exact operator gives the engine's next state (GT-SAGA)."""

from itertools import islice

import networkx as nx
import numpy as np
import pytest

import stochmix as sm
from stochmix.algorithms import GTSAGA
from stochmix.engine import Block, Equations, Method, grad, mean
from stochmix.engine.model.rowmap import map_generator
from stochmix.mixing import StaticSequence
from stochmix.participation import Bernoulli, Full, UniformSample
from stochmix.problems import LeastSquares
from tests._backends import PATHS, SparseOnly, path_options

N, D, BATCH, ROUNDS = 10, 3, 2, 8


def _picks(seed, r, counts, batch):
    rng = map_generator(seed, r, "picks")
    return (rng.random((counts.size, batch)) * counts[:, None]).astype(np.int64)


class MinibatchFedAvg(Method):
    """FedAvg with one local step on a minibatch of ``BATCH`` rows a participant (drawn
    from the run's seed and the round), written with a sampled gradient term."""

    name = "MinibatchFedAvg"
    model_block = "x"

    def __init__(self, lr: float):
        self.lr = lr

    def check_problem(self, problem) -> None:
        self.counts = np.asarray(problem.rows_per_client, dtype=np.int64)

    def blocks(self, n_clients: int) -> list[Block]:
        return [Block("x", n_clients + 1, "model")]

    def round_phases(self, r, participants, ctx):
        s = participants
        if s.size == 0:
            return []
        picks = _picks(ctx.seed, r, self.counts, BATCH)[s]
        eq = Equations(ctx)
        x = eq.block("x")
        x[s] = x.server
        pull = eq.build("pull")
        x[s] -= self.lr * grad(s, samples=picks)
        step = eq.build("minibatch step")
        x.server = mean(x[s])
        return [pull, step, eq.build("average")]


def _reference(problem, process, lr, seed):
    """The same rounds, client by client, from the problem's sampled gradients."""
    counts = np.asarray(problem.rows_per_client, dtype=np.int64)
    server = np.zeros(D)
    out = [server.copy()]
    for r, mask in enumerate(islice(process.masks(seed), ROUNDS)):
        picks = _picks(seed, r, counts, BATCH)
        models = []
        for i in np.flatnonzero(mask):
            g = problem.sampled_gradients(
                np.array([i]), server[None], picks[i][None], np.array([counts[i] / BATCH])
            )[0]
            models.append(server - lr * g)
        if models:
            server = np.mean(models, axis=0)
        out.append(server.copy())
    return np.array(out)


def _problem():
    return LeastSquares.random(N, D, rows_per_client=(3, 8), reg=0.05, seed=2)


@pytest.mark.parametrize("path", [*PATHS, "general path"])
def test_a_sampled_gradient_step_is_a_per_client_loops(path):
    problem = _problem()
    lr, process = 0.3 / problem.smoothness, Bernoulli(0.6, N)
    options = {"backend": SparseOnly()} if path == "general path" else path_options(path)
    result = sm.run(MinibatchFedAvg(lr), problem, process, ROUNDS, seed=5, progress=False,
                    x0=np.zeros(D), **options)  # fmt: skip
    np.testing.assert_allclose(result.server, _reference(problem, process, lr, 5), 1e-12, 1e-14)
    sizes = np.array([mask.sum() for mask in islice(process.masks(5), ROUNDS)])
    np.testing.assert_array_equal(result.gradients[1:], sizes)  # one evaluation a client
    np.testing.assert_array_equal(result.sample_gradients[1:], BATCH * sizes)
    np.testing.assert_array_equal(result.messages[1:], 2 * sizes)


class RewrittenSamples(LeastSquares):
    """Least squares whose sampled gradients are rewritten: no compiled sampled kernel."""

    def sampled_gradients(self, clients, points, picks, scale):
        return super().sampled_gradients(clients, points, picks, scale)


def test_explain_says_which_program_takes_sampled_gradients():
    pytest.importorskip("numba")
    method, process = MinibatchFedAvg(0.1), UniformSample(N, 4)
    text = str(sm.explain(method, _problem(), process, compiled=True))
    assert "compiled loop (Numba, sampled gradients): pull, minibatch step, average" in text
    problem = RewrittenSamples.random(N, D, rows_per_client=(3, 8), reg=0.05, seed=2)
    text = str(sm.explain(method, problem, process, compiled=True))
    assert "NumPy program (sampled gradients): pull, minibatch step, average" in text, text


def _phase(write):
    layout = sm.engine.Layout([Block("x", N + 1, "model"), Block("y", N, first_node=1)])
    eq = Equations(layout, n_clients=N)
    write(eq.block("x"), eq.block("y"))
    return eq.build("p")


def test_bad_draws_get_one_error():
    s, picks = np.arange(4), np.zeros((4, 2), dtype=np.int64)

    def mixed(x, y):
        y[s] = grad(s, samples=picks) - grad(s)

    def two_draws(x, y):
        y[s] = grad(s, samples=picks) - grad(s, samples=picks + 1)

    def summed(x, y):
        x.server = mean(grad(s, samples=picks))

    for write in (mixed, two_draws):
        with pytest.raises(ValueError, match="either full gradients or one draw"):
            _phase(write)
    with pytest.raises(ValueError, match="write them to a block first"):
        _phase(summed)
    with pytest.raises(ValueError, match="for each of the 4 clients"):
        grad(s, samples=np.zeros((3, 1), dtype=np.int64))
    with pytest.raises(TypeError, match="integer array|'samples'"):  # (or jaxtyping's check)
        grad(s, samples=np.zeros((4, 1)))
    with pytest.raises(ValueError, match="negative"):
        grad(s, samples=-np.ones((4, 1), dtype=np.int64))


def test_the_exact_operator_of_a_gt_saga_round_is_the_engines_round():
    """With the draws fixed, GT-SAGA's round (past the first, which fills its table by a row
    map) is affine on least squares: its exact map gives the engine's next state (1e-12)."""
    from stochmix.analysis import round_operator, run_context
    from stochmix.engine.model.rowmap import NonlinearPhaseError

    n = 6
    problem = LeastSquares.random(n, 3, rows_per_client=(3, 6), reg=0.1, seed=3)
    graphs = StaticSequence(nx.cycle_graph(n))
    method = GTSAGA(0.05 / problem.smoothness, graphs)
    states = []
    sm.run(method, problem, Full(n), 5, metrics=(), progress=False,
           callback=lambda r, z, ctx: states.append(np.array(z, copy=True)))  # fmt: skip
    method.check_problem(problem)
    ctx = run_context(method, problem)
    ctx.seed = 0  # the run's: the same draws
    everyone = np.ones(n, dtype=bool)
    with pytest.raises(NonlinearPhaseError, match="table"):  # round 0 fills it by a map
        round_operator(method, problem, everyone, 0, ctx)
    for r in range(1, 5):
        after = round_operator(method, problem, everyone, r, ctx)(states[r - 1])
        np.testing.assert_allclose(after, states[r], 1e-12, 1e-13)


def _exact_rounds(method, problem, rounds: int):
    """Run ``method`` from zeros with every node (seed 0) and check each round's exact map
    (``round_operator`` with the run's seed) against the engine's next state (1e-12);
    the states after each round and the layout."""
    from stochmix.analysis import round_operator, run_context

    n = problem.n_clients
    states = []
    sm.run(method, problem, Full(n), rounds, metrics=(), progress=False,
           callback=lambda r, z, ctx: states.append(np.array(z, copy=True)))  # fmt: skip
    method.check_problem(problem)
    ctx = run_context(method, problem)
    ctx.seed = 0
    everyone = np.ones(n, dtype=bool)
    before = ctx.layout.initial(np.zeros(problem.dim))
    for r in range(rounds):
        after = round_operator(method, problem, everyone, r, ctx)(before)
        np.testing.assert_allclose(after, states[r], 1e-12, 1e-13)
        before = states[r]
    return states, ctx.layout


def test_gt_sarah_is_linear_and_keeps_full_and_sampled_gradients_apart():
    """GT-SARAH's estimate is two sampled gradient terms at x^k and x^{k+1} (the same
    samples): no row map, a full-gradient phase and a sampled one never share a segment
    (one gradient function a segment), and every round has an exact operator that gives
    the engine's next state (1e-12)."""
    from stochmix.algorithms import GTSARAH

    n = 6
    problem = LeastSquares.random(n, 3, rows_per_client=(3, 6), reg=0.1, seed=4)
    graphs = StaticSequence(nx.cycle_graph(n))
    method = GTSARAH(0.05 / problem.smoothness, graphs, restart_every=3, batch=2)
    text = str(sm.explain(method, problem, Full(n), rounds=2))
    assert "row map" not in text, text
    apart = "full gradients\n    2. node-local segment, 6 nodes, NumPy program (sampled gradients)"
    assert apart in text, text
    _exact_rounds(method, problem, 7)


def test_gt_svrg_takes_its_snapshots_gradients_in_one_program_and_is_linear():
    """GT-SVRG's estimate takes the samples' gradients at the snapshot tau (x and tau trade
    places for one phase, then back) and at x^{k+1}: no row map, the three phases one
    program, the state after the round has x and tau where they belong, and every round
    has an exact operator that gives the engine's next state (1e-12)."""
    from stochmix.algorithms import GTSVRG

    n = 6
    problem = LeastSquares.random(n, 3, rows_per_client=(3, 6), reg=0.1, seed=5)
    graphs = StaticSequence(nx.cycle_graph(n))
    method = GTSVRG(0.05 / problem.smoothness, graphs, snapshot_every=3, batch=2)
    text = str(sm.explain(method, problem, Full(n), rounds=2))
    assert "row map" not in text, text
    assert "to the snapshot, estimate at the snapshot, estimate\n" in text, text
    states, layout = _exact_rounds(method, problem, 7)
    x0 = layout.initial(np.zeros(3))[layout.slice("x")]
    for r in range(7):  # tau: x as the last round that is a multiple of 3 began
        snapshot = 3 * (r // 3)
        x_then = states[snapshot - 1][layout.slice("x")] if snapshot else x0
        np.testing.assert_array_equal(states[r][layout.slice("tau")], x_then)


STEPS = np.array([1, 2, 1, 2])
PICKS = np.array([[0], [1], [2], [0]])


class DecayThenSample(Method):
    """Uneven decay steps (per-node trip counts) and then one sampled step over S: the
    sampled phase may not join the trips' run (chunked by prefix; one draw is one chunk)."""

    name = "DecayThenSample"
    model_block = "x"

    def blocks(self, n_clients: int) -> list[Block]:
        return [Block("x", n_clients + 1, "model")]

    def round_phases(self, r, s, ctx):
        from stochmix.algorithms.local_training import repetitions, tagged

        eq = Equations(ctx)
        x = eq.block("x")
        x[s] = x.server
        out = [eq.build("pull")]
        trips, reps = repetitions(s, STEPS[s])
        for j, group in reps:
            x[group] = 0.9 * x[group]
            out.append(tagged(eq.build(f"decay {j}"), trips, j))
        x[s] -= 0.1 * grad(s, samples=PICKS[s])
        out.append(eq.build("sampled"))
        x.server = mean(x[s])
        return [*out, eq.build("average")]


@pytest.mark.parametrize("path", PATHS)
def test_a_sampled_phase_after_trip_counts_keeps_its_draw(path):
    problem = LeastSquares.random(4, 2, rows_per_client=(3, 6), reg=0.05, seed=2)
    counts = np.asarray(problem.rows_per_client)
    want = []
    for i in range(4):
        x = 0.9 ** STEPS[i] * np.ones(2)
        g = problem.sampled_gradients(np.array([i]), x[None], PICKS[i][None],
                                      np.array([float(counts[i])]))[0]  # fmt: skip
        want.append(x - 0.1 * g)
    got = sm.run(DecayThenSample(), problem, Full(4), 1, progress=False, x0=np.ones(2),
                 **path_options(path))  # fmt: skip
    np.testing.assert_allclose(got.server[-1], np.mean(want, axis=0), 1e-13)
    assert got.sample_gradients[-1] == 4


def test_refilling_the_samples_array_changes_no_phase():
    s = np.arange(3)
    buffer = np.zeros((3, 1), dtype=np.int64)
    layout = sm.engine.Layout([Block("x", N + 1, "model"), Block("y", N, first_node=1)])
    eq = Equations(layout, n_clients=N)
    y = eq.block("y")
    y[s] = grad(s, samples=buffer)
    first = eq.build("first")
    buffer[:] = 1
    y[s] = grad(s, samples=buffer)
    second = eq.build("second")
    assert (first.samples == 0).all() and (second.samples == 1).all()
    assert first.local.samples is not second.local.samples


def test_analyses_without_the_runs_seed_refuse_sampled_gradients():
    """A round's exact map needs the draws: without the run's seed round_operator (and
    the periodic analyses built on it) refuse a round that draws, instead of drawing
    anew each call."""
    from stochmix.analysis import periodic_rate, round_operator

    n = 6
    problem = LeastSquares.random(n, 3, rows_per_client=(3, 6), reg=0.1, seed=4)
    graphs = StaticSequence(nx.cycle_graph(n))
    from stochmix.algorithms import GTSARAH

    method = GTSARAH(0.05 / problem.smoothness, graphs, restart_every=3)
    method.check_problem(problem)
    everyone = np.ones(n, dtype=bool)
    with pytest.raises(ValueError, match="the run's seed"):
        round_operator(method, problem, everyone, 0)
    with pytest.raises(ValueError, match="the run's seed"):
        periodic_rate(method, problem, everyone[None, :])


def test_gossip_segments_leave_sampled_and_indexed_phases_out():
    from stochmix.engine.runner.segments import slot_program

    layout = sm.engine.Layout([Block("x", N + 1, "model"), Block("y", N, first_node=1)])
    s = np.arange(N)
    eq = Equations(layout, n_clients=N)
    eq.block("y")[s] = grad(s, samples=np.zeros((N, 1), dtype=np.int64))
    sampled = eq.build("sampled")
    eq.block("y")[s] = eq.block("y").at[s, (s + 1) % N]
    picked = eq.build("picked")
    eq.block("y")[s] = grad(s)
    plain = eq.build("plain")
    nodes = np.arange(N + 1)
    assert slot_program([plain], layout, nodes, 1) is not None
    assert slot_program([sampled], layout, nodes, 1) is None
    assert slot_program([picked], layout, nodes, 1) is None

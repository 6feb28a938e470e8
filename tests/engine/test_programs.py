"""The engine's fast path: compiled runs of node-local phases and round templates.

Everything here is checked against the general sparse path (every phase applied through
its sparse rows), on the whole state, not just the server row.
"""

import numpy as np
import pytest

import stochmix.engine.codegen.chunks as chunks
import stochmix.engine.codegen.program as program
from stochmix.algorithms import (
    FOCUS,
    MIFA,
    SCAFFOLD,
    AmplifiedFedAvg,
    FedAvg,
    FedStale,
    GradientTracking,
    PushPull,
)
from stochmix.engine import Block, Method, NumpyBackend, run
from stochmix.engine.codegen.cache import program_for
from stochmix.mixing import OnePeerExponential
from stochmix.mixing.federated import assign_rows, average_rows
from stochmix.participation import Bernoulli, Full, Trace, UniformSample
from stochmix.problems import LeastSquares, Quadratic
from tests import CHILD_TIMEOUT
from tests._backends import SparseOnly


def states(method, problem, participation, rounds, backend="numpy", seed=3):
    out = []
    run(
        method,
        problem,
        participation,
        rounds,
        seed=seed,
        metrics=(),
        backend=backend,
        callback=lambda r, z, ctx: out.append(np.array(z)),
    )
    return np.array(out)


class Swirl(Method):
    """A made-up method whose phases exercise every form the fast path knows: in-place
    updates that read each other (a cycle), per-node coefficients, a broadcast with
    per-node weights, a cleared block, reductions into two outer rows (one through a
    weighted combine, one through a matrix with a structure pattern) and gradients."""

    name = "Swirl"

    def __init__(self, lr=0.05):
        self.lr = lr

    def blocks(self, n):
        return [Block("x", n + 1, "model"), Block("y", n + 1), Block("w", n + 1, "ones")]

    def round_phases(self, r, participants, ctx):
        n, nodes = ctx.n_clients, participants + 1
        if not participants.size:
            return []
        weights = 1.0 + (participants % 3) / 4.0  # per node
        pull = ctx.phase("pull").apply("x", "x", assign_rows(participants, n))
        swirl = (
            ctx.phase("swirl")  # x <- x + 0.1 y ; y <- 0.9 y - 0.1 x (each reads the other)
            .keep("x", nodes)
            .combine("x", nodes, "y", nodes, 0.1)
            .keep("y", nodes, 0.9)
            .combine("y", nodes, "x", nodes, -0.1 * weights)
            .gradient("y", nodes, participants, self.lr)
        )
        step = (
            ctx.phase("step")
            .keep("x", nodes)
            .gradient("x", nodes, participants, -self.lr * weights)
            .combine("w", nodes, "x", 0, weights)  # broadcast with per-node weights
            .combine("w", nodes, "y", nodes, 1.0)
        )
        gather = (
            ctx.phase("gather")
            .keep("y", 0, 0.5)
            .combine("y", 0, "w", nodes, 0.01 * weights)  # a weighted sum: an outer row
            .clear("w", nodes)
        )
        q = weights / weights.sum()
        average = ctx.phase("average").apply("x", "x", average_rows(participants, q, n, 0.7))
        return [
            pull.build(),
            swirl.build(),
            step.build(),
            step.build(),
            gather.build(),
            average.build(),
        ]


def _methods():
    n = 30
    return [
        FedAvg(0.1, 3),
        FedAvg(0.1, 3, 1.3, "unbiased", probabilities=np.linspace(0.1, 0.9, n)),
        FedAvg(0.1, 2, weights="fedau"),
        FOCUS(0.002, 3),
        FedStale(0.1, 2, 0.4, probabilities=np.linspace(0.1, 0.9, n)),
        MIFA(0.1, 2),
        SCAFFOLD(0.1, 3),
        AmplifiedFedAvg(0.1, 2, 2.0, 3),
        Swirl(),
        GradientTracking(0.05, OnePeerExponential(n), rule="natural"),
        PushPull(0.05, OnePeerExponential(n)),
    ]


@pytest.mark.parametrize("buffer_bytes", [1 << 19, 300])
@pytest.mark.parametrize("method", _methods(), ids=lambda m: m.name)
def test_fast_path_equals_the_sparse_path_on_the_whole_state(monkeypatch, method, buffer_bytes):
    """Compiled runs, one chunk or many tiny ones, give the sparse path's whole state."""
    monkeypatch.setattr(chunks, "BUFFER_BYTES", buffer_bytes)
    monkeypatch.setattr(chunks, "MIN_CHUNK_ROWS", 1)
    problem = Quadratic.random(30, 3, seed=5)
    decentralized = isinstance(method, (GradientTracking, PushPull))
    rng = np.random.default_rng(1)
    masks = rng.random((20, 30)) < np.linspace(0.05, 0.9, 30)
    masks[3] = False  # a round nobody joins
    masks[4] = True  # everyone
    masks[5] = False
    masks[5, 7] = True  # one client
    part = Full(30) if decentralized else Trace(masks)
    fast = states(method, problem, part, 20)
    slow = states(method, problem, part, 20, backend=SparseOnly())
    np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-12 * (1 + np.abs(slow).max()))


def test_swirl_runs_on_the_fast_path_with_its_cycle_out_of_place():
    """The made-up method really goes through one compiled run per round."""
    from stochmix.engine.model.layout import Layout
    from stochmix.engine.model.method import RunContext
    from stochmix.engine.plan.round_plan import LocalStep, plan_round

    method, n = Swirl(), 12
    ctx = RunContext(Layout(method.blocks(n)), n, 3)
    plan = plan_round(method.round_phases(0, np.array([1, 4, 9]), ctx), NumpyBackend(), method, ctx)
    assert len(plan) == 1 and isinstance(plan[0], LocalStep)
    source = program_for(plan[0].structure).source
    assert "acc[" in source  # reductions into the outer rows
    assert "np.take" in source  # y and w are read before they are written


@pytest.mark.parametrize(
    "method",
    [FedAvg(0.1, 3), FOCUS(0.002, 3), SCAFFOLD(0.1, 2), AmplifiedFedAvg(0.1, 2, 2.0, 3)],
    ids=lambda m: m.name,
)
@pytest.mark.parametrize("kind", ["bernoulli", "uniform"])
def test_templates_give_bit_identical_states(monkeypatch, method, kind):
    """Rounds instantiated from a template are the rounds a full build gives, bit for bit."""
    checks = _spy_on_template_checks(monkeypatch)

    class NoTemplate(type(method)):
        def template_key(self, r, participants):
            return None

    plain = NoTemplate.__new__(NoTemplate)
    plain.__dict__.update(method.__dict__)
    problem = LeastSquares.random(40, 4, 6, seed=2)
    part = Bernoulli(np.linspace(0.02, 0.5, 40)) if kind == "bernoulli" else UniformSample(40, 5)
    np.testing.assert_array_equal(
        states(method, problem, part, 60), states(plain, problem, part, 60)
    )
    assert checks and all(checks)  # templates were made, checked and found right


def _spy_on_template_checks(monkeypatch) -> list:
    """Record what every template check (RoundTemplate.matches) answers."""
    from stochmix.engine.plan.template import RoundTemplate

    answers, original = [], RoundTemplate.matches

    def matches(self, plan, participants, bases=(), *counts):
        answers.append(original(self, plan, participants, bases, *counts))
        return answers[-1]

    monkeypatch.setattr(RoundTemplate, "matches", matches)
    return answers


class Liar(FedAvg):
    """Claims its rounds differ only by participants, but its step size changes."""

    def template_key(self, r, participants):
        return participants.size

    def round_phases(self, r, participants, ctx):
        self.lr = 0.1 / (1 + r)
        return super().round_phases(r, participants, ctx)


def test_a_wrong_template_key_is_caught_and_the_run_stays_right(monkeypatch):
    checks = _spy_on_template_checks(monkeypatch)
    problem = Quadratic.random(20, 3, seed=1)
    part = UniformSample(20, 4)
    liar = Liar(0.1, 2)
    honest = Liar(0.1, 2)
    honest.template_key = lambda r, participants: None
    np.testing.assert_array_equal(
        states(liar, problem, part, 30), states(honest, problem, part, 30)
    )
    assert checks == [False]  # checked once, found wrong, never used again


class ServerIsAClient(Method):
    """Nodes are the participants themselves (no shift), and node 0's row is also summed
    into: when client 0 joins, the outer row is one of the nodes' rows."""

    name = "ServerIsAClient"

    def blocks(self, n):
        return [Block("x", n, "model")]

    def template_key(self, r, participants):
        return participants.size

    def round_phases(self, r, participants, ctx):
        if not participants.size:
            return []
        keep = ctx.phase("mix").keep("x", participants, 0.5).combine("x", 0, "x", participants, 0.1)
        return [keep.keep("x", 0).build()]


def test_a_template_whose_nodes_would_meet_its_outer_row_falls_back():
    problem = Quadratic.random(6, 2, seed=0)
    masks = np.array(
        [[0, 1, 1, 0, 0, 0], [0, 0, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0], [0, 1, 0, 1, 0, 0]] * 3,
        dtype=bool,
    )
    fast = states(ServerIsAClient(), problem, Trace(masks), 12)
    slow = states(ServerIsAClient(), problem, Trace(masks), 12, backend=SparseOnly())
    np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-14)


@pytest.mark.parametrize("method", [FedAvg(0.1, 3), FOCUS(0.002, 3), Swirl()], ids=lambda m: m.name)
def test_threads_give_the_serial_result_and_are_deterministic(monkeypatch, method):
    """Chunks split over two threads: the same numbers as one thread (to rounding: the
    outer sums add up in another order) and bit-identical from run to run."""
    import stochmix.engine.backends.dispatch as dispatch

    problem = Quadratic.random(300, 3, seed=4)
    part = Bernoulli(np.linspace(0.2, 0.9, 300))
    serial = states(method, problem, part, 12)
    monkeypatch.setattr(dispatch, "WORKERS", 2)
    monkeypatch.setattr(chunks, "PARALLEL_BUFFER_BYTES", 1)
    monkeypatch.setattr(chunks, "PARALLEL_MIN_ROWS", 1)
    monkeypatch.setattr(chunks, "MIN_CHUNK_ROWS", 7)
    calls = []
    original = program.LocalProgram._chunks
    monkeypatch.setattr(
        program.LocalProgram,
        "_chunks",
        lambda self, *a: calls.append(a[-1]) or original(self, *a),
    )
    threaded = states(method, problem, part, 12)
    again = states(method, problem, part, 12)
    assert set(calls) == {0, 1}  # both workers ran
    np.testing.assert_allclose(threaded, serial, rtol=0, atol=1e-12 * np.abs(serial).max())
    np.testing.assert_array_equal(threaded, again)


def test_a_state_that_is_not_c_contiguous_takes_the_plain_row_copies():
    """The row-element views need a C-contiguous state; any other array gets the same
    numbers through ordinary fancy indexing."""
    from stochmix.engine.backends.dispatch import execute
    from stochmix.engine.model.layout import Layout
    from stochmix.engine.model.method import RunContext
    from stochmix.engine.plan.round_plan import plan_round

    method, n = FOCUS(0.01, 2), 20
    problem = Quadratic.random(n, 3, seed=2)
    ctx = RunContext(Layout(method.blocks(n)), n, 3)
    rng = np.random.default_rng(0)
    z = rng.standard_normal((ctx.layout.size, 3))
    fortran = np.asfortranarray(z)
    plan = plan_round(
        method.round_phases(0, np.array([2, 5, 11]), ctx), NumpyBackend(), method, ctx
    )
    assert execute(plan, z, NumpyBackend(), problem, method, ctx)
    assert execute(plan, fortran, NumpyBackend(), problem, method, ctx)
    assert not fortran.flags.c_contiguous
    np.testing.assert_array_equal(fortran, z)


def test_threads_work_in_a_forked_child(monkeypatch):
    """A child forked after the parent used its threads gets a pool of its own (the
    copied pool has no threads and would wait forever)."""
    import multiprocessing

    import stochmix.engine.backends.dispatch as dispatch

    monkeypatch.setattr(dispatch, "WORKERS", 2)
    monkeypatch.setattr(chunks, "PARALLEL_BUFFER_BYTES", 1)
    monkeypatch.setattr(chunks, "PARALLEL_MIN_ROWS", 1)
    problem = Quadratic.random(200, 3, seed=4)
    part = Bernoulli(np.full(200, 0.5))
    parent = states(FOCUS(0.002, 2), problem, part, 3)
    child = multiprocessing.get_context("fork").Pool(1)
    try:
        result = child.apply_async(states, (FOCUS(0.002, 2), problem, part, 3))
        np.testing.assert_array_equal(result.get(timeout=CHILD_TIMEOUT), parent)
    finally:
        child.terminate()


def test_a_first_round_with_one_participant_does_not_stop_templates(monkeypatch):
    """FOCUS's key is "anyone there?": a one-participant first round must not decide it."""
    checks = _spy_on_template_checks(monkeypatch)
    masks = np.zeros((12, 10), dtype=bool)
    masks[0, 3] = True  # one participant first
    masks[1:, :4] = True
    problem = Quadratic.random(10, 3, seed=0)
    fast = states(FOCUS(0.002, 2), problem, Trace(masks), 12)
    slow = states(FOCUS(0.002, 2), problem, Trace(masks), 12, backend=SparseOnly())
    assert checks == [True]  # a template was made from a later round and verified
    np.testing.assert_allclose(fast, slow, rtol=0, atol=1e-12 * np.abs(slow).max())


def test_one_participant_rounds_give_the_same_numbers_with_or_without_templates():
    """A one-participant round is always built in full: a run's numbers (float32, where
    the two routes would round differently) do not depend on whether a template exists,
    so a resumed run equals an uninterrupted one."""

    class NoTemplate(FOCUS):
        def template_key(self, r, participants):
            return None

    masks = np.zeros((6, 8), dtype=bool)
    masks[0, [3, 7]] = masks[2, [2, 7]] = masks[3, 5] = masks[4, [2, 7]] = masks[5, 1] = True
    problem = Quadratic.random(8, 4, seed=4)

    def states32(method):
        out = []
        run(
            method,
            problem,
            Trace(masks),
            6,
            dtype=np.float32,
            metrics=(),
            callback=lambda r, z, ctx: out.append(np.array(z)),
        )
        return np.array(out)

    np.testing.assert_array_equal(states32(FOCUS(0.05, 3)), states32(NoTemplate(0.05, 3)))


def test_runs_on_threads_of_their_own_share_programs_safely():
    """Two runs at once on user threads use the same compiled program, not its buffers."""
    from concurrent.futures import ThreadPoolExecutor

    problem = Quadratic.random(400, 5, seed=3)
    part = Bernoulli(np.full(400, 0.6))
    alone = states(FOCUS(0.001, 3), problem, part, 10)
    with ThreadPoolExecutor(2) as pool:
        runs = [pool.submit(states, FOCUS(0.001, 3), problem, part, 10) for _ in range(4)]
        for future in runs:
            np.testing.assert_array_equal(future.result(), alone)

"""Liveness: blocks known to be zero, and node rows the state does not keep; same numbers.

FOCUS's collect empties the client rows of its tracker y every round, so from the second
round on a run need not gather them, nor store zeros over zeros (stochmix.engine.plan.liveness).
Checked against the same runs with the knowledge switched off, bit for bit, for every
method of the fast-path tests (whose rows are zero or not), on the NumPy programs and the
compiled row-wise loop, through rounds nobody joins and a checkpoint.

Rows left out of the state (run(storage=...)): found from each method's phases (FedAvg's
client models, FOCUS's client trackers), the same numbers as the full state on every
path, a made-up method whose rows are read only after the rounds probed refused, and
checkpoints that resume under either storage.
"""

from __future__ import annotations

import numpy as np
import pytest

import stochmix.engine.backends.dispatch as dispatch
import stochmix.engine.codegen.cache as programs
import stochmix.engine.plan.round_plan as round_plan
from stochmix.algorithms import FOCUS, FedAvg
from stochmix.engine import Block, Method, run
from stochmix.engine.backends import NumpyBackend
from stochmix.engine.model.equations import Equations, grad, mean
from stochmix.engine.model.layout import Layout
from stochmix.engine.plan.liveness import LivenessError, ZeroRows, find_scratch
from stochmix.participation import Trace
from stochmix.problems import Quadratic
from tests.engine.test_programs import _methods
from tests.engine.test_schedule import _steps

N = 30


def _masks(rounds=16):
    rng = np.random.default_rng(4)
    masks = rng.random((rounds, N)) < np.linspace(0.1, 0.8, N)
    masks[2] = False  # a round nobody joins
    masks[3] = True
    masks[6] = False
    masks[6, 11] = True  # one client
    return masks


def _states(method, compiled, zero, monkeypatch, **options):
    monkeypatch.setattr(dispatch, "ZERO_ROWS", zero)
    out = []
    everyone = method.client_node == 0  # decentralized: every node in every iteration
    run(
        method,
        Quadratic.random(N, 3, seed=7),
        Trace(np.ones((16, N), dtype=bool) if everyone else _masks()),
        16,
        seed=1,
        metrics=(),
        compiled=compiled,
        progress=False,
        callback=lambda r, z, ctx: out.append(np.array(z)),
        **options,
    )
    return np.array(out)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("method", _methods(), ids=lambda m: m.name)
def test_same_states_with_and_without_zero_rows(monkeypatch, method, compiled):
    with_zero = _states(method, compiled, True, monkeypatch)
    without = _states(method, compiled, False, monkeypatch)
    np.testing.assert_array_equal(with_zero, without)


def test_focus_skips_its_empty_trackers(monkeypatch):
    used = []
    original = dispatch.variant

    def spy(program, nodes, zero):
        found = original(program, nodes, zero)
        used.append(found.schedule.zero)
        return found

    monkeypatch.setattr(dispatch, "variant", spy)
    _states(FOCUS(0.002, 3), False, True, monkeypatch)
    assert used and all("y" in zero for zero in used[1:])  # round 0: x0 = 0 is zero too


def test_golden_focus_schedule_with_y_known_zero():
    (step,) = _steps(FOCUS(0.1, local_steps=2))
    program = programs._VARIANTS.built(
        ("golden", frozenset({"y"})),
        lambda: programs.LocalProgram(list(step.structure.forms), "x", step.structure.tail,
                                     zero=frozenset({"y"})),
    )  # fmt: skip
    assert program.schedule.describe() == (
        "blocks x, y, g; gather g; write x, y, g\n"
        "zero at the start: y\n"
        "snapshot rows 0, 7\n"
        "  gather b2_0 2\n"
        "  copy b0_0 z[0]\n"
        "  gradient b0_0\n"
        "  multiply b1_0 b2_0 c2:minus_one\n"  # y + G - g with y = 0: -g + G
        "  add b1_0 g\n"
        "  copy b2_1 g\n"
        "  addscaled b0_0 b1_0 c6:scalar tmp\n"
        "  gradient b0_0\n"
        "  copy b2_0 g\n"
        "  subtract b1_0 b2_1\n"
        "  add b1_0 g\n"
        "  reduce 7 b1_0 c11:one\n"
        "store x <- b0_0\n"
        "store g <- b2_0\n"
        "check b0_0\n"
        "check b2_0\n"
        "outer z[7] <- sums\n"
        "outer z[7] += c12 z[7]\n"
        "tail 0: z[0] += c13 z[0], z[0] += c14 z[7]"
    )


class Leaky(Method):
    """A made-up method whose tracker is emptied in even rounds and filled in odd ones:
    its client rows of y are zero only some of the time."""

    name = "Leaky"

    def blocks(self, n):
        return [Block("x", n + 1, "model"), Block("y", n + 1)]

    def round_phases(self, r, participants, ctx):
        nodes = participants + 1
        if not participants.size:
            return []
        step = ctx.phase("step").keep("x", nodes).combine("x", nodes, "y", nodes, 0.5)
        step.gradient("x", nodes, participants, -0.05)
        track = ctx.phase("track").keep("y", nodes, 0.3)
        if r % 2:
            track.combine("y", nodes, "x", nodes, 0.1)
        else:
            track.clear("y", nodes)
        mean = ctx.phase("mean").keep("x", 0, 0.5).combine("x", 0, "x", nodes, 0.5 / nodes.size)
        return [step.build(), track.build(), mean.build()]


@pytest.mark.parametrize("compiled", [False, True])
def test_a_block_zero_only_at_times_gives_the_same_states(monkeypatch, compiled):
    with_zero = _states(Leaky(), compiled, True, monkeypatch)
    without = _states(Leaky(), compiled, False, monkeypatch)
    np.testing.assert_array_equal(with_zero, without)
    assert np.abs(with_zero[:, N + 2 :]).max() > 0  # y does hold values


def test_checkpointed_focus_resumes_bit_identical(monkeypatch, tmp_path):
    path = tmp_path / "focus.ckpt"
    whole = _states(FOCUS(0.002, 3), False, True, monkeypatch)
    monkeypatch.setattr(dispatch, "ZERO_ROWS", True)
    problem = Quadratic.random(N, 3, seed=7)
    options = dict(seed=1, metrics=(), progress=False, checkpoint=path, checkpoint_every=5)
    options["storage"] = "full"  # the whole state is compared, client models included
    run(FOCUS(0.002, 3), problem, Trace(_masks()), 10, **options)
    out = []
    run(FOCUS(0.002, 3), problem, Trace(_masks()), 16,
        callback=lambda r, z, ctx: out.append(np.array(z)), **options)  # fmt: skip
    np.testing.assert_array_equal(np.array(out), whole[10:])


def test_zero_rows_knows_node_rows_only():
    layout = Layout([Block("x", 5, "model"), Block("h", 4, first_node=1), Block("s", 1)])
    zero = ZeroRows(layout, 1, 4)
    z = np.zeros((layout.size, 2))
    z[0] = 3.0  # the server's row: not a node row
    z[9] = 1.0  # the one-row block: no node rows at all
    zero.start(z)
    assert zero.known == frozenset({"x", "h"})
    zero.after_phase(np.array([0, 9]))  # rewrites the server and s: nothing lost
    assert zero.known == frozenset({"x", "h"})
    zero.after_phase(np.array([6]))  # a row of h
    assert zero.known == frozenset({"x"})
    zero.after_phase(None)
    assert zero.known == frozenset()


# -- rows the state does not keep ---------------------------------------------------------


def _plan_with(backend):
    return lambda phases, method, ctx: round_plan.plan_round(phases, backend, method, ctx)


def _scratch(method, n=N):
    return find_scratch(method, n, 3, None, _plan_with(NumpyBackend()))


def _record(method, storage, backend="numpy", compiled=False, rounds=16, **options):
    everyone = method.client_node == 0
    length = max(rounds, 16)  # the same process for a run of 10 rounds and one of 16
    masks = np.ones((length, N), dtype=bool) if everyone else _masks(length)
    return run(
        method, Quadratic.random(N, 3, seed=7), Trace(masks), rounds, seed=1,
        metrics=("distance", "objective", "gradient_norm"), progress=False,
        compiled=compiled, backend=backend, storage=storage, **options,
    )  # fmt: skip


def test_the_blocks_left_out_are_found_from_the_phases():
    by_name = {m.name: _scratch(m) for m in _methods()}
    assert by_name["FedAvg"] == {"x": "dead"}  # the pull writes x[S] before anything reads it
    assert by_name["FOCUS"] == {"x": "dead", "y": "zero"}  # the collect empties y[S]
    assert by_name["SCAFFOLD"] == {"x": "dead"}  # the controls c persist
    assert by_name["FedStale"] == {"x": "dead"}  # the memory h persists
    for name in ("GradientTracking", "PushPull"):  # every peer's rows persist
        assert by_name[name] == {}
    assert _scratch(Leaky()) == {}  # x persists, y holds values in odd rounds


@pytest.mark.parametrize("backend", ["numpy", "compiled", "torch"])
@pytest.mark.parametrize("method", _methods(), ids=lambda m: m.name)
def test_a_compact_state_gives_the_same_numbers(method, backend):
    if backend == "torch":
        pytest.importorskip("torch")
    options = dict(
        compiled=backend == "compiled", backend="numpy" if backend != "torch" else "torch"
    )
    compact = _record(method, "compact", **options)
    full = _record(method, "full", **options)
    np.testing.assert_array_equal(compact.server, full.server)
    for name in ("distance", "objective_gap", "gradient_norm"):
        np.testing.assert_array_equal(getattr(compact, name), getattr(full, name))


@pytest.mark.parametrize(
    "method, kept",
    [(FedAvg(0.1, 3), lambda n: 1), (FOCUS(0.002, 3), lambda n: n + 3)],
    ids=["FedAvg", "FOCUS"],
)
def test_a_compact_state_keeps_only_what_persists(method, kept):
    shapes = []
    _record(method, "compact", callback=lambda r, z, ctx: shapes.append(z.shape))
    assert set(shapes) == {(kept(N), 3)}  # FedAvg: the server; FOCUS: + y's server row, g
    shapes.clear()
    _record(method, "auto", callback=lambda r, z, ctx: shapes.append(z.shape))
    assert set(shapes) == {(Layout(method.blocks(N)).size, 3)}  # a callback sees every row


class LateReader(Method):
    """A made-up method that pulls the server model for twenty rounds, then lets its
    clients go on from their own last models: its client rows are dead in every round the
    probe sees, and read from round 20 on."""

    name = "LateReader"

    def blocks(self, n):
        return [Block("x", n + 1, "model")]

    def round_phases(self, r, participants, ctx):
        if not participants.size:
            return []
        eq = Equations(ctx)
        (x,) = eq.blocks("x")
        S = participants
        phases = []
        if r < 20:
            x[S] = x.server
            phases.append(eq.build("pull"))
        x[S] -= 0.05 * grad(S)
        phases.append(eq.build("local step"))
        x.server = mean(x[S])
        return [*phases, eq.build("average")]


def test_a_round_that_reads_rows_left_out_is_refused():
    assert _scratch(LateReader()) == {"x": "dead"}
    with pytest.raises(LivenessError, match="round 20 of LateReader.*storage='full'"):
        _record(LateReader(), "compact", rounds=30)
    full = _record(LateReader(), "full", rounds=30)
    assert np.isfinite(full.server).all()


@pytest.mark.parametrize("first, then", [("full", "compact"), ("compact", "full")])
def test_a_checkpoint_resumes_under_the_other_storage(tmp_path, first, then):
    path = tmp_path / "run.ckpt"
    whole = _record(FOCUS(0.002, 3), then)
    _record(FOCUS(0.002, 3), first, rounds=10, checkpoint=path, checkpoint_every=5)
    resumed = _record(FOCUS(0.002, 3), then, checkpoint=path, checkpoint_every=5)
    np.testing.assert_array_equal(resumed.server, whole.server)
    np.testing.assert_array_equal(resumed.distance, whole.distance)


def test_a_layout_numbers_the_rows_it_leaves_out_last():
    blocks = [Block("x", 5, "model"), Block("y", 5), Block("h", 4, first_node=1), Block("s", 1)]
    full = Layout(blocks)
    lay = Layout(blocks, {"x": "dead", "y": "zero"}, (1, 4))
    assert (lay.kept, lay.size) == (full.size - 8, full.size)
    every = np.concatenate([lay.rows(b.name) for b in blocks])
    np.testing.assert_array_equal(np.sort(every), np.arange(lay.size))  # one row space
    for b in blocks:
        for local in range(b.rows):
            row = lay.row(b.name, local)
            assert lay.locate(row) == (b.name, local)
            assert (row >= lay.kept) == (b.name in "xy" and local >= 1)  # node rows apart
        node = b.first_node + b.rows - 1
        assert lay.node_offset(b.name) + node == lay.row(b.name, b.rows - 1)
    z = np.arange(full.size * 2.0).reshape(-1, 2)
    back = full.moved(lay.moved(z, full), lay)  # full -> compact -> full
    kept = np.concatenate([full.rows(b.name)[lay.rows(b.name) < lay.kept] for b in blocks])
    np.testing.assert_array_equal(back[kept], z[kept])
    assert not back[np.setdiff1d(np.arange(full.size), kept)].any()  # left out: zero
    with pytest.raises(ValueError, match="not one range"):
        lay.slice("x")
    with pytest.raises(ValueError, match="scratch"):
        Layout(blocks, {"x": "gone"}, (1, 4))

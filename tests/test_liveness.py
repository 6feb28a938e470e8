"""Blocks known to be zero: runs skip reading them and writing zeros back, same numbers.

FOCUS's collect empties the client rows of its tracker y every round, so from the second
round on a run need not gather them, nor store zeros over zeros (stochmix.engine.liveness).
Checked against the same runs with the knowledge switched off, bit for bit, for every
method of the fast-path tests (whose rows are zero or not), on the NumPy programs and the
compiled row-wise loop, through rounds nobody joins and a checkpoint.
"""

from __future__ import annotations

import numpy as np
import pytest

import stochmix.engine.execute as execute
from stochmix.algorithms import FOCUS
from stochmix.engine import Block, Method, run
from stochmix.engine.layout import Layout
from stochmix.engine.liveness import ZeroRows
from stochmix.participation import Trace
from stochmix.problems import Quadratic
from tests.test_programs import _methods
from tests.test_schedule import _steps

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
    monkeypatch.setattr(execute, "ZERO_ROWS", zero)
    out = []
    everyone = method.model_offset == 0  # decentralized: every node in every iteration
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
    original = execute._variant

    def spy(program, nodes, zero):
        found = original(program, nodes, zero)
        used.append(found.schedule.zero)
        return found

    monkeypatch.setattr(execute, "_variant", spy)
    _states(FOCUS(0.002, 3), False, True, monkeypatch)
    assert used and all("y" in zero for zero in used[1:])  # round 0: x0 = 0 is zero too


def test_golden_focus_schedule_with_y_known_zero():
    (step,) = _steps(FOCUS(0.1, local_steps=2))
    program = execute._VARIANTS.built(
        ("golden", frozenset({"y"})),
        lambda: execute.LocalProgram(step.program.forms, "x", step.program.tail_length,
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
    monkeypatch.setattr(execute, "ZERO_ROWS", True)
    problem = Quadratic.random(N, 3, seed=7)
    options = dict(seed=1, metrics=(), progress=False, checkpoint=path, checkpoint_every=5)
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

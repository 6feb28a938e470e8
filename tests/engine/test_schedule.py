"""The schedule of a run of node-local phases: pure data, golden for FedAvg and FOCUS.

The golden texts are what :meth:`Schedule.describe` prints for one round of each method
with K = 2 local steps on 6 clients (participants 1, 3, 4). A change to them is a change
to what every emitter generates: read the diff before updating them.
"""

from __future__ import annotations

import pickle
import typing

import numpy as np
import pytest

import stochmix as sm
from stochmix.engine.backends import NumpyBackend
from stochmix.engine.codegen.cache import program_for
from stochmix.engine.codegen.program import CHUNK_PARAMETERS, ChunkCall, LocalProgram
from stochmix.engine.codegen.rowwise import ROWS_PARAMETERS, RowwiseProgram
from stochmix.engine.model.layout import Layout
from stochmix.engine.model.method import RunContext
from stochmix.engine.plan import round_plan, schedule

A = sm.algorithms

FEDAVG = """\
blocks x; gather -; write x
snapshot rows 0
  copy b0_0 z[0]
  gradient b0_0
  addscaled b0_0 g c2:scalar g
  gradient b0_0
  addscaled b0_0 g c4:scalar g
  reduce 0 b0_0 c5:scalar
store x <- b0_0
outer z[0] <- sums
outer z[0] += c6 z[0]"""

FOCUS = """\
blocks x, y, g; gather y, g; write x, y, g
snapshot rows 0, 7
  gather b1_0 1
  gather b2_0 2
  copy b0_0 z[0]
  gradient b0_0
  copy b2_1 g
  subtract b1_0 b2_0
  add b1_0 g
  addscaled b0_0 b1_0 c6:scalar tmp
  gradient b0_0
  copy b2_0 g
  subtract b1_0 b2_1
  add b1_0 g
  reduce 7 b1_0 c11:one
store x <- b0_0
store y <- zeros
store g <- b2_0
check b0_0
check b2_0
outer z[7] <- sums
outer z[7] += c12 z[7]
tail 0: z[0] += c13 z[0], z[0] += c14 z[7]"""


def _steps(method, n=6, participants=(1, 3, 4)):
    layout = Layout(method.blocks(n))
    ctx = RunContext(layout, n, 2, np.full(n, 0.5))
    method.start(ctx)
    nodes = np.array(participants, dtype=np.int64)
    plan = round_plan.plan_round(method.round_phases(0, nodes, ctx), NumpyBackend(), method, ctx)
    return [item for item in plan if isinstance(item, round_plan.LocalStep)]


@pytest.mark.parametrize(
    ("method", "golden"),
    [(A.FedAvg(0.1, local_steps=2), FEDAVG), (A.FOCUS(0.1, local_steps=2), FOCUS)],
    ids=["FedAvg", "FOCUS"],
)
def test_golden_schedule(method, golden):
    (step,) = _steps(method)
    assert program_for(step.structure).schedule.describe() == golden
    # one coefficient value per slot, in the order the schedule numbers them
    assert program_for(step.structure).schedule.coefficients == len(step.coefs)


def test_schedule_is_pure_data():
    (step,) = _steps(A.FOCUS(0.1, local_steps=3))
    plan = program_for(step.structure).schedule
    again = schedule.plan_schedule(list(step.structure.forms), "x", step.structure.tail)
    assert again == plan and hash(again) == hash(plan)
    assert pickle.loads(pickle.dumps(plan)) == plan
    for buffer in plan.checks:
        assert isinstance(buffer, schedule.Buffer) and buffer == f"b{buffer.slot}_{buffer.k}"
    assert {type(s) for s in plan.steps} <= set(typing.get_args(schedule.Step))


def test_every_step_type_has_a_numpy_statement():
    (step,) = _steps(A.FOCUS(0.1, local_steps=2))
    program = program_for(step.structure)
    writer = program._writer()
    b = schedule.Buffer(0, 0)
    coef = schedule.Coef(0, "array")
    samples = {
        schedule.Gather: schedule.Gather(b, 0),
        schedule.Gradient: schedule.Gradient(None),
        schedule.Reduce: schedule.Reduce(program.outer_rows[0], b, coef),
        schedule.Check: schedule.Check(b),
        schedule.Negate: schedule.Negate(b),
        schedule.Scale: schedule.Scale(b, coef),
        schedule.Copy: schedule.Copy(b, schedule.Single(0)),
        schedule.Multiply: schedule.Multiply(b, schedule.GRADIENT, coef),
        schedule.Add: schedule.Add(b, schedule.Buffer(1, 1)),
        schedule.Subtract: schedule.Subtract(b, schedule.Buffer(2, 0)),
        schedule.AddScaled: schedule.AddScaled(b, b, coef, schedule.SCRATCH),
        schedule.Kernel: schedule.Kernel(b, b, "shrink", (schedule.Coef(1, "scalar"),)),
        schedule.Zero: schedule.Zero(b),
        schedule.Guard: schedule.Guard(0),
        schedule.EndGuard: schedule.EndGuard(),
    }
    assert set(samples) == set(typing.get_args(schedule.Step))
    for step_type, sample in samples.items():
        before, indent = len(writer.lines), writer.indent
        program._statement(writer, sample)
        if step_type is schedule.EndGuard:  # closes the guard's block: back one level
            assert len(writer.indent) == len(indent) - 4
        else:
            assert len(writer.lines) > before, step_type
    with pytest.raises(TypeError, match="no statement"):
        program._statement(writer, ("not", "a", "step"))


def test_generated_signature_is_the_declared_interface():
    (step,) = _steps(A.FedAvg(0.1, local_steps=1))
    first = program_for(step.structure).source.splitlines()[0]
    assert first == f"def chunk({', '.join(CHUNK_PARAMETERS)}):"
    assert CHUNK_PARAMETERS[0] == "z" and len(CHUNK_PARAMETERS) == len(
        ChunkCall.__dataclass_fields__
    )
    assert isinstance(program_for(step.structure), LocalProgram)


def test_rowwise_signature_is_the_declared_interface():
    (step,) = _steps(A.FOCUS(0.1, local_steps=2))
    program = RowwiseProgram(list(step.structure.forms), "x", step.structure.tail, None)
    assert program.schedule == program_for(step.structure).schedule
    assert program.source.splitlines()[0] == f"def rows({', '.join(ROWS_PARAMETERS)}):"


# The row-wise program's loop body for the same rounds: the schedule lowered
# (stochmix.engine.codegen.row_statements). Read against the golden schedules above: the snapshot
# row and the gathered rows are read where they are, each gradient is written into the
# buffer that keeps it, each run of steps on one buffer is one loop, and FOCUS's y is
# summed from its expression (nothing reads it again).
FEDAVG_ROWS = """\
grad(gd, client, S0, g)
for j in range(d):
    b0_0[j] = S0[j] + g[j] * cs[2]
grad(gd, client, b0_0, g)
for j in range(d):
    b0_0[j] = b0_0[j] + g[j] * cs[4]
for j in range(d):
    A[0, j] += cs[5] * b0_0[j]
for j in range(d):
    z[n0, j] = b0_0[j]"""

FOCUS_ROWS = """\
grad(gd, client, S0, b2_1)
for j in range(d):
    b1_0[j] = z[n1, j] - z[n2, j] + b2_1[j]
for j in range(d):
    b0_0[j] = S0[j] + b1_0[j] * cs[6]
grad(gd, client, b0_0, b2_0)
for j in range(d):
    A[0, j] += (b1_0[j] - b2_1[j] + b2_0[j])
for j in range(d):
    z[n0, j] = b0_0[j]
for j in range(d):
    z[n1, j] = 0.0
for j in range(d):
    z[n2, j] = b2_0[j]
for j in range(d):
    bad |= (b0_0[j] - b0_0[j] != 0.0) | (b2_0[j] - b2_0[j] != 0.0)"""


@pytest.mark.parametrize(
    ("method", "golden"),
    [(A.FedAvg(0.1, local_steps=2), FEDAVG_ROWS), (A.FOCUS(0.1, local_steps=2), FOCUS_ROWS)],
    ids=["FedAvg", "FOCUS"],
)
def test_golden_row_loop(method, golden):
    (step,) = _steps(method)
    program = RowwiseProgram(list(step.structure.forms), "x", step.structure.tail, None)
    body = program.source.split("client = clients[t]\n")[1].split("\n    return")[0]
    assert "\n".join(line[8:] for line in body.splitlines() if line.strip()) == golden

"""A kernel on one row after a run's average (the server's prox in FedMid and FedDualAvg,
x_0 <- prox(x_0)) joins the run as a phase of its tail: applied once the run's outer rows
are set, with the kernel's NumPy or Torch form on that row. The round is one segment, and
its numbers, every cost column and the round a diverging run stops at are those of the
two-segment plan bit for bit, on the NumPy programs, the compiled loop and Torch, for the
three kernels (L1, elastic net, box). A kernel on one of the run's nodes, or on a row the
run does not touch, does not join."""

import numpy as np
import pytest

import stochmix as sm
from stochmix import algorithms as A
from stochmix.engine.model.local_form import KernelTerm, LocalForm
from stochmix.engine.model.tail_kernel import tail_kernel
from stochmix.engine.plan import round_plan
from stochmix.participation import Bernoulli, UniformSample
from tests._backends import PATHS, path_options

N = 40
COLUMNS = ("server", "distance", "objective_gap", "gradients", "messages", "floats")


def _problem(regularizer):
    smooth = sm.problems.LeastSquares.random(N, 4, rows_per_client=3, seed=5)
    return sm.problems.Composite(smooth, regularizer)


REGULARIZERS = {
    "L1": lambda: sm.problems.L1(1.0),
    "elastic net": lambda: sm.problems.ElasticNet(1.0, 0.1),
    "box": lambda: sm.problems.Box(-0.2, 0.3),
}
METHODS = {
    "FedMid": lambda lr: A.FedMid(lr, 3),
    "FedDualAvg": lambda lr: A.FedDualAvg(lr, 3),
}


def _apart(monkeypatch):
    monkeypatch.setattr(round_plan, "tail_kernel", lambda *args: None)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("regularizer", list(REGULARIZERS))
def test_the_servers_prox_is_the_runs_tail(regularizer, method, path, monkeypatch):
    problem = _problem(REGULARIZERS[regularizer]())
    make = METHODS[method]
    lr = 0.3 / problem.smoothness
    text = str(sm.explain(make(lr), problem, UniformSample(N, 8), rounds=2))
    assert "; then prox x" in text and "2. node-local" not in text, text
    options = path_options(path)
    fused = sm.run(make(lr), problem, Bernoulli(0.3, N), 12, seed=3, progress=False, **options)
    _apart(monkeypatch)
    text = str(sm.explain(make(lr), problem, UniformSample(N, 8), rounds=2))
    assert "2. node-local segment, 1 nodes" in text, text
    apart = sm.run(make(lr), problem, Bernoulli(0.3, N), 12, seed=3, progress=False, **options)
    for column in COLUMNS:
        np.testing.assert_array_equal(getattr(fused, column), getattr(apart, column), column)
    smooth = sm.run(make(lr), problem.smooth, Bernoulli(0.3, N), 12, seed=3, progress=False)
    assert np.abs(fused.server[-1] - smooth.server[-1]).max() > 1e-3  # the prox acted


@pytest.mark.parametrize("path", PATHS)
def test_a_diverging_run_stops_where_the_two_segments_stopped(path, monkeypatch):
    """The tail checks the row it writes: a step far too large for L blows the server
    model up, and both plans report divergence at the same round."""
    problem = _problem(sm.problems.L1(0.01))
    lr = 40.0 / problem.smoothness
    options = path_options(path)
    fused = sm.run(A.FedMid(lr, 3), problem, Bernoulli(0.5, N), 200, seed=1, progress=False,
                   **options)  # fmt: skip
    _apart(monkeypatch)
    apart = sm.run(A.FedMid(lr, 3), problem, Bernoulli(0.5, N), 200, seed=1, progress=False,
                   **options)  # fmt: skip
    assert fused.diverged_at is not None
    assert fused.diverged_at == apart.diverged_at


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("regularizer", ["L1", "elastic net"])
def test_float32_keeps_each_paths_bits(regularizer, path, monkeypatch):
    """In float32 the Numba loop computes its kernels in float64 (its round scalars are),
    the NumPy programs and Torch in float32: the tail computes as the run's program does
    (``RowwiseProgram.row_ops``), so each path keeps the bits its two segments gave (in
    the NumPy form, the compiled path's prox moved 20 entries by up to 7e-8)."""
    problem = _problem(REGULARIZERS[regularizer]())
    lr = 0.3 / problem.smoothness
    options = path_options(path, np.float32)
    process = Bernoulli(0.3, N)
    fused = sm.run(A.FedMid(lr, 3), problem, process, 10, seed=3, progress=False, **options)
    _apart(monkeypatch)
    apart = sm.run(A.FedMid(lr, 3), problem, process, 10, seed=3, progress=False, **options)
    np.testing.assert_array_equal(fused.server, apart.server)
    wide = sm.run(A.FedMid(lr, 3), problem, process, 10, seed=3, progress=False,
                  **path_options(path))  # fmt: skip
    assert not np.array_equal(fused.server, wide.server)  # float32 did run


def test_the_schedule_names_a_tail_kernel():
    from stochmix.analysis.linear.operators import run_context
    from stochmix.engine.backends import NumpyBackend

    problem = _problem(sm.problems.L1(1.0))
    method = A.FedMid(0.3 / problem.smoothness, 2)
    ctx = run_context(method, problem)
    ctx.regularizer = problem.regularizer  # (what stochmix.run's context holds)
    phases = method.round_phases(0, np.arange(5), ctx)
    plan = round_plan.plan_round(phases, NumpyBackend(compiled=False), method, ctx)
    steps = [item for item in plan if isinstance(item, round_plan.LocalStep)]
    assert len(steps) == 1
    text = steps[0].structure.schedule.describe()
    assert "= shrink(z[0]; c" in text, text


def _kernel_form(node, block="x"):
    kernel = KernelTerm(block, block, "shrink", (0.1,))
    return LocalForm(np.array([node]), (block,), (), (), (), None, (), (kernel,))


def test_which_kernels_join_a_tail():
    layout = sm.engine.model.layout.Layout([sm.Block("x", N + 1, "model")])
    nodes = np.arange(1, 9)
    server = layout.row("x", 0)
    joined = tail_kernel(_kernel_form(0), layout, nodes, {server}, False)
    assert joined is not None and joined.nodes.size == 0
    assert joined.kernels[0][:3] == (server, server, "shrink")
    assert joined.outer_rows == {server} and joined.single_reads == {server}
    # on one of the run's nodes; on a row the run does not set (and no tail yet)
    assert tail_kernel(_kernel_form(3), layout, nodes, {server}, False) is None
    assert tail_kernel(_kernel_form(0), layout, nodes, set(), False) is None
    assert tail_kernel(_kernel_form(0), layout, nodes, set(), True) is not None
    # a node the block has no row for
    assert tail_kernel(_kernel_form(N + 1), layout, nodes, {server}, True) is None
    # a client's row (one process holds it on the distributed backend), even after a tail
    client = layout.row("x", 20)
    assert tail_kernel(_kernel_form(20), layout, nodes, {client}, True) is None
    # every node is a client's where clients start at node 0 (decentralized layouts)
    assert tail_kernel(_kernel_form(0), layout, nodes, {server}, True, client_node=0) is None

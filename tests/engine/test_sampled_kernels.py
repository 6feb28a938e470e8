"""Sampled gradients in the compiled loop (issue 42: the variance-reduced estimates
compiled): ``Problem.sampled_row_gradient`` gives a Numba kernel of one node's minibatch
gradient, reading the round's draw by the node's place in the run. Each kernel computes
what ``sampled_gradients`` computes; GT-SAGA, GT-SVRG and GT-SARAH run one compiled
program a round with their mixing products inside, with the numbers and every cost
column of the whole-block NumPy path; a problem that rewrites its sampled gradients keeps
the NumPy programs; bad draws get the same error on every path."""

import networkx as nx
import numpy as np
import pytest

import stochmix as sm
from stochmix import algorithms as A
from stochmix.engine.plan.gradients import checked_samples
from stochmix.mixing import StaticSequence
from stochmix.participation import Full
from stochmix.problems import L1, Composite, LeastSquares, Logistic
from tests._backends import WholeBlocks

pytest.importorskip("numba")

N, D = 12, 4
GRAPH = StaticSequence(nx.random_regular_graph(4, N, seed=3))
COLUMNS = ("gradients", "messages", "floats", "sample_gradients")
METHODS = {
    "GT-SAGA": lambda lr: A.GTSAGA(lr, GRAPH),
    "GT-SVRG": lambda lr: A.GTSVRG(lr, GRAPH, snapshot_every=3, batch=2),
    "GT-SARAH": lambda lr: A.GTSARAH(lr, GRAPH, restart_every=4, batch=3),
}
PROBLEMS = {
    "least squares": lambda: LeastSquares.random(N, D, rows_per_client=(3, 7), reg=0.1, seed=7),
    "logistic": lambda: Logistic.random(N, D, rows_per_client=(4, 9), reg=0.05, seed=7),
    "softmax": lambda: Logistic.random(N, 3, rows_per_client=(4, 9), n_classes=3, reg=0.05,
                                       seed=7),  # fmt: skip
}


def _kernel_rows(problem, clients, points, picks, dtype):
    """Each node's sampled gradient from the compiled kernel, called as the loop calls it."""
    kernel, _, fixed = problem.sampled_row_gradient(np.dtype(dtype))
    data = (*fixed, *checked_samples(problem, clients, picks))
    points = points.astype(dtype)
    out = np.empty_like(points)
    for t in range(clients.size):
        kernel(data, t, points[t], out[t])
    return out


@pytest.mark.parametrize("name", PROBLEMS)
@pytest.mark.parametrize("batch", [1, 3])
def test_each_kernel_computes_the_problems_sampled_gradients(name, batch):
    problem = PROBLEMS[name]()
    rng = np.random.default_rng(5)
    clients = np.array([7, 0, 3, 11, 3])  # (a client twice: rows are nodes, not clients)
    held = np.asarray(problem.rows_per_client)[clients]
    picks = (rng.random((clients.size, batch)) * held[:, None]).astype(np.int64)
    picks[0, :] = 0  # (repeats allowed)
    points = rng.normal(size=(clients.size, problem.dim))
    _, _, scale = checked_samples(problem, clients, picks)
    want = problem.sampled_gradients(clients, points, picks, scale)
    got = _kernel_rows(problem, clients, points, picks, np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
    single = _kernel_rows(problem, clients, points, picks, np.float32)
    assert single.dtype == np.float32
    np.testing.assert_allclose(single, want, rtol=1e-4, atol=1e-5)


def _runs(method, problem, rounds=6, **options):
    lr = 0.1 / problem.smoothness
    x0 = np.random.default_rng(1).normal(size=(N, problem.dim))
    common = {"seed": 2, "x0": x0, "progress": False, "metrics": ("distance",)}
    got = sm.run(METHODS[method](lr), problem, Full(N), rounds, compiled=True, **common,
                 **options)  # fmt: skip
    want = sm.run(METHODS[method](lr), problem, Full(N), rounds, **common,
                  backend=WholeBlocks(compiled=False))  # fmt: skip
    return got, want


@pytest.mark.parametrize(
    "problem",
    [
        "least squares",
        *(pytest.param(p, marks=pytest.mark.slow) for p in PROBLEMS if p != "least squares"),
    ],
)
@pytest.mark.parametrize(
    "method",
    [  # (GT-SAGA's compiled run against its reference: tests/engine/test_indexed_rows.py;
        # GT-SARAH's in the slow stage, for the quick suite's time: it shares GT-SVRG's loop)
        pytest.param("GT-SAGA", marks=pytest.mark.slow),
        pytest.param("GT-SARAH", marks=pytest.mark.slow),
        *(m for m in METHODS if m not in ("GT-SAGA", "GT-SARAH")),
    ],
)
def test_variance_reduced_tracking_in_the_compiled_loop(method, problem):
    """The compiled loop with the products inside the run against the whole-block
    passes and the NumPy programs' sampled gradients: the same numbers to rounding,
    every cost column the same."""
    got, want = _runs(method, PROBLEMS[problem]())
    np.testing.assert_allclose(got.node_models, want.node_models, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(got.distance, want.distance, rtol=1e-12, atol=1e-13)
    for column in COLUMNS:
        np.testing.assert_array_equal(getattr(got, column), getattr(want, column), column)


@pytest.mark.parametrize("method", METHODS)
def test_one_compiled_program_a_round(method):
    """Rounds between snapshots (GT-SVRG) and restarts (GT-SARAH): one program, which
    also computes the mixing products (a snapshot or restart round takes full gradients
    too, and a run takes one kind of gradient: two programs there)."""
    problem = PROBLEMS["least squares"]()
    plan = sm.explain(METHODS[method](0.01), problem, Full(N), rounds=3, compiled=True)
    for r in (1, 2):
        (segment,) = plan.rounds[r].segments
        assert segment.runs == "compiled loop (Numba, sampled gradients)", segment
        assert segment.products == 2 and not segment.waits


@pytest.mark.slow
def test_a_large_round_on_two_threads(monkeypatch):
    """Rounds large enough for two threads: each thread's nodes read their own draws (two
    workers even on a machine of one CPU)."""
    from stochmix.engine.backends import dispatch
    from stochmix.engine.codegen.rowwise import RowwiseProgram

    monkeypatch.setattr(dispatch, "WORKERS", 2)
    calls = []
    real = RowwiseProgram._split

    def split(self, *args):
        found = real(self, *args)
        calls.append(found[1])  # (nodes a call, parts)
        return found

    monkeypatch.setattr(RowwiseProgram, "_split", split)
    n, d = 4400, 32  # (n d above the loop's PARALLEL_MIN_ENTRIES)
    graph = StaticSequence(nx.random_regular_graph(4, n, seed=1))
    problem = LeastSquares.random(n, d, rows_per_client=5, reg=0.1, seed=3)
    lr = 0.1 / problem.smoothness
    common = {"seed": 4, "progress": False, "metrics": ()}
    got = sm.run(A.GTSAGA(lr, graph), problem, Full(n), 3, compiled=True, **common)
    want = sm.run(A.GTSAGA(lr, graph), problem, Full(n), 3, backend=WholeBlocks(), **common)
    np.testing.assert_allclose(got.node_models, want.node_models, rtol=1e-12, atol=1e-13)
    assert max(calls) == 2  # the sampled runs were split over two threads


class RewrittenSamples(LeastSquares):
    """Least squares with its sampled gradients rewritten: the kernel is not asked."""

    def sampled_gradients(self, clients, points, picks, scale):
        return 2.0 * super().sampled_gradients(clients, points, picks, scale)


class RewrittenWithKernel(RewrittenSamples):
    """...and with a kernel of its own again."""

    def sampled_row_gradient(self, dtype):
        return super().sampled_row_gradient(dtype)


def test_a_problem_that_rewrites_its_sampled_gradients_keeps_them():
    assert LeastSquares.compiled_samples
    assert not RewrittenSamples.compiled_samples
    assert RewrittenWithKernel.compiled_samples
    problem = RewrittenSamples.random(N, D, rows_per_client=(3, 7), reg=0.1, seed=7)
    plan = sm.explain(METHODS["GT-SAGA"](0.01), problem, Full(N), rounds=3, compiled=True)
    assert "NumPy program (sampled gradients)" in str(plan)
    got, want = _runs("GT-SAGA", problem)  # (its doubled gradients on both paths)
    np.testing.assert_allclose(got.node_models, want.node_models, rtol=1e-12, atol=1e-13)


def test_composite_problems_hand_over_their_smooth_parts_kernel():
    smooth = PROBLEMS["least squares"]()
    got = Composite(smooth, L1(0.01)).sampled_row_gradient(np.float64)
    want = smooth.sampled_row_gradient(np.float64)
    assert got[:2] == want[:2]
    assert all(a is b for a, b in zip(got[2], want[2], strict=True))
    assert Composite(smooth, L1(0.01)).compiled_samples
    # a smooth part that rewrites its sampled gradients declares no kernel: nor does its
    # composite (the kernel would compute the base class's gradients)
    rewritten = RewrittenSamples.random(N, D, rows_per_client=(3, 7), reg=0.1, seed=7)
    assert not Composite(rewritten, L1(0.01)).compiled_samples
    from stochmix.engine.plan.gradients import row_gradient

    found = row_gradient(Composite(rewritten, L1(0.01)), sm.engine.NumpyBackend(compiled=True),
                         np.float64)  # fmt: skip
    assert found is not None and found.sampled is None


class BadDraw(A.GTSARAH):
    """GT-SARAH drawing its samples as if each client held one more."""

    def _sizes(self, n_clients):
        return super()._sizes(n_clients) + 1


@pytest.mark.parametrize("compiled", [True, False])
def test_a_draw_out_of_range_gets_one_error_on_every_path(compiled):
    problem = LeastSquares.random(N, D, rows_per_client=1, seed=7)  # (one sample each)
    method = BadDraw(0.01, GRAPH, batch=4)
    with pytest.raises(ValueError, match=r"grad\(samples=...\): client \d+ holds 1 samples"):
        sm.run(method, problem, Full(N), 5, compiled=compiled, progress=False, seed=1)

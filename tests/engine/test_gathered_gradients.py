"""The gradients of an activated round's scattered clients by one compiled pass
(:mod:`stochmix.engine.codegen.gathered_gradients`, used by
:class:`~stochmix.engine.backends.dispatch.OneProcess` for whole-block phases of at least
``GATHER_MIN_CLIENTS`` clients), and the row sums taken in two halves
(:func:`stochmix._arrays.row_sums`).

What must hold: the pass gives each problem's gradients (the same bits as the NumPy
formula where the operations are the same, rounding where the order differs); a run that
uses it (one thread or two) ends where the run that does not ends, in every Result column;
it is not used with ``compiled=False``, for a method that takes its gradients elsewhere
than at its model rows, or below the threshold; and the row sums do not depend on the
threads.
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

import stochmix as sm
from stochmix import _arrays
from stochmix import algorithms as A
from stochmix.engine.backends import dispatch
from stochmix.engine.codegen import gathered_gradients
from stochmix.engine.model.method import Method

pytest.importorskip("numba")

N = 60
GRAPH = sm.mixing.StaticSequence(nx.random_regular_graph(4, N, seed=2))
COLUMNS = ("participants", "gradients", "messages", "floats", "sample_gradients")

PROBLEMS = {
    "diagonal quadratic": lambda: sm.problems.Quadratic.random(N, 4, seed=1),
    "full quadratic": lambda: sm.problems.Quadratic.random(N, 4, seed=1, diagonal=False),
    "least squares": lambda: sm.problems.LeastSquares.random(N, 4, rows_per_client=5, seed=1),
    "logistic": lambda: sm.problems.Logistic.random(N, 4, rows_per_client=6, seed=1),
}


@pytest.mark.parametrize(
    "name",
    ["diagonal quadratic", "least squares"]
    # (each a compile of the pass: the other two in the slow stage)
    + [pytest.param(n, marks=pytest.mark.slow) for n in ("full quadratic", "logistic")],
)
def test_the_pass_gives_the_problems_gradients(name):
    problem = PROBLEMS[name]()
    kernel, fetch, data = problem.row_gradient(np.dtype(np.float64))
    rng = np.random.default_rng(4)
    clients = rng.integers(0, N, size=45).astype(np.int64)  # any order, with repeats
    z = rng.standard_normal((3 * N, 4))
    at = rng.permutation(3 * N)[: clients.size].astype(np.int64)
    out = np.full((clients.size, 4), np.nan)
    gathered_gradients.gathered_function(kernel, fetch)(data, clients, z, at, out)
    want = problem.gradients(clients, z[at])
    if name == "diagonal quadratic":  # (x - z_c) h_c: the formula's operations, in order
        np.testing.assert_array_equal(out, want)
    else:
        np.testing.assert_allclose(out, want, rtol=1e-13, atol=1e-14)


def _calls(monkeypatch) -> list:
    """The sizes of the rounds whose gradients the compiled pass took."""
    seen: list = []
    found = dispatch.OneProcess._gathered

    def spied(self, clients):
        out = found(self, clients)
        if out is not None:
            seen.append(clients.size)
        return out

    monkeypatch.setattr(dispatch.OneProcess, "_gathered", spied)
    return seen


def _run(problem, compiled, method=None):
    method = method or A.GradientTracking(0.05, GRAPH, check_mixing=False)
    return sm.run(method, problem, sm.participation.Bernoulli(0.5, N), 12, seed=3,
                  progress=False, compiled=compiled)  # fmt: skip


@pytest.mark.parametrize("split", [False, True], ids=["one thread", "two threads"])
@pytest.mark.parametrize("name", ["diagonal quadratic", "least squares"])
def test_a_run_through_the_pass_ends_where_the_numpy_formula_ends(name, split, monkeypatch):
    monkeypatch.setattr(dispatch, "GATHER_MIN_CLIENTS", 8)
    monkeypatch.setattr(dispatch, "SPLIT_CLIENTS", 16 if split else 10**9)
    want = _run(PROBLEMS[name](), False)
    sizes = _calls(monkeypatch)
    got = _run(PROBLEMS[name](), "auto")
    assert len(sizes) >= 10 and min(sizes) >= 8  # every round past the first took it
    if name == "diagonal quadratic":
        np.testing.assert_array_equal(got.server, want.server)
        np.testing.assert_array_equal(got.final, want.final)
    else:
        np.testing.assert_allclose(got.server, want.server, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(got.final, want.final, rtol=1e-12, atol=1e-13)
    for column in COLUMNS:
        np.testing.assert_array_equal(getattr(got, column), getattr(want, column))


class _ShiftedPoints(A.GradientTracking):
    """Gradients taken half a unit off the model rows: not the pass's points."""

    def points(self, z, ctx, clients):
        return Method.points(self, z, ctx, clients) + 0.5


def test_the_pass_is_not_used_where_it_does_not_apply(monkeypatch):
    problem = PROBLEMS["least squares"]()
    sizes = _calls(monkeypatch)
    _run(problem, "auto")  # 30 of 60 active: below the threshold
    assert sizes == []
    monkeypatch.setattr(dispatch, "GATHER_MIN_CLIENTS", 8)
    _run(problem, False)  # compiled=False: NumPy
    assert sizes == []
    shifted = _ShiftedPoints(0.05, GRAPH, check_mixing=False)
    got = _run(problem, "auto", shifted)  # points of its own
    assert sizes == []
    again = _run(problem, "auto", _on_instance())
    assert sizes == []
    np.testing.assert_array_equal(again.final, got.final)


def _on_instance():
    method = A.GradientTracking(0.05, GRAPH, check_mixing=False)
    method.points = lambda z, ctx, clients: Method.points(method, z, ctx, clients) + 0.5
    return method


@pytest.mark.parametrize("compiled", [False, True])
def test_points_set_on_the_instance_count_as_the_classs(compiled):
    """Node-local runs (every node active) read the model rows in place of ``points``
    where the method has none of its own: a ``points`` set on the instance was taken for
    none (the run was the unshifted method's)."""
    problem = PROBLEMS["least squares"]()
    for process in (sm.participation.Full(N), sm.participation.Bernoulli(0.5, N)):
        runs = [
            sm.run(method, problem, process, 6, seed=3, progress=False, compiled=compiled)
            for method in (_ShiftedPoints(0.05, GRAPH, check_mixing=False), _on_instance())
        ]
        np.testing.assert_array_equal(runs[0].server, runs[1].server)
        np.testing.assert_array_equal(runs[0].gradients, runs[1].gradients)


@pytest.mark.parametrize("rows", [7, 1000, 30_000, 26_215])
def test_row_sums_do_not_depend_on_the_threads(rows, monkeypatch):
    x = np.random.default_rng(rows).standard_normal((rows, 10))
    two = _arrays.row_sums(x)
    monkeypatch.setattr(_arrays, "CORES", 1)
    one = _arrays.row_sums(x)
    np.testing.assert_array_equal(one, two)
    np.testing.assert_allclose(one, x.sum(axis=0), rtol=1e-12, atol=1e-11)
    # the halves are taken from 2^18 entries on: summed in that order, by hand
    k = 102
    m = (rows // k) * k
    views = x[:m].reshape(m // k, k * 10)
    if x.size >= _arrays.HALVES_MIN:
        wide = views[: views.shape[0] // 2].sum(axis=0) + views[views.shape[0] // 2 :].sum(axis=0)
    else:
        wide = views.sum(axis=0)
    want = wide.reshape(k, 10).sum(axis=0) + x[m:].sum(axis=0)
    np.testing.assert_array_equal(one, want)

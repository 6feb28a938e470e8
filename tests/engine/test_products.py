"""Mixing inside node-local runs (issue 42; :mod:`stochmix.engine.model.product_form`): a
whole-block phase whose terms are node-local but for its products joins the run around
it, the products computed when the run starts. Every method that takes it gives the
numbers and every cost column of the whole-block path, on the compiled loop, on NumPy
programs and on Torch; a product never reads a block that its run wrote before it."""

import networkx as nx
import numpy as np
import pytest
import scipy.sparse as sp

import stochmix as sm
from stochmix import algorithms as A
from stochmix.engine import Block, Method, NumpyBackend
from stochmix.mixing import OnePeerExponential, StaticSequence
from stochmix.mixing.rowsparse import RowSparse
from stochmix.participation import Full
from stochmix.problems import L1, Composite, LeastSquares
from tests._backends import WholeBlocks

N, D = 12, 3
GRAPH = StaticSequence(nx.random_regular_graph(4, N, seed=3))

METHODS = {
    "gradient tracking": lambda lr: A.GradientTracking(lr, GRAPH),
    "gradient tracking atc": lambda lr: A.GradientTracking(lr, GRAPH, form="atc"),
    "gradient tracking, time-varying": lambda lr: A.GradientTracking(
        lr, OnePeerExponential(N), rule="natural"
    ),
    "DGD cta": lambda lr: A.DGD(lr, GRAPH, form="cta"),
    "EXTRA": lambda lr: A.EXTRA(lr, GRAPH),
    "NIDS": lambda lr: A.NIDS(lr, GRAPH),
    "push-pull": lambda lr: A.PushPull(lr, GRAPH),
    "Acc-DNGD": lambda lr: A.AccDNGD(lr, GRAPH, mu=0.01),
    "K-GT": lambda lr: A.KGT(lr, GRAPH, local_steps=2),
    "PG-EXTRA": lambda lr: A.PGEXTRA(lr, GRAPH),
}
#: methods whose every mixing phase would be a run alone, without gradients: the planner
#: keeps those whole-block phases (a pass over slices costs what the run would)
LONE = ("NIDS", "K-GT")
COLUMNS = ("gradients", "messages", "floats", "sample_gradients", "time")


class Counted(NumpyBackend):
    """The NumPy backend counting its calls of ``run_products``."""

    def __init__(self, **options):
        super().__init__(**options)
        self.products = 0

    def run_products(self, z, products):
        self.products += 1
        return super().run_products(z, products)


def _problem(name):
    problem = LeastSquares.random(N, D, rows_per_client=(3, 6), reg=0.1, seed=7)
    return Composite(problem, L1(0.01)) if name == "PG-EXTRA" else problem


def _run(name, path, monkeypatch, dtype=np.float64):
    problem = _problem(name)
    lr = 0.1 / problem.smoothness
    x0 = np.random.default_rng(1).normal(size=(N, D))
    options = dict(x0=x0, seed=3, progress=False, metrics=("distance", "consensus"))
    if path == "torch":
        torch = pytest.importorskip("torch")
        from stochmix.engine import TorchBackend

        class CountedTorch(TorchBackend):
            products = 0

            def run_products(self, z, products):
                self.products += 1
                return super().run_products(z, products)

        counted = options["backend"] = CountedTorch(dtype=torch.float64)
    else:
        pytest.importorskip("numba")
        counted = options["backend"] = Counted(compiled=True, dtype=dtype)
        if path == "numpy programs":  # the kernel is there, the segments take programs
            from stochmix.engine.backends import dispatch

            monkeypatch.setattr(dispatch, "runs_rowwise", lambda *args: False)
    got = sm.run(METHODS[name](lr), problem, Full(N), 12, **options)
    options["backend"] = WholeBlocks(compiled=True, dtype=dtype)
    want = sm.run(METHODS[name](lr), problem, Full(N), 12, **options)
    return got, want, counted


def _cases():
    """Every method on every path; past the compiled loop, the quick run keeps gradient
    tracking and EXTRA (the others in the slow stage)."""
    for name in METHODS:
        for path in ("compiled", "numpy programs", "torch"):
            quick = path == "compiled" or name in ("gradient tracking", "EXTRA")
            marks = () if quick else (pytest.mark.slow,)
            yield pytest.param(name, path, marks=marks, id=f"{name}-{path}")


@pytest.mark.parametrize(("name", "path"), list(_cases()))
def test_products_inside_runs_give_the_whole_block_numbers(name, path, monkeypatch):
    got, want, counted = _run(name, path, monkeypatch)
    if name in LONE:  # its mixing phases each alone after a barrier: whole-block passes
        assert counted.products == 0, name
    else:
        assert counted.products >= 11, name  # inside the runs (every round past the first)
    scale = 1.0 + np.abs(want.final).max()
    np.testing.assert_allclose(got.final, want.final, rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(got.server, want.server, rtol=0, atol=1e-12 * scale)
    np.testing.assert_allclose(got.distance, want.distance, rtol=1e-9, atol=1e-24)
    for column in COLUMNS:  # the costs do not depend on the path
        np.testing.assert_array_equal(getattr(got, column), getattr(want, column), column)


def test_float32_products_stay_within_rounding(monkeypatch):
    got, want, counted = _run("gradient tracking", "compiled", monkeypatch, np.float32)
    assert counted.products >= 12
    assert not np.array_equal(got.final, want.final)  # (float32 rounds otherwise)
    np.testing.assert_allclose(got.final, want.final, rtol=0, atol=1e-5)


def test_gradient_tracking_is_one_program_a_round_on_the_compiled_loop():
    pytest.importorskip("numba")
    problem = _problem("gradient tracking")
    method = METHODS["gradient tracking"](0.01)
    plan = sm.explain(method, problem, Full(N), rounds=3, compiled=True)
    for later in plan.rounds[1:]:
        (segment,) = later.segments
        assert (segment.kind, segment.products, segment.waits) == ("node-local", 2, False)
    # and NumPy programs keep the whole-block phases (slower with products inside)
    plain = sm.explain(method, problem, Full(N), rounds=3, compiled=False)
    assert [s.kind for s in plain.rounds[2].segments] == ["whole-block"] * 2


class MixTwice(Method):
    """A made-up method: y <- W x + y - G(x) / 100, then x <- W y - x - G(x) / 100 (the
    second product reads y, which the first phase writes: it must see the new y, so the
    run is cut there)."""

    name = "mix twice"
    client_node = 0
    rounds_repeat = True

    def __init__(self, w):
        self.w = RowSparse.whole(sp.csr_array(w))

    def blocks(self, n_clients):
        return [Block("x", n_clients, "model"), Block("y", n_clients, "zeros")]

    def round_phases(self, r, participants, ctx):
        first = (
            ctx.phase("first")
            .apply("y", "x", self.w)
            .keep("y", participants)
            .gradient("y", participants, participants, -0.01)
        )
        second = (
            ctx.phase("second")
            .apply("x", "y", self.w)
            .combine("x", participants, "x", participants, -1.0)
            .gradient("x", participants, participants, -0.01)
        )
        return [first.build(), second.build()]


def test_a_product_never_reads_a_block_its_run_wrote_before(monkeypatch):
    pytest.importorskip("numba")
    w = nx.to_numpy_array(nx.cycle_graph(N)) / 3 + np.eye(N) / 3
    problem = LeastSquares.random(N, D, seed=2)
    x0 = np.random.default_rng(4).normal(size=(N, D))
    backend = Counted(compiled=True)
    got = sm.run(MixTwice(w), problem, Full(N), 5, x0=x0, backend=backend, progress=False)
    plan = sm.explain(MixTwice(w), problem, Full(N), rounds=2, compiled=True)
    segments = plan.rounds[1].segments
    assert [(s.products, s.waits) for s in segments] == [(1, False), (1, True)]
    x, y = x0.copy(), np.zeros((N, D))
    every = np.arange(N)
    for _ in range(5):
        y = w @ x + y - 0.01 * problem.gradients(every, x)
        x = w @ y - x - 0.01 * problem.gradients(every, x)
    np.testing.assert_allclose(got.node_models, x, rtol=1e-13, atol=1e-13)  # (x reads y)
    assert backend.products == 10


class SampledOnNumpy(LeastSquares):
    """Least squares whose sampled gradients are rewritten (the same formula): it declares
    no compiled sampled kernel, so its sampled runs take the NumPy programs."""

    def sampled_gradients(self, clients, points, picks, scale):
        return super().sampled_gradients(clients, points, picks, scale)


def test_runs_of_sampled_gradients_on_numpy_programs_keep_whole_block_mixing():
    """GT-SARAH's estimate takes sampled gradients; where they run NumPy programs (no
    compiled sampled kernel) its mixing phases stay whole-block passes there (faster),
    with the same numbers."""
    pytest.importorskip("numba")
    problem = SampledOnNumpy.random(N, D, rows_per_client=(3, 6), reg=0.1, seed=7)
    assert not problem.compiled_samples
    lr = 0.1 / problem.smoothness
    backend = Counted(compiled=True)
    got = sm.run(A.GTSARAH(lr, GRAPH, batch=2), problem, Full(N), 6, seed=2, backend=backend,
                 progress=False)  # fmt: skip
    assert backend.products == 0
    want = sm.run(A.GTSARAH(lr, GRAPH, batch=2), problem, Full(N), 6, seed=2,
                  backend=WholeBlocks(compiled=True), progress=False)  # fmt: skip
    np.testing.assert_array_equal(got.server, want.server)


@pytest.mark.slow  # (GT-SAGA/SVRG/SARAH compiled: tests/engine/test_sampled_kernels.py)
def test_runs_of_sampled_gradients_in_the_compiled_loop_take_products():
    """With the problem's compiled sampled kernel, GT-SARAH's round is one program with
    its mixing products inside, equal to the whole-block passes to rounding."""
    pytest.importorskip("numba")
    problem = _problem("GT-SARAH")
    lr = 0.1 / problem.smoothness
    backend = Counted(compiled=True)
    got = sm.run(A.GTSARAH(lr, GRAPH, batch=2), problem, Full(N), 6, seed=2, backend=backend,
                 progress=False)  # fmt: skip
    assert backend.products == 6  # (one run of products a round)
    want = sm.run(A.GTSARAH(lr, GRAPH, batch=2), problem, Full(N), 6, seed=2,
                  backend=WholeBlocks(compiled=True), progress=False)  # fmt: skip
    np.testing.assert_allclose(got.server, want.server, rtol=1e-12, atol=1e-13)


class Templated(MixTwice):
    """MixTwice's first phase, then x <- x - 0.1 y, one template for every round: a run
    whose products' matrices are bound per round is never templated."""

    name = "templated mixing"

    def template_key(self, r, participants):
        return "every round"

    def round_phases(self, r, participants, ctx):
        first = ctx.phase("first").apply("y", "x", self.w).keep("y", participants)
        second = ctx.phase("second").keep("x", participants).combine(
            "x", participants, "y", participants, -0.1
        )
        return [first.build(), second.build()]


@pytest.mark.parametrize("path", ["compiled", "torch"])
def test_a_run_with_products_is_not_templated(path):
    w = nx.to_numpy_array(nx.cycle_graph(N)) / 3 + np.eye(N) / 3
    problem = LeastSquares.random(N, D, seed=2)
    x0 = np.random.default_rng(4).normal(size=(N, D))
    if path == "torch":
        pytest.importorskip("torch")
        from stochmix.engine import TorchBackend

        backend = TorchBackend()
    else:
        pytest.importorskip("numba")
        backend = Counted(compiled=True)
    got = sm.run(Templated(w), problem, Full(N), 6, x0=x0, backend=backend, progress=False)
    x, y = x0.copy(), np.zeros((N, D))
    for _ in range(6):
        y = w @ x + y
        x = x - 0.1 * y
    np.testing.assert_allclose(got.node_models, x, rtol=1e-13, atol=1e-13)
    if path == "compiled":
        plan = sm.explain(Templated(w), problem, Full(N), rounds=3, compiled=True)
        assert "mixing products (W @ x) inside the segment" in plan.templating

"""Element-wise kernels of several sources (stochmix.engine.model.kernels): FedAdam's,
FedYogi's and FedAdagrad's second moments and the adaptive server step.

What must hold: each kernel's NumPy, Torch and Numba forms compute the method's own row
map entry for entry (bit for bit in float64, NaN and Inf kept; the Torch form of the step
to one unit in the last place, Torch's CPU square root not being correctly rounded
everywhere); a run gives the numbers of the same run with plain row maps on every path
(NumPy programs, the compiled loop, compact storage; Torch and float32 on the compiled
loop, whose inlined kernels compute in float64 and round once, to rounding) with the same
cost columns; a round is one program; and a kernel of several sources on the clients' rows
(not in a tail) runs inside the run too, a target among its further sources included.
"""

from __future__ import annotations

from typing import no_type_check

import numpy as np
import pytest

import stochmix as sm
from stochmix.algorithms import FedAdagrad, FedAdam, FedYogi, adaptive
from stochmix.engine import Block, Equations, Method, grad
from stochmix.engine.model.kernels import KERNELS, kernel_of
from stochmix.participation import Bernoulli, UniformSample
from stochmix.problems import LeastSquares

COLUMNS = ("gradients", "messages", "floats", "sample_gradients")


def _maps():
    """``(row function, its kernel's sources)`` for every kernel of several sources."""
    return [
        (adaptive._SecondMoment("adam", 0.99, 1e-6), 2),
        (adaptive._SecondMoment("adam", 0.9, 0.0), 2),
        (adaptive._SecondMoment("yogi", 0.99, 1e-6), 2),
        (adaptive._SecondMoment("yogi", 0.5, 0.0), 2),
        (adaptive._SecondMoment("adagrad", 0.99, 1e-6), 2),
        (adaptive._ServerStep(0.1, 1e-3), 3),
    ]


def _rows(sources: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    rows = [rng.normal(size=(30, 6)) for _ in range(sources)]
    rows[-1] = np.abs(rows[-1])  # (the step's second moment: its root is taken)
    rows[0][0, 0], rows[1][1, 1], rows[-1][2, 2] = np.nan, np.inf, np.inf
    rows[0][3, 3] = rows[1][3, 3] ** 2  # a sign of zero (yogi)
    return rows


@pytest.mark.parametrize("function, sources", _maps(), ids=lambda f: getattr(f, "name", f))
def test_each_form_is_the_methods_row_map(function, sources):
    name, params = kernel_of(function)
    kernel = KERNELS[name]
    assert kernel.sources == sources and kernel.faithful is None
    rows = _rows(sources)
    with np.errstate(invalid="ignore"):
        want = function(*rows, info=None)
        np.testing.assert_array_equal(kernel.apply(rows[0], params, rows[1:]), want)
    torch = pytest.importorskip("torch")
    out, tmp = (torch.empty(want.shape, dtype=torch.float64) for _ in range(2))
    kernel.torch(torch, *map(torch.from_numpy, rows), *params, out=out, tmp=tmp)
    # Torch's CPU square root is not always correctly rounded (one unit apart at some
    # entries on some processors): the step's Torch form agrees to a unit, the others
    # bit for bit
    if name == "adaptive_step":
        np.testing.assert_allclose(out.numpy(), want, rtol=4.5e-16, atol=0)
    else:
        np.testing.assert_array_equal(out.numpy(), want)


def _helper_entries(name: str, rows: list, params) -> np.ndarray:
    """The Numba helper of kernel ``name`` applied entry by entry (inlined into a loop)."""
    numba = pytest.importorskip("numba")
    from stochmix import _compiled

    helper = getattr(_compiled, KERNELS[name].numba)

    @numba.njit
    @no_type_check  # compiled by Numba: no jaxtyping wrapper
    def entries(rows, params):
        out = np.empty_like(rows[0])
        for i in range(out.shape[0]):
            for j in range(out.shape[1]):
                if len(rows) == 2 and len(params) == 1:
                    out[i, j] = helper(rows[0][i, j], rows[1][i, j], params[0])
                elif len(rows) == 2:
                    out[i, j] = helper(rows[0][i, j], rows[1][i, j], params[0], params[1])
                else:
                    out[i, j] = helper(
                        rows[0][i, j], rows[1][i, j], rows[2][i, j], params[0], params[1]
                    )
        return out

    return entries(tuple(rows), tuple(map(float, params)))


@pytest.mark.parametrize("function, sources", _maps(), ids=lambda f: getattr(f, "name", f))
def test_numba_form_is_the_methods_row_map(function, sources):
    name, params = kernel_of(function)
    rows = _rows(sources, seed=1)
    with np.errstate(invalid="ignore"):
        want = function(*rows, info=None)
    np.testing.assert_array_equal(_helper_entries(name, rows, params), want)


class _PlainMoment(adaptive._SecondMoment):
    def __init__(self, *args):
        super().__init__(*args)
        self.row_kernel = None


class _PlainStep(adaptive._ServerStep):
    def __init__(self, *args):
        super().__init__(*args)
        self.row_kernel = None


PATHS = [
    {"compiled": False},
    {"compiled": True},
    {"backend": "torch"},
    {"storage": "compact"},
    {"dtype": "float32", "compiled": False},
    {"dtype": "float32", "compiled": True},
]


SLOW = pytest.mark.slow  # (the same mechanism as the quick case beside it)


@pytest.mark.parametrize(
    "cls", [FedAdam, pytest.param(FedYogi, marks=SLOW), pytest.param(FedAdagrad, marks=SLOW)]
)
def test_runs_equal_the_row_map_runs(cls, monkeypatch):
    problem = LeastSquares.random(40, 5, 5, seed=0)
    lr = 0.1 / problem.smoothness
    for options in PATHS:
        if options.get("backend") == "torch":
            pytest.importorskip("torch")
        got = sm.run(cls(lr, 2), problem, Bernoulli(0.3, 40), 10, seed=3, **options)
        with monkeypatch.context() as patch:
            patch.setattr(adaptive, "_SecondMoment", _PlainMoment)
            patch.setattr(adaptive, "_ServerStep", _PlainStep)
            plan = sm.explain(cls(lr, 2), problem, UniformSample(40, 10), **options)
            assert "nonlinear row map" in str(plan)  # (the maps are plain here)
            want = sm.run(cls(lr, 2), problem, Bernoulli(0.3, 40), 10, seed=3, **options)
        if options.get("dtype") == "float32" and options.get("compiled"):
            np.testing.assert_allclose(got.server, want.server, rtol=1e-5, atol=1e-6)
            assert not np.array_equal(got.server, np.zeros_like(got.server))
        elif "backend" in options:  # Torch's square root (see above): a unit apart
            np.testing.assert_allclose(got.server, want.server, rtol=1e-14, atol=1e-15)
        else:
            np.testing.assert_array_equal(got.server, want.server)
        for column in COLUMNS:
            np.testing.assert_array_equal(getattr(got, column), getattr(want, column))


@pytest.mark.parametrize("cls", [FedAdam, FedYogi, FedAdagrad])
def test_a_round_is_one_program(cls):
    problem = LeastSquares.random(40, 5, 5, seed=0)
    for compiled in (False, True):
        plan = sm.explain(cls(0.01, 2), problem, UniformSample(40, 10), rounds=3, compiled=compiled)
        assert all(len(p.segments) == 1 for p in plan.rounds)
        text = str(plan)
        assert "pseudo-gradient; then second moment, server step" in text
        assert "nonlinear row map" not in text


class LocalAdam(Method):
    """Each participant keeps Adam's moments of its own gradient and steps by them:
    ``d_i = grad_i(x_i)``, ``v_i <- b (v_i + a) + (1 - b) d_i^2``, ``x_i <- x_i - lr d_i /
    (sqrt(v_i) + tau)`` (a client-side adaptive step), K times, then the server averages.
    ``swap``: the step written with x as a further source (``x_i <- d_i + eta x_i /
    (sqrt(v_i) + tau)``, a target among the further sources)."""

    def __init__(self, lr, steps, swap=False, plain=False):
        self.lr, self.steps, self.swap, self.plain = lr, steps, swap, plain

    def blocks(self, n):
        return [Block("x", n + 1, "model"), Block("d", n + 1), Block("v", n + 1)]

    def round_phases(self, r, participants, ctx):
        S = participants
        if S.size == 0:
            return []
        eq = Equations(ctx)
        x, d = eq.blocks("x", "d")
        x[S] = x.server
        pull = eq.build("pull")
        d[S] = grad(S)
        gradient = eq.build("gradient")
        moment = adaptive._SecondMoment("adam", 0.9, 1e-6 if r == 0 else 0.0)
        step = adaptive._ServerStep(-self.lr, 1e-3)
        if self.plain:
            moment.row_kernel = step.row_kernel = None
        rows = S + 1
        phases = [pull]
        for _ in range(self.steps):
            phases.append(gradient)
            phases.append(ctx.map("v", rows, moment, "v", "d", round=r, label="moment"))
            sources = ("d", "x", "v") if self.swap else ("x", "d", "v")
            phases.append(ctx.map("x", rows, step, *sources, round=r, label="adaptive step"))
        x.server = sm.engine.mean(x[S])
        return [*phases, eq.build("average")]


@pytest.mark.parametrize("swap", [False, pytest.param(True, marks=SLOW)])
def test_kernels_of_several_sources_on_the_clients_rows(swap):
    problem = LeastSquares.random(30, 4, 5, seed=1)
    lr = 0.05 / problem.smoothness
    process = UniformSample(30, 7)
    text = str(sm.explain(LocalAdam(lr, 2, swap), problem, process, compiled=True))
    assert "nonlinear row map" not in text
    assert "gradient, moment, adaptive step, gradient, moment, adaptive step, average" in text
    for options in ({"compiled": False}, {"compiled": True}, {"storage": "compact"}):
        got = sm.run(LocalAdam(lr, 2, swap), problem, process, 6, seed=2, **options)
        want = sm.run(LocalAdam(lr, 2, swap, plain=True), problem, process, 6, seed=2, **options)
        np.testing.assert_array_equal(got.server, want.server)
        assert np.isfinite(got.server).all() and np.abs(got.server).max() > 0
        for column in COLUMNS:
            np.testing.assert_array_equal(getattr(got, column), getattr(want, column))


class _Shift:
    """``x + m / (sqrt(u) + 1)`` entry by entry: the kernel ``adaptive_step`` with eta 1 and
    tau 1 (plain: the same map without ``row_kernel``)."""

    name = "shift"

    def __init__(self, plain):
        self.row_kernel = None if plain else ("adaptive_step", (1.0, 1.0))

    def __call__(self, x, m, u, *, info):
        return x + 1.0 * m / (np.sqrt(u) + 1.0)


class ClearThenKernel(Method):
    """A phase copies into u a block known to be zero (u is then zero to the run: it holds
    no buffer), then a kernel reads u as a further source: the zeros are made in a buffer
    inside the run."""

    def __init__(self, plain=False):
        self.plain = plain

    def blocks(self, n):
        return [Block("x", n + 1, "model"), *(Block(b, n + 1) for b in "muw")]

    def round_phases(self, r, participants, ctx):
        S = participants
        if S.size == 0:
            return []
        eq = Equations(ctx)
        x, m, u, w = eq.blocks("x", "m", "u", "w")
        x[S] = x.server
        pull = eq.build("pull")
        m[S] = x[S]
        u[S] = w[S]  # (w is never written: zero, which the run knows)
        clear = eq.build("copy and clear")
        rows = S + 1
        step = ctx.map("x", rows, _Shift(self.plain), "x", "m", "u", round=r, label="shift")
        x.server = sm.engine.mean(x[S])
        return [pull, clear, step, eq.build("average")]


def test_a_kernel_reads_a_block_a_phase_of_its_run_cleared():
    problem = LeastSquares.random(20, 3, 4, seed=2)
    process = UniformSample(20, 6)
    assert "nonlinear row map" not in str(sm.explain(ClearThenKernel(), problem, process))
    for options in ({"compiled": False}, {"compiled": True}, {"storage": "compact"}):
        got = sm.run(ClearThenKernel(), problem, process, 4, seed=1, x0=np.ones(3), **options)
        want = sm.run(ClearThenKernel(True), problem, process, 4, seed=1, x0=np.ones(3), **options)
        np.testing.assert_array_equal(got.server, want.server)
        assert abs(got.server[-1, 0] - 2.0**4) < 1e-12  # x doubles a round: x + x / (0 + 1)


class KernelReadsZeros(Method):
    """A kernel reads as a further source a block the method never writes: zero, which
    liveness leaves out of a compact state (its rows are never kept), so the run makes
    its zeros in a buffer."""

    def __init__(self, plain=False):
        self.plain = plain

    def blocks(self, n):
        return [Block("x", n + 1, "model"), *(Block(b, n + 1) for b in "mw")]

    def round_phases(self, r, participants, ctx):
        S = participants
        if S.size == 0:
            return []
        eq = Equations(ctx)
        x, m = eq.blocks("x", "m")
        x[S] = x.server
        pull = eq.build("pull")
        m[S] = x[S]
        copy = eq.build("copy")
        step = ctx.map("x", S + 1, _Shift(self.plain), "x", "m", "w", round=r, label="shift")
        x.server = sm.engine.mean(x[S])
        return [pull, copy, step, eq.build("average")]


def test_a_kernel_reads_a_block_the_state_does_not_keep():
    problem = LeastSquares.random(20, 3, 4, seed=2)
    process = UniformSample(20, 6)
    for options in ({"compiled": False}, {"compiled": True}, {"storage": "compact"}):
        got = sm.run(KernelReadsZeros(), problem, process, 4, seed=1, x0=np.ones(3), **options)
        want = sm.run(KernelReadsZeros(True), problem, process, 4, seed=1, x0=np.ones(3),
                      **options)  # fmt: skip
        np.testing.assert_array_equal(got.server, want.server)
        assert abs(got.server[-1, 0] - 2.0**4) < 1e-12  # x doubles a round: x + x / (0 + 1)


@pytest.mark.parametrize("function, sources", _maps(), ids=lambda f: getattr(f, "name", f))
def test_numba_form_computes_float32_entries_in_float64(function, sources):
    """On float32 entries the inlined helper computes in float64 and rounds once, as the
    NumPy form on the entries widened (what a run's tail applies for the compiled loop):
    a kernel gives the same bits on clients' rows and in a tail."""
    from stochmix.engine.codegen.chunks import WIDE_KERNEL_ROWS

    name, params = kernel_of(function)
    rows = [r.astype(np.float32) for r in _rows(sources, seed=2)]
    with np.errstate(invalid="ignore", over="ignore"):
        want = WIDE_KERNEL_ROWS.kernel(name, rows[0], list(params), rows[1:])
        got = _helper_entries(name, rows, params)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)

"""Element-wise row kernels inside the compiled programs (stochmix.engine.model.kernels).

A prox of L1, the elastic net, the nonnegative orthant or a box with scalar bounds runs
inside the run of node-local phases around it. What must hold: each kernel's NumPy,
Torch and Numba forms compute the regularizer's own ``prox`` entry for entry (bit for bit
in float64, NaN kept); a run gives the same numbers as the same run with the prox applied
as a plain row map (a regularizer without ``prox_kernel``) on every path (NumPy programs,
compiled loop, Torch, compact state, templates); the plan has no row map left for these
regularizers and keeps one for the others; and the cost columns count what the rounds
send.
"""

from __future__ import annotations

from typing import no_type_check

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stochmix as sm
from stochmix.algorithms import PGEXTRA, FedDualAvg, FedMid, ProxNIDS
from stochmix.engine.model.kernels import KERNELS, kernel_of
from stochmix.mixing import StaticSequence
from stochmix.participation import Bernoulli, Full, UniformSample
from stochmix.problems import (
    L1,
    Box,
    Composite,
    ElasticNet,
    GroupLasso,
    LeastSquares,
    NonNegative,
)
from stochmix.problems.regularizers import prox_kernel
from tests._backends import WholeBlocks

KERNEL_REGULARIZERS = [L1(0.3), ElasticNet(0.2, 0.5), NonNegative(), Box(-0.2, 0.3)]


class AsMap:
    """The same regularizer without ``prox_kernel``: its prox is a plain row map."""

    def __init__(self, inner):
        self.inner, self.name, self.indicator = inner, inner.name, inner.indicator

    def prox(self, v, t):
        return self.inner.prox(v, t)

    def value(self, x):
        return self.inner.value(x)

    def check_dim(self, dim):
        if hasattr(self.inner, "check_dim"):
            self.inner.check_dim(dim)


def _values(seed=0, shape=(40, 7)):
    v = np.random.default_rng(seed).normal(size=shape)
    v[0, 0], v[1, 1], v[2, 2] = np.nan, np.inf, -np.inf
    return v


@pytest.mark.parametrize("reg", KERNEL_REGULARIZERS, ids=repr)
def test_each_form_is_the_regularizers_prox(reg):
    t = 0.7
    name, params = prox_kernel(reg, t)
    kernel = KERNELS[name]
    v = _values()
    want = reg.prox(v, t)
    np.testing.assert_array_equal(kernel.apply(v, params), want)  # NaN where NaN
    torch = pytest.importorskip("torch")
    out, tmp = torch.empty(v.shape, dtype=torch.float64), torch.empty(v.shape, dtype=torch.float64)
    kernel.torch(torch, torch.from_numpy(v), *params, out=out, tmp=tmp)
    np.testing.assert_array_equal(out.numpy(), want)


@pytest.mark.parametrize("reg", KERNEL_REGULARIZERS, ids=repr)
def test_numba_form_is_the_regularizers_prox(reg):
    numba = pytest.importorskip("numba")
    from stochmix import _compiled

    name, params = prox_kernel(reg, 0.7)
    helper = getattr(_compiled, KERNELS[name].numba)

    @numba.njit
    @no_type_check  # compiled by Numba: no jaxtyping wrapper
    def one(v, a):
        out = np.empty_like(v)
        for i in range(v.shape[0]):
            for j in range(v.shape[1]):
                out[i, j] = helper(v[i, j], a)
        return out

    @numba.njit
    @no_type_check
    def two(v, a, b):
        out = np.empty_like(v)
        for i in range(v.shape[0]):
            for j in range(v.shape[1]):
                out[i, j] = helper(v[i, j], a, b)
        return out

    v = _values(1)
    got = (one if len(params) == 1 else two)(v, *params)
    np.testing.assert_array_equal(got, reg.prox(v, 0.7))


def test_only_catalogue_kernels_are_trusted():
    class F:
        row_kernel = ("shrink", (0.1,))

    assert kernel_of(F()) == ("shrink", (0.1,))
    for bad in (("shrink", (0.1, 0.2)), ("unknown", (0.1,)), ("clip", (np.nan, 1.0)), "x"):
        F.row_kernel = bad
        assert kernel_of(F()) is None
    assert kernel_of(lambda v, info: v) is None
    assert prox_kernel(GroupLasso(0.3, 2), 0.1) is None
    assert prox_kernel(Box(-1.0, [0.1, 0.2]), 0.1) is None  # bounds per coordinate
    assert prox_kernel(L1(0.3), np.ones(3)) is None  # a step per row


def _lasso(n=40, seed=0):
    return LeastSquares.random(n, 5, rows_per_client=3, support=3, seed=seed)


PATHS = [
    {"compiled": False},
    {"compiled": True},
    {"backend": "torch"},
    {"storage": "compact"},
    {"storage": "full", "compiled": True},
]


# the runs with L1 in the quick suite, the other kernels after it (marked slow): the same
# mechanism, each kernel's forms checked entry by entry above
RUN_REGULARIZERS = [
    KERNEL_REGULARIZERS[0],
    *(pytest.param(reg, marks=pytest.mark.slow, id=repr(reg)) for reg in KERNEL_REGULARIZERS[1:]),
]


@pytest.mark.parametrize("reg", RUN_REGULARIZERS, ids=repr)
@pytest.mark.parametrize("cls", [FedMid, FedDualAvg])
def test_federated_runs_equal_the_row_map_runs(cls, reg):
    smooth = _lasso()
    lr = 0.2 / smooth.smoothness
    kernel, plain = Composite(smooth, reg), Composite(smooth, AsMap(reg))
    # every path for L1; the NumPy programs and the compiled loop for the others (the
    # kernels' Torch forms are checked above, entry by entry)
    paths = PATHS if isinstance(reg, L1) else PATHS[:2]
    for participation in (Bernoulli(0.3, 40), UniformSample(40, 8)):
        for options in paths:
            if options.get("backend") == "torch":
                pytest.importorskip("torch")
            got = sm.run(cls(lr, 3), kernel, participation, 8, seed=5, **options)
            want = sm.run(cls(lr, 3), plain, participation, 8, seed=5, **options)
            np.testing.assert_array_equal(got.server, want.server)
            for column in ("gradients", "messages", "floats", "sample_gradients"):
                np.testing.assert_array_equal(getattr(got, column), getattr(want, column))


@pytest.mark.parametrize("cls", [PGEXTRA, ProxNIDS])
def test_decentralized_runs_equal_the_row_map_runs(cls):
    import networkx as nx

    smooth = _lasso(12, seed=2)
    graphs = StaticSequence(nx.cycle_graph(12))
    lr = 0.3 / smooth.smoothness
    reg = L1(0.2)
    # bit for bit where the mixing phases are whole-block passes in both runs; with the
    # products inside the runs (compiled), the map cuts the run where the kernel does not,
    # so the additions differ in order: to rounding
    for compiled in (False, True):
        for backend, tol in ((WholeBlocks(compiled=compiled), 0.0), (None, 1e-13)):
            options = {"compiled": compiled} if backend is None else {"backend": backend}
            got = sm.run(cls(lr, graphs), Composite(smooth, reg), Full(12), 15, **options)
            want = sm.run(
                cls(lr, graphs), Composite(smooth, AsMap(reg)), Full(12), 15, **options
            )
            scale = 1.0 + np.abs(want.server).max()
            np.testing.assert_allclose(got.server, want.server, rtol=0, atol=tol * scale)
            np.testing.assert_array_equal(got.messages, want.messages)


def test_the_plan_has_one_run_per_round_and_keeps_other_maps():
    smooth = _lasso()
    process = UniformSample(40, 8)
    text = str(sm.explain(FedMid(0.01, 3), Composite(smooth, L1(0.1)), process))
    assert "local step, prox x, local step, prox x, local step, prox x, average" in text
    assert "nonlinear row map" not in text
    assert "templating: on" in text
    text = str(sm.explain(FedDualAvg(0.01, 3), Composite(smooth, L1(0.1)), process, rounds=3))
    assert "nonlinear row map" not in text
    text = str(sm.explain(FedMid(0.01, 3), Composite(smooth, GroupLasso(0.1, 5)), process))
    assert "nonlinear row map: prox x" in text  # not element-wise: a row map


def test_fedmid_rounds_come_from_its_template():
    smooth = _lasso()
    problem = Composite(smooth, L1(0.1))
    text = str(sm.explain(FedMid(0.01, 2), problem, UniformSample(40, 8), rounds=4))
    assert "instantiated from its template" in text
    got = sm.run(FedMid(0.01, 2), problem, UniformSample(40, 8), 6, seed=1)

    class Untemplated(FedMid):
        def template_key(self, r, participants):
            return None

        def phase_key(self, r, participants):
            return None

    want = sm.run(Untemplated(0.01, 2), problem, UniformSample(40, 8), 6, seed=1)
    np.testing.assert_array_equal(got.server, want.server)
    for column in ("gradients", "messages", "floats", "sample_gradients"):
        np.testing.assert_array_equal(getattr(got, column), getattr(want, column))


def test_feddualavg_sends_z0_once_per_participant():
    smooth = LeastSquares.random(50, 4, rows_per_client=3, seed=0)
    for problem in (Composite(smooth, L1(0.1)), smooth):
        got = sm.run(FedDualAvg(0.01, 2), problem, UniformSample(50, 10), 4, seed=0)
        # per round: z_0 down and z_i up, one row each, to and from each of 10 clients
        np.testing.assert_array_equal(got.messages, [0, 20, 20, 20, 20])
        np.testing.assert_array_equal(got.floats, [0, 80, 80, 80, 80])


# --------------------------------------------------------------------------------------
# Checks a kernel's output may skip: a kernel that keeps finiteness (shrink, for t >= 0;
# the elastic net's, for s >= 1 too) shows a NaN or Inf of its output in its source; when
# a later value has read that source too, the NumPy programs check the output only if a
# round scalar leaves its bound.


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=1, max_size=30),
    st.floats(0.0, None, allow_infinity=True),
    st.floats(1.0, None, allow_infinity=True),
)
def test_faithful_kernels_keep_finiteness_within_their_bounds(values, t, s):
    v = np.array(values)
    for name, params in (("shrink", (t,)), ("shrink_scaled", (t, s))):
        kernel = KERNELS[name]
        assert kernel.faithful is not None
        assert all(p >= b for p, b in zip(params, kernel.faithful, strict=True))
        with np.errstate(all="ignore"):
            out = kernel.apply(v, params)
        np.testing.assert_array_equal(np.isfinite(out), np.isfinite(v))
    assert KERNELS["clip"].faithful is None  # clip(Inf, lo, hi) = hi


def test_shrink_out_of_its_bounds_can_make_a_finite_entry_infinite():
    with np.errstate(all="ignore"):
        out = KERNELS["shrink"].apply(np.array([1.5e308]), (-1e308,))
    assert not np.isfinite(out).all()  # why the skip is guarded by t >= 0


def _dual_averaging_schedule():
    from stochmix.engine.plan.round_plan import LocalStep
    from stochmix.engine.plan.schedule import plan_schedule

    problem = Composite(LeastSquares.random(40, 3, rows_per_client=2, seed=0), L1(0.1))
    seen = []
    from stochmix.engine.plan import planner as planner_module

    original = planner_module.RoundPlanner.plan

    def plan(self, r, participants):
        out = original(self, r, participants)
        seen.append(out)
        return out

    planner_module.RoundPlanner.plan = plan
    try:
        sm.run(FedDualAvg(0.05, 3), problem, UniformSample(40, 8), 2, seed=0,
               progress=False, compiled=False)  # fmt: skip
    finally:
        planner_module.RoundPlanner.plan = original
    step = max(
        (item for item in seen[-1] if isinstance(item, LocalStep)),
        key=lambda item: len(item.structure.forms),
    )
    return plan_schedule(list(step.structure.forms), step.structure.model, step.structure.tail)


def test_a_kernel_output_whose_source_is_read_again_is_checked_only_out_of_bounds():
    from stochmix.engine.plan.steps import Check, Kernel

    schedule = _dual_averaging_schedule()
    kernels = [s for s in schedule.steps if isinstance(s, Kernel)]
    checks = [s for s in schedule.steps if isinstance(s, Check)]
    assert checks and all(c.unless for c in checks)  # x = prox(z): z carries on
    for c in checks:
        ((coef, bound),) = c.unless
        assert bound == 0.0 and coef.kind == "scalar"
        assert any(k.coefs == (coef,) for k in kernels)  # that kernel's threshold
    assert schedule.checks  # the last x is still checked at the end


def test_dual_averaging_stops_at_the_same_round_as_the_general_path_when_it_diverges():
    from tests._backends import SparseOnly

    smooth = LeastSquares.random(40, 3, rows_per_client=2, seed=0)
    problem = Composite(smooth, L1(0.1))
    lr = 30.0 / smooth.smoothness
    stops = []
    for options in ({"compiled": False}, {"backend": SparseOnly()}):
        with pytest.warns(sm.engine.DivergenceWarning):
            result = sm.run(FedDualAvg(lr, 3), problem, UniformSample(40, 8), 400, seed=0,
                            metrics=(), progress=False, **options)  # fmt: skip
        stops.append(result.diverged_at)
    assert stops[0] is not None and stops[0] == stops[1]


class _Kernel:
    """A row map that says it is a catalogue kernel (``row_kernel``)."""

    def __init__(self, name, params, f):
        self.row_kernel, self.f, self.name = (name, params), f, name

    def __call__(self, v, *, info):
        return self.f(v)


class ClipAndShrink(sm.Method):
    """x read by a projection (clip, which maps Inf to a bound) and by soft thresholding
    into u, whose value is then replaced unread: a NaN or Inf of x shows in no value the
    projection makes, so u's check must stay (a review's counterexample)."""

    name = "ClipAndShrink"

    def __init__(self, lr, in_place=False):
        self.lr, self.in_place = lr, in_place

    def blocks(self, n):
        return [sm.Block("x", n + 1, "model"), sm.Block("y", n + 1), sm.Block("u", n + 1)]

    def round_phases(self, r, S, ctx):
        from stochmix.algorithms.aggregation import averaged
        from stochmix.algorithms.proximal import map_rows
        from stochmix.participation import uniform_weights

        clip = _Kernel("clip", (-1.0, 1.0), lambda v: np.clip(v, -1.0, 1.0))
        shrink = _Kernel("shrink", (0.1,), lambda v: v - np.clip(v, -0.1, 0.1))
        eq = sm.Equations(ctx)
        x, y, u = eq.blocks("x", "y", "u")
        x[S] = x.server
        phases = [eq.build("assign")]
        x[S] -= self.lr * sm.engine.grad(S)
        phases.append(eq.build("step"))
        if self.in_place:  # the projection of x in place: x's value before it is lost
            phases.append(map_rows(ctx, x[S], clip, x[S], round=r, label="clip"))
            y[S] = x[S]
            phases.append(eq.build("y from x"))
        else:
            phases.append(map_rows(ctx, y[S], clip, x[S], round=r, label="clip"))
            phases.append(map_rows(ctx, u[S], shrink, x[S], round=r, label="shrink"))
            u[S] = y[S]
            phases.append(eq.build("u from y"))
        x[S] = y[S]
        phases.append(eq.build("x from y"))
        x.server = averaged(u if not self.in_place else y, S, uniform_weights(S), 1.0,
                            uniform_weights)  # fmt: skip
        phases.append(eq.build("average"))
        return phases


@pytest.mark.parametrize("in_place", [False, True], ids=["clip and shrink", "clip in place"])
def test_a_projection_hides_no_infinite_value_from_the_checks(in_place):
    from tests._backends import SparseOnly

    problem = LeastSquares.random(40, 3, rows_per_client=2, seed=0)
    stops = []
    for options in ({"compiled": False}, {"backend": SparseOnly()}):
        with pytest.warns(sm.engine.DivergenceWarning):
            result = sm.run(ClipAndShrink(1e308, in_place), problem, UniformSample(40, 8), 5,
                            seed=0, metrics=(), progress=False, **options)  # fmt: skip
        stops.append(result.diverged_at)
    assert stops == [1, 1]


def test_a_chunk_of_large_finite_float32_entries_is_not_reported_as_diverged():
    """The NumPy programs' check sums a chunk's entries: in float64, so that float32
    entries far from overflowing (1e35, below float32's 3.4e38) cannot overflow the sum
    of a chunk of 5,000 of them and stop a run that has not diverged."""
    problem = Composite(sm.problems.Quadratic.random(1000, 10, seed=0), L1(1e-30))
    x0 = np.full(10, 1e35)  # FedDualAvg checks its x = prox(z): a chunk's sum of them
    result = sm.run(FedDualAvg(1e-30, 2), problem, UniformSample(1000, 500), 2, x0=x0,
                    seed=0, dtype="float32", compiled=False, metrics=(),
                    progress=False)  # fmt: skip
    assert result.diverged_at is None
    assert np.isfinite(result.final).all() and np.abs(result.final).min() > 1e34

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


@pytest.mark.parametrize("reg", KERNEL_REGULARIZERS, ids=repr)
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
    for options in ({"compiled": False}, {"compiled": True}):
        got = sm.run(cls(lr, graphs), Composite(smooth, reg), Full(12), 15, **options)
        want = sm.run(cls(lr, graphs), Composite(smooth, AsMap(reg)), Full(12), 15, **options)
        np.testing.assert_array_equal(got.server, want.server)
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

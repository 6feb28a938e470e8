"""Hooks set on a method's instance count as much as hooks on its class, on every path
that would otherwise read the state in their place: the distributed backend's reports, the
rows a compact state drops, a wrapper's points and output; and the large row sums, which a
pool thread may ask for without waiting behind itself."""

from __future__ import annotations

import socket

import networkx as nx
import numpy as np
import pytest

import stochmix as sm
from stochmix import _arrays
from stochmix import algorithms as A
from stochmix._pool import thread_pool
from stochmix.engine.model.method import Method

GRAPH = sm.mixing.StaticSequence(nx.random_regular_graph(3, 12, seed=2))


def _least_squares(n=20):
    return sm.problems.LeastSquares.random(n, 4, rows_per_client=5, seed=1)


class _OwnOutput(A.GradientTracking):
    def output(self, z, ctx):
        return np.full(z.shape[1], 7.0)


@pytest.mark.parametrize("hook", ["output", "consensus_error"])
def test_the_distributed_backend_refuses_report_hooks_set_on_the_instance(hook):
    """A shard averages the node models and computes their spread itself: a hook set on
    the instance would be ignored (the run reported the nodes' mean), so it is refused,
    as a class that rewrites it is. One process (gloo)."""
    torch = pytest.importorskip("torch")
    dist = torch.distributed
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", rank=0, world_size=1,
                            init_method=f"tcp://127.0.0.1:{port}")  # fmt: skip
    try:
        for method in (A.GradientTracking(0.05, GRAPH), _OwnOutput(0.05, GRAPH)):
            if not isinstance(method, _OwnOutput):
                setattr(method, hook, lambda z, ctx: np.full(z.shape[1], 7.0))
            with pytest.raises(NotImplementedError, match="reports its own output"):
                sm.run(method, _least_squares(12), sm.participation.Full(12), 3,
                       backend="distributed", progress=False)  # fmt: skip
    finally:
        dist.destroy_process_group()


def test_a_compact_state_keeps_the_rows_an_output_set_on_the_instance_reads():
    problem = _least_squares()

    def make():
        method = A.FedAvg(0.05, local_steps=2)
        # the mean of the clients' rows (which a compact state would not keep)
        method.output = lambda z, ctx: z[ctx.layout.rows("x", np.arange(1, 21))].mean(axis=0)
        return method

    process = sm.participation.UniformSample(20, 5)
    full = sm.run(make(), problem, process, 8, seed=2, progress=False, storage="full")
    compact = sm.run(make(), problem, process, 8, seed=2, progress=False, storage="compact")
    np.testing.assert_array_equal(compact.server, full.server)


class _Shifted(A.FedAvg):
    def points(self, z, ctx, clients):
        return Method.points(self, z, ctx, clients) + 0.5


@pytest.mark.parametrize("compiled", [False, True])
def test_a_wrapper_takes_the_gradients_where_the_wrapped_method_does(compiled):
    """CompressedUplink took Method's points (the model rows) whatever the wrapped method
    said, on its class or its instance."""
    on_instance = A.FedAvg(0.05)
    on_instance.points = lambda z, ctx, c: Method.points(on_instance, z, ctx, c) + 0.5
    problem, process = _least_squares(), sm.participation.UniformSample(20, 5)
    got = {
        name: sm.run(A.CompressedUplink(method, "none"), problem, process, 10, seed=1,
                     compiled=compiled, progress=False).server  # fmt: skip
        for name, method in (("plain", A.FedAvg(0.05)), ("class", _Shifted(0.05)),
                             ("instance", on_instance))  # fmt: skip
    }
    np.testing.assert_array_equal(got["class"], got["instance"])
    assert np.abs(got["class"] - got["plain"]).max() > 1e-3


def test_a_wrapper_reports_the_wrapped_methods_output():
    method = A.FedAvg(0.05)
    method.output = lambda z, ctx: np.full(z.shape[1], 3.0)
    result = sm.run(A.CompressedUplink(method, "top_k:2"), _least_squares(),
                    sm.participation.UniformSample(20, 5), 4, seed=1, progress=False)  # fmt: skip
    np.testing.assert_array_equal(result.server[1:], 3.0)


def test_large_row_sums_asked_on_the_pools_threads_do_not_wait_for_themselves():
    x = np.random.default_rng(0).standard_normal((200_000, 10))
    want = _arrays.row_sums(x)
    pool = thread_pool(2)
    found = [pool.submit(_arrays.row_sums, x) for _ in range(2)]  # both workers busy
    for future in found:
        np.testing.assert_array_equal(future.result(timeout=60), want)


@pytest.mark.parametrize("kind", [A.DecentralizedADMM, A.RelaxedADMM])
def test_the_exact_solvers_error_names_the_users_problem(kind):
    problem = sm.problems.Logistic.random(12, 3, seed=1)
    with pytest.raises(ValueError, match="got Logistic; use"):
        sm.run(kind(1.0, GRAPH), problem, sm.participation.Full(12), 3, progress=False)

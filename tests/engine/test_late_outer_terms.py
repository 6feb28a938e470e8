"""A phase over a run's nodes that only sets outer rows and reads, in single-row terms, an
outer row an earlier phase of the run sets (FedDyn's server model, x_0 = mean(x_S) -
h_0 / alpha, after its memory h_0 -= alpha / N sum(x_S - x_0)) joins the run: its sums are
made chunk by chunk with the others, its single-row terms once the run's outer rows are
set (the schedule's first tail entries). The round is one segment, and its numbers are
those of the two-segment plan bit for bit on the NumPy programs and the compiled loop, and
to a few units of the last place on Torch (whose sums of a chunk add in an order that its
CPU kernels choose by the processor: equal on one machine, one unit apart on another).
Phases whose nodes read such a row, or whose terms read a row that itself gets late terms,
still cut the run."""

import numpy as np
import pytest

import stochmix as sm
from stochmix import algorithms as A
from stochmix.engine import Block, Equations, Method, mean, total
from stochmix.engine.plan import round_plan
from stochmix.participation import Bernoulli, UniformSample
from tests._backends import SparseOnly

N = 30


def _problem():
    return sm.problems.LeastSquares.random(N, 3, rows_per_client=3, seed=4)


def _run(method, process, rounds=12, **options):
    return sm.run(method, _problem(), process, rounds, seed=3, progress=False, **options)


def _without_late(monkeypatch):
    monkeypatch.setattr(round_plan._Run, "_late", lambda self, lf: False)


@pytest.mark.parametrize("options", [{}, {"compiled": True}, {"backend": "torch"}])
def test_feddyn_is_one_segment_and_the_same_numbers(options, monkeypatch):
    if options.get("backend") == "torch":
        pytest.importorskip("torch")
        from stochmix.engine import TorchBackend

        options = {"backend": TorchBackend()}
    lr = 0.2 / _problem().smoothness
    text = str(sm.explain(A.FedDyn(lr, 3, alpha=0.1), _problem(), UniformSample(N, 8), rounds=2))
    assert "memory, server model" in text and "2. node-local" not in text, text
    fused = _run(A.FedDyn(lr, 3, alpha=0.1), Bernoulli(0.3, N), **options)
    _without_late(monkeypatch)
    apart = _run(A.FedDyn(lr, 3, alpha=0.1), Bernoulli(0.3, N), **options)
    if "backend" in options:  # Torch sums a chunk in an order of its own CPU kernels
        np.testing.assert_allclose(fused.server, apart.server, rtol=4e-15, atol=1e-15)
        np.testing.assert_allclose(fused.distance, apart.distance, rtol=4e-15, atol=1e-15)
        return
    np.testing.assert_array_equal(fused.server, apart.server)
    np.testing.assert_array_equal(fused.distance, apart.distance)


class _Chained(Method):
    """h_0 += sum_S x_i; x_0 = mean_S x_i + h_0 / 2 (reads h_0 as just set); then g_0 =
    sum_S x_i + x_0 (reads x_0, which itself got a late term: must wait for it)."""

    name = "chained"

    def blocks(self, n):
        return [Block("x", n + 1, "model"), Block("h", 1), Block("g", 1)]

    def round_phases(self, r, participants, ctx):
        S = participants
        if S.size == 0:
            return []
        eq = Equations(ctx)
        x, h, g = eq.blocks("x", "h", "g")
        x[S] = x.server
        pull = eq.build("pull")
        x[S] = 0.9 * x[S] + 0.1 * x.server
        step = eq.build("step")
        h.server += total(x[S])
        memory = eq.build("memory")
        x.server = mean(x[S]) + 0.5 * h.server
        model = eq.build("model")
        g.server = total(x[S]) + x.server
        last = eq.build("last")
        return [pull, step, memory, model, last]


def test_terms_that_read_a_row_with_late_terms_wait_for_it():
    process = UniformSample(N, 6)
    text = str(sm.explain(_Chained(), _problem(), process, rounds=1))
    assert "memory, model" in text and "2. node-local segment" in text, text
    fast = _run(_Chained(), process, rounds=6, metrics=())
    general = _run(_Chained(), process, rounds=6, metrics=(), backend=SparseOnly())
    np.testing.assert_allclose(fast.server, general.server, rtol=1e-13, atol=0)


def test_lost_uploads_keep_the_rows_their_second_run_reads():
    """Under UplinkDrops the received participants' phases run apart, gathering x of the
    received: the probes that find rows no round reads never lose an upload, so such a
    run keeps every block (it raised LivenessError at round 0)."""
    from stochmix.participation import UplinkDrops

    lr = 0.2 / _problem().smoothness
    process = UplinkDrops(UniformSample(N, 8), 0.3)
    for method in (A.FedDyn(lr, 3, alpha=0.1), A.FedAvg(lr, 2)):
        fast = _run(method, process, compiled=True)
        general = _run(type(method)(*method_args(method)), process, backend=SparseOnly())
        np.testing.assert_allclose(fast.server, general.server, rtol=1e-12, atol=0)


def method_args(method):
    return (method.lr, 3, 0.1) if isinstance(method, A.FedDyn) else (method.lr, 2)

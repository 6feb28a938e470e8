"""Subclasses written against the previous release (0.1.0) still run, with a warning.

Each documented extension point whose form changed since 0.1.0 is overridden here the
way 0.1.0 documented it; the run must give the numbers the method gives without the
override (the overrides below change nothing), with one ``DeprecationWarning`` that
names the new form. The signatures of every extension point are recorded in
``tests/public_api.txt`` (tests/package/test_api_surface.py), so a new change cannot go unseen.
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

import stochmix as sm
from stochmix.algorithms import DGD, FedAvg, PushPull
from stochmix.mixing import RandomSequence, StaticSequence
from stochmix.participation import Bernoulli, Full
from stochmix.problems import LeastSquares

N, D = 8, 3


def _problem():
    return LeastSquares.random(N, D, rows_per_client=4, reg=0.1, seed=0)


class OldAggregate(FedAvg):
    """0.1.0: ``aggregate(self, r, participants, ctx)``."""

    def aggregate(self, r, participants, ctx):
        return super().aggregate(r, participants, ctx)


class OldMixing(PushPull):
    """0.1.0: ``mixing(self, k, rule)``."""

    def mixing(self, k, rule):
        return super().mixing(k, rule)


class OldDGD(DGD):
    """0.1.0: ``check_everyone(participants, ctx)`` returned the node array (refusing a
    partial round) before the method built its phases."""

    def round_phases(self, r, participants, ctx):
        nodes = self.check_everyone(participants, ctx)
        assert isinstance(nodes, np.ndarray) and nodes.size == N
        return super().round_phases(r, nodes, ctx)


def _same(a, b):
    np.testing.assert_array_equal(a.server, b.server)


def test_an_aggregate_without_steps_is_called_the_old_way():
    participation = Bernoulli(0.5, N)
    new = sm.run(FedAvg(0.05, 2), _problem(), participation, 15, progress=False)
    with pytest.warns(DeprecationWarning, match=r"aggregate\(self, r, participants, ctx, steps"):
        old = sm.run(OldAggregate(0.05, 2), _problem(), participation, 15, progress=False)
    _same(old, new)


def test_a_mixing_without_direction_is_called_the_old_way():
    graphs = RandomSequence(N, seed=3, kind="random_directed")
    new = sm.run(PushPull(0.02, graphs), _problem(), Full(N), 15, progress=False)
    graphs = RandomSequence(N, seed=3, kind="random_directed")
    with pytest.warns(DeprecationWarning, match=r"mixing\(self, k, rule, direction"):
        old = sm.run(OldMixing(0.02, graphs), _problem(), Full(N), 15, progress=False)
    _same(old, new)


def test_check_everyone_returns_the_nodes_and_refuses_partial_rounds_as_in_0_1():
    graphs = StaticSequence(nx.cycle_graph(N))
    new = sm.run(DGD(0.05, graphs), _problem(), Full(N), 15, progress=False)
    with pytest.warns(DeprecationWarning, match="round_equations"):
        old = sm.run(OldDGD(0.05, graphs), _problem(), Full(N), 15, progress=False)
    _same(old, new)
    with (
        pytest.warns(DeprecationWarning),
        pytest.raises(ValueError, match="runs every node in every iteration"),
    ):
        sm.run(OldDGD(0.05, graphs), _problem(), Bernoulli(0.5, N), 3, progress=False)


def test_overrides_in_the_new_form_warn_nothing(recwarn):
    class NewAggregate(FedAvg):
        def aggregate(self, r, participants, ctx, steps=None):
            return super().aggregate(r, participants, ctx, steps)

    sm.run(NewAggregate(0.05, 2), _problem(), Bernoulli(0.5, N), 5, progress=False)
    assert not [w for w in recwarn if issubclass(w.category, DeprecationWarning)]


def test_distributed_execute_is_the_one_dispatcher(tmp_path):
    """``DistributedBackend.execute(plan, z, problem, method, ctx)`` (0.1.0) applies a
    round through the one dispatcher, with a warning (a group of one rank here)."""
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available():  # pragma: no cover
        pytest.skip("torch.distributed is not available")
    from stochmix.engine.backends.distributed import DistributedBackend
    from stochmix.engine.model.layout import Layout
    from stochmix.engine.plan.round_plan import plan_round
    from stochmix.engine.runner.context import make_context

    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        problem, method = _problem(), FedAvg(0.05, 2)
        back = DistributedBackend()
        layout = Layout(method.blocks(N))
        back.make_shard(layout, N, method, D, problem)
        ctx = make_context(method, problem, Full(N), layout, 0, None)
        z = back.initial(np.zeros(D))
        plan = plan_round(method.round_phases(0, np.arange(N), ctx), back, method, ctx)
        with pytest.warns(DeprecationWarning, match="one dispatcher"):
            assert back.execute(plan, z, problem, method, ctx)
        reference = sm.run(FedAvg(0.05, 2), problem, Full(N), 1, progress=False, compiled=False)
        np.testing.assert_allclose(z[0], reference.server[1], rtol=1e-14, atol=1e-14)
    finally:
        dist.destroy_process_group()

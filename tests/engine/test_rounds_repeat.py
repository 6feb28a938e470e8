"""A decentralized method that does not say its iterations repeat runs every gossip tick
built in full: correct, but about 100x slower than compiled segments. Such a run warns, and
``explain`` lists it and says how the ticks run (the report: a method written from "Writing
your own method" ran 480x slower under gossip with "slow paths: none")."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

import stochmix as sm
from stochmix.algorithms import DecentralizedMethod
from stochmix.engine import Block, grad
from stochmix.engine.plan.slowpath import SlowPathWarning
from stochmix.participation import RandomEdge
from stochmix.problems import LeastSquares

RING = nx.cycle_graph(12)


class MyDGD(DecentralizedMethod):
    name = "my dgd"

    def blocks(self, n):
        return [Block("x", n, "model")]

    def round_phases(self, r, participants, ctx):
        eq = self.round_equations(participants, ctx)
        x = eq.block("x")
        x[:] = self.mixing(r, "metropolis") @ x - self.lr * grad()
        return [eq.build("step")]


class MyRepeatingDGD(MyDGD):
    rounds_repeat = True


def _problem():
    return LeastSquares.random(12, 4, seed=0)


def test_a_method_without_rounds_repeat_warns_under_gossip_and_explain_says_so():
    method = MyDGD(0.01, sm.mixing.StaticSequence(RING))
    with pytest.warns(SlowPathWarning, match="rounds_repeat = True"):
        slow = sm.run(method, _problem(), RandomEdge(RING), 200, progress=False)
    told = sm.explain(MyDGD(0.01, sm.mixing.StaticSequence(RING)), _problem(), RandomEdge(RING))
    assert not told.fast and "rounds_repeat = True" in str(told)
    assert "gossip ticks: each built in full" in str(told)
    # the same numbers once the class says so, with no warning and compiled segments
    fast_method = MyRepeatingDGD(0.01, sm.mixing.StaticSequence(RING))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", SlowPathWarning)
        fast = sm.run(fast_method, _problem(), RandomEdge(RING), 200, progress=False)
    np.testing.assert_allclose(fast.server, slow.server, rtol=0, atol=1e-13)
    told = sm.explain(
        MyRepeatingDGD(0.01, sm.mixing.StaticSequence(RING)), _problem(), RandomEdge(RING)
    )
    assert told.fast and "run in compiled segments" in str(told)


def test_short_runs_and_synchronous_runs_stay_quiet():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", SlowPathWarning)
        sm.run(MyDGD(0.01, sm.mixing.StaticSequence(RING)), _problem(), RandomEdge(RING), 20)
        sm.run(
            MyDGD(0.01, sm.mixing.StaticSequence(RING)), _problem(), sm.participation.Full(12),
            200, progress=False,
        )  # fmt: skip

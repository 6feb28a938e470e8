"""A key a user's subclass inherits past its own round hooks is not used (module
``stochmix.engine.model.inherited_keys``): a subclass whose local steps or step size change
later than the engine's check of a key (its second round) gave silent wrong numbers under
FedAvg's and gradient tracking's inherited keys. Each run is compared with the same class
built in full every round (no key at all)."""

import networkx as nx
import numpy as np
import pytest

import stochmix as sm
from stochmix.algorithms import DGD, FedAvg, GradientTracking
from stochmix.engine.model.inherited_keys import method_key, untrusted_key
from stochmix.mixing import StaticSequence
from stochmix.participation import Full, RandomEdge, UniformSample
from stochmix.problems import Quadratic

N = 12


class LaterSteps(FedAvg):
    """One local step for five rounds, three afterwards (a change after the key's check)."""

    def round_steps(self, r, participants, ctx):
        return 1 if r < 5 else 3


class LaterStepsKeyed(LaterSteps):
    """The same, with a key that tells the two phases apart."""

    def template_key(self, r, participants):
        return (r < 5, participants.size)


class DecayAt(GradientTracking):
    """Gradient tracking whose step halves at round 5 (a plain number, no rule)."""

    def round_phases(self, r, participants, ctx):
        self.lr = self._lr0 * (1.0 if r < 5 else 0.5)
        return super().round_phases(r, participants, ctx)

    def start(self, ctx):
        self._lr0 = self.lr
        super().start(ctx)


class DGDDecay(DGD):
    def round_phases(self, r, participants, ctx):
        self.lr = self._lr0 * (1.0 if r < 5 else 0.5)
        return super().round_phases(r, participants, ctx)

    def start(self, ctx):
        self._lr0 = self.lr
        super().start(ctx)


def _unkeyed(cls):
    """``cls`` with no key at all: every round built in full (the reference)."""
    return type(
        cls.__name__ + "Unkeyed",
        (cls,),
        {k: (lambda self, *a: None) for k in ("template_key", "phase_key", "segment_key")},
    )


@pytest.fixture(scope="module")
def problem():
    return Quadratic.random(N, 3, seed=0)


@pytest.mark.parametrize("participation", [UniformSample(N, 5), Full(N)], ids=["sample", "full"])
@pytest.mark.parametrize("cls", [LaterSteps, LaterStepsKeyed])
def test_a_subclass_with_later_local_steps_matches_its_full_build(problem, participation, cls):
    got = sm.run(cls(0.05, 1), problem, participation, 12)
    want = sm.run(_unkeyed(cls)(0.05, 1), problem, participation, 12)
    np.testing.assert_array_equal(got.server, want.server)
    np.testing.assert_array_equal(got.gradients, want.gradients)


def test_a_subclass_that_gives_its_own_key_is_templated(problem):
    found = sm.explain(LaterStepsKeyed(0.05, 1), problem, UniformSample(N, 5), rounds=10)
    assert "template" in {plan.source for plan in found.rounds}
    found = sm.explain(LaterSteps(0.05, 1), problem, UniformSample(N, 5), rounds=10)
    assert {plan.source for plan in found.rounds} <= {"built", "cache"}
    assert "LaterSteps overrides round_steps and inherits its template_key" in found.templating


def test_a_decentralized_subclass_with_a_later_step_matches_its_full_build(problem):
    graphs = StaticSequence(nx.cycle_graph(N))
    got = sm.run(DecayAt(0.05, graphs), problem, Full(N), 12).server
    want = sm.run(_unkeyed(DecayAt)(0.05, graphs), problem, Full(N), 12).server
    np.testing.assert_array_equal(got, want)


def test_gossip_ticks_of_an_overriding_subclass_are_built_in_full(problem):
    """Compiled segments take the inherited segment_key too: refused, and said why."""
    graphs = StaticSequence(nx.cycle_graph(N))
    ticks = RandomEdge(nx.cycle_graph(N))
    got = sm.run(DGDDecay(0.05, graphs), problem, ticks, 40).server
    want = sm.run(_unkeyed(DGDDecay)(0.05, graphs), problem, ticks, 40).server
    np.testing.assert_array_equal(got, want)
    found = sm.explain(DGDDecay(0.05, graphs), problem, ticks)
    assert "DGDDecay overrides round_phases, start" not in found.templating  # start: once
    assert "DGDDecay overrides round_phases and inherits its segment_key" in found.templating


def test_which_overrides_count():
    """Overrides of round hooks count; new helpers, data attributes, hooks that run once
    (start, checks, blocks) and the library's own classes do not."""

    class Helper(FedAvg):
        speed = 3.0  # data

        def start(self, ctx):
            super().start(ctx)

        def my_helper(self):  # a new name: called only from overridden hooks
            return 1

    assert untrusted_key(Helper, "template_key") is None
    assert untrusted_key(FedAvg, "template_key") is None
    assert untrusted_key(LaterSteps, "template_key") == ("LaterSteps", ("round_steps",))
    assert untrusted_key(LaterStepsKeyed, "template_key") is None
    assert untrusted_key(LaterStepsKeyed, "phase_key") == ("LaterSteps", ("round_steps",))
    assert method_key(LaterSteps(0.1, 1), "template_key", 0, np.arange(3)) is None

    class Below(LaterStepsKeyed):  # nothing overridden below the class that gives the key
        pass

    assert untrusted_key(Below, "template_key") is None


"""A key a user's subclass inherits past its own round hooks is not used (module
``stochmix.engine.model.inherited_keys``): a subclass whose local steps or step size change
later than the engine's check of a key (its second round) gave silent wrong numbers under
FedAvg's and gradient tracking's inherited keys. Each run is compared with the same class
built in full every round (no key at all)."""

import functools

import networkx as nx
import numpy as np
import pytest

import stochmix as sm
from stochmix.algorithms import DGD, FedAvg, GradientTracking
from stochmix.engine.model.inherited_keys import MethodKeys, untrusted_key
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


class _HalvedAt5:
    """A step halved at round 5 (a plain number, no rule): a user's mixin."""

    def round_phases(self, r, participants, ctx):
        self.lr = self._lr0 * (1.0 if r < 5 else 0.5)
        return super().round_phases(r, participants, ctx)

    def start(self, ctx):
        self._lr0 = self.lr
        super().start(ctx)


class DecayAt(_HalvedAt5, GradientTracking):
    """Gradient tracking whose step halves at round 5."""


class DGDDecay(_HalvedAt5, DGD):
    """DGD whose step halves at round 5."""


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
    assert "round_phases, start" not in found.templating  # start: once
    assert "_HalvedAt5 overrides round_phases and inherits its segment_key" in found.templating


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
    assert MethodKeys(LaterSteps(0.1, 1)).get("template_key", 0, np.arange(3)) is None

    class Below(LaterStepsKeyed):  # nothing overridden below the class that gives the key
        pass

    assert untrusted_key(Below, "template_key") is None



class _LaterMixin:
    def round_steps(self, r, participants, ctx):
        return 1 if r < 5 else 3


def _later(self, r, participants, ctx, switch=5):
    return 1 if r < switch else 3


class _HalvingLr(FedAvg):
    """A step size read through a property that halves after the fifth round's reads
    (a base sets ``lr`` on its instances: the class has no such attribute to override)."""

    @property
    def lr(self):
        self._reads = getattr(self, "_reads", 0) + 1
        return self._base * (1.0 if self._reads < 12 else 0.5)

    @lr.setter
    def lr(self, value):
        self._base = value


MORE = {
    "a user mixin": lambda: type("Mixed", (_LaterMixin, FedAvg), {})(0.05, 1),
    "a partialmethod": lambda: type(
        "Partial", (FedAvg,), {"round_steps": functools.partialmethod(_later, switch=5)}
    )(0.05, 1),
    "a property": lambda: _HalvingLr(0.05, 1),
    "an instance's hook": lambda: _with_hook(FedAvg(0.05, 1)),
}


def _with_hook(method):
    method.round_steps = lambda r, participants, ctx: 1 if r < 5 else 3
    return method


def _off(method):
    for key in ("template_key", "phase_key", "segment_key"):
        setattr(method, key, lambda *args: None)
    return method


@pytest.mark.parametrize("name", sorted(MORE))
def test_other_forms_of_overrides_are_seen(problem, name):
    """Mixins, descriptors that are not functions, a property standing for an instance
    attribute, a hook set on the instance: each refused, each run equal to its full build
    (they parted by up to 0.26 when the inherited key was used)."""
    assert MethodKeys(MORE[name]()).refused("template_key")
    got = sm.run(MORE[name](), problem, UniformSample(N, 5), 12)
    want = sm.run(_off(MORE[name]()), problem, UniformSample(N, 5), 12)
    np.testing.assert_array_equal(got.server, want.server)
    np.testing.assert_array_equal(got.gradients, want.gradients)


def test_a_declaration_vouches_only_for_the_keys_that_read_it():
    """``rounds_repeat`` stated by a user's class vouches for DecentralizedMethod's keys
    (which read it), not for a key a built-in subclass defines itself (AD-PSGD's
    phase_key reads its decay, not the flag)."""
    from stochmix.algorithms import ADPSGD

    class States(DGD):
        rounds_repeat = True

        def round_phases(self, r, participants, ctx):
            return super().round_phases(r, participants, ctx)

    class Below(States):  # overrides below the class that states it: not vouched for
        def round_phases(self, r, participants, ctx):
            return super().round_phases(r, participants, ctx)

    class Halved(ADPSGD):
        rounds_repeat = False

        def round_phases(self, r, participants, ctx):
            return super().round_phases(r, participants, ctx)

    assert all(untrusted_key(States, key) is None for key in ("template_key", "phase_key"))
    assert untrusted_key(Below, "phase_key") == ("Below", ("round_phases",))
    assert untrusted_key(Halved, "phase_key") == ("Halved", ("round_phases",))


def test_a_users_own_key_in_a_mixin_is_used(problem):
    class KeyMixin:
        def template_key(self, r, participants):
            return (r < 5, participants.size)

    class MixinKeyed(KeyMixin, FedAvg):
        def round_steps(self, r, participants, ctx):
            return 1 if r < 5 else 3

    found = sm.explain(MixinKeyed(0.05, 1), problem, UniformSample(N, 5), rounds=8)
    assert "template" in {plan.source for plan in found.rounds}
    assert "plan cache: off (MixinKeyed overrides round_steps" in found.templating

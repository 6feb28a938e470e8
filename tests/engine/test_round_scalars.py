"""Round scalars: coefficients that follow the round by a rule (issue 42b).

FedDualAvg's prox thresholds grow with the round. Its rounds are templated all the same:
the thresholds are :class:`RoundScalar` s, whose rules a template binds for each round.
What must hold: a round scalar is its float everywhere (and pickles as one); templated
rounds give the general path's numbers and cost columns on every dialect; a rule that
lies is caught by the template's check against the second round's full build.
"""

from __future__ import annotations

import pickle
from functools import partial

import numpy as np
import pytest

import stochmix as sm
from stochmix.algorithms import FedDualAvg
from stochmix.engine.model.round_scalars import RoundScalar, bound
from stochmix.engine.plan import planner as planner_module
from tests._backends import SparseOnly

N = 60
COLUMNS = ("gradients", "messages", "floats", "sample_gradients")


def test_a_round_scalar_is_its_value_and_carries_its_rule():
    c = RoundScalar(3.0, lambda r: 2.0 * r + 1.0)
    assert c == 3.0 and isinstance(c, float) and c.at(5) == 11.0
    assert bound(c, 0) == 1.0 and bound(0.5, 7) == 0.5
    again = pickle.loads(pickle.dumps(c))
    assert again == 3.0 and type(again) is float
    # arithmetic with numbers keeps a rule that does the same in every round
    for made, value, later in (
        (-c, -3.0, -11.0),
        (1.0 - 0.5 * c, -0.5, -4.5),
        (c / 4 + 2, 2.75, 4.75),
        (c * c, 9.0, 121.0),
    ):
        assert isinstance(made, RoundScalar) and made == value and made.at(5) == later
    reads = RoundScalar(2.0, lambda r, s: float(s.size), participants=True)
    both = c * reads
    assert both.participants and both.at(5, np.arange(4)) == 44.0
    assert type(float(c)) is float and type(c * np.ones(2)) is np.ndarray


def _problem(regularizer):
    base = sm.problems.LeastSquares.random(N, 4, rows_per_client=3, seed=1)
    return sm.problems.Composite(base, regularizer)


def _sources(method, problem, rounds, **options):
    """The run over 20 of the N clients a round, and where each round's plan came from."""
    return _traced(method, problem, sm.participation.UniformSample(N, 20), rounds, **options)


def _traced(method, problem, process, rounds, **options):
    """The run, and where each round's plan came from."""
    seen = []
    original = planner_module.RoundPlanner.plan

    def plan(self, r, participants):
        out = original(self, r, participants)
        seen.append(self.source)
        return out

    planner_module.RoundPlanner.plan = plan
    try:
        result = sm.run(method, problem, process, rounds, seed=5, progress=False, **options)
    finally:
        planner_module.RoundPlanner.plan = original
    return result, seen


REGULARIZERS = {
    "L1": lambda: sm.problems.L1(0.02),
    "elastic net": lambda: sm.problems.regularizers.ElasticNet(0.02, 0.1),
}
PATHS = {"numpy programs": {"compiled": False}, "compiled": {"compiled": True},
         "torch": {"backend": "torch"}}  # fmt: skip


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("regularizer", list(REGULARIZERS))
def test_templated_dual_averaging_equals_the_general_path(regularizer, path):
    if path == "torch":
        pytest.importorskip("torch")
    problem = _problem(REGULARIZERS[regularizer]())
    got, sources = _sources(FedDualAvg(0.05, 3), problem, 10, **PATHS[path])
    assert sources[3:] == ["template"] * 7  # round 0, a key of its own; 1 and 2 built
    want = sm.run(FedDualAvg(0.05, 3), problem, sm.participation.UniformSample(N, 20), 10,
                  seed=5, progress=False, backend=SparseOnly())  # fmt: skip
    scale = 1.0 + float(np.abs(want.final).max())
    assert float(np.abs(got.final - want.final).max()) <= 1e-12 * scale
    for column in COLUMNS:
        np.testing.assert_array_equal(getattr(got, column), getattr(want, column))


class LyingRule(FedDualAvg):
    """FedDualAvg whose thresholds' rule is off by a round (the value it builds with is
    right): a template that trusted the rule would run later rounds with wrong
    thresholds."""

    def _threshold(self, r, t):
        return RoundScalar(self.threshold(r, t), partial(_shifted, self.threshold, t))


def _shifted(threshold, t, r):
    return threshold(r + 1, t)


def test_a_rule_that_lies_is_caught_by_the_check():
    problem = _problem(sm.problems.L1(0.02))
    got, sources = _sources(LyingRule(0.05, 3), problem, 8)
    assert "template" not in sources
    want = sm.run(FedDualAvg(0.05, 3), problem, sm.participation.UniformSample(N, 20), 8,
                  seed=5, progress=False, backend=SparseOnly())  # fmt: skip
    np.testing.assert_allclose(got.final, want.final, rtol=0, atol=1e-12)


# -- rules that read the participants: one template for rounds of every size ------------


def _trace(sizes, n=N, seed=0):
    """A trace whose rounds have these participant counts (random clients)."""
    rng = np.random.default_rng(seed)
    masks = np.zeros((len(sizes), n), dtype=bool)
    for row, size in zip(masks, sizes, strict=True):
        row[rng.choice(n, size, replace=False)] = True
    return sm.participation.Trace(masks)


def test_a_rule_of_the_participants_is_bound_per_round():
    c = RoundScalar(0.25, lambda r, s: 1.0 / s.size, participants=True)
    assert c == 0.25 and c.at(3, np.arange(8)) == 0.125
    assert bound(c, 3, np.arange(5)) == 0.2
    with pytest.raises(ValueError, match="participants"):
        c.at(3)


SIZES = [7, 7, 12, 9, 15, 7, 20, 11, 9, 13, 8, 16]
FEDERATED = {
    "FedAvg": lambda: sm.algorithms.FedAvg(0.05, 3, server_lr=1.3),
    "AmplifiedFedAvg": lambda: sm.algorithms.AmplifiedFedAvg(
        0.05, 2, amplification=2.0, period=3
    ),  # fmt: skip
    "FedProx": lambda: sm.algorithms.FedProx(0.05, local_steps=3, mu=0.1),
    "FedMid": lambda: sm.algorithms.FedMid(0.05, 3),
    "FedDualAvg": lambda: FedDualAvg(0.05, 3),
}


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("name", list(FEDERATED))
def test_rounds_of_every_size_share_one_template(name, path):
    """1/|S| and the server's own coefficient are round scalars that read the
    participants: rounds of different sizes share one template (trusted once checked at
    two sizes), with the general path's numbers and cost columns."""
    if path == "torch":
        pytest.importorskip("torch")
    problem = _problem(sm.problems.L1(0.02))
    if name in ("FedAvg", "AmplifiedFedAvg", "FedProx"):
        problem = problem.smooth
    got, sources = _traced(FEDERATED[name](), problem, _trace(SIZES), len(SIZES), **PATHS[path])
    # rounds 0 and 1 (size 7) build and check it, round 2 (size 12) checks it at a second
    # size; from then on every round is an instance (round 0 has a key of its own in
    # FedDualAvg, and AmplifiedFedAvg's amplified rounds theirs)
    assert sources.count("template") >= len(SIZES) - 6
    assert len(set(SIZES[i] for i, s in enumerate(sources) if s == "template")) >= 5
    want = sm.run(FEDERATED[name](), problem, _trace(SIZES), len(SIZES), seed=5,
                  progress=False, backend=SparseOnly())  # fmt: skip
    scale = 1.0 + float(np.abs(want.final).max())
    assert float(np.abs(got.final - want.final).max()) <= 1e-12 * scale
    for column in COLUMNS:
        np.testing.assert_array_equal(getattr(got, column), getattr(want, column))


class HiddenSize(sm.algorithms.FedAvg):
    """FedAvg that claims one template for every |S| but averages with a plain 1/|S|
    number (no rule): a template that trusted the claim after checking it at one size
    would average later rounds of other sizes with the wrong weights."""

    def template_key(self, r, participants):
        return "every size"

    def aggregate(self, r, participants, ctx, steps=None):
        from stochmix.algorithms.aggregation import averaged
        from stochmix.engine import Equations

        eq = Equations(ctx)
        x = eq.block("x")
        q = np.full(participants.size, 1.0 / participants.size)
        x.server = averaged(x, participants, q, self.server_lr)
        return eq.build("average")


def test_a_size_the_template_was_not_checked_at_is_checked_first():
    problem = _problem(sm.problems.L1(0.02)).smooth
    got, sources = _traced(HiddenSize(0.05, 3), problem, _trace(SIZES), len(SIZES))
    assert sources[:3] == ["built", "built", "built"]  # built, checked at 7, then at 12
    assert "template" not in sources  # the check at size 12 failed: never again
    want = sm.run(sm.algorithms.FedAvg(0.05, 3), problem, _trace(SIZES), len(SIZES), seed=5,
                  progress=False, backend=SparseOnly())  # fmt: skip
    np.testing.assert_allclose(got.final, want.final, rtol=0, atol=1e-12)


def test_float32_rounds_compute_alike_from_a_template_or_built_in_full():
    """A round scalar is a float subclass, which NumPy does not treat as a weak scalar:
    programs get plain floats (``plain``), so float32 rounds from a template and rounds
    built in full give the same bits."""
    problem = _problem(sm.problems.L1(0.02)).smooth
    process = _trace(SIZES)
    got, sources = _traced(sm.algorithms.FedAvg(0.05, 3, server_lr=1.3), problem, process,
                           len(SIZES), dtype=np.float32, compiled=False)  # fmt: skip
    assert "template" in sources
    want = sm.run(Untemplated(0.05, 3, server_lr=1.3), problem, _trace(SIZES), len(SIZES),
                  seed=5, progress=False, dtype=np.float32, compiled=False)  # fmt: skip
    np.testing.assert_array_equal(got.server, want.server)


class Untemplated(sm.algorithms.FedAvg):
    def template_key(self, r, participants):
        return None


class SizeSteps(sm.algorithms.FedAvg):
    """A user's FedAvg whose local steps depend on |S| (a hook the average's round scalars
    know nothing of): its key keeps |S|, so a template never serves another size."""

    def round_steps(self, r, participants, ctx):
        return 1 if participants.size < 10 else 3


def test_a_subclass_keeps_the_key_by_size():
    assert SizeSteps(0.05, 3).template_key(0, np.arange(7)) == 7
    assert sm.algorithms.FedAvg(0.05, 3).template_key(0, np.arange(7)) == "uniform"
    problem = _problem(sm.problems.L1(0.02)).smooth
    sizes = [4, 4, 6, 5, 20, 20, 3, 25, 12, 12, 2, 30]
    got, _ = _traced(SizeSteps(0.05, 3), problem, _trace(sizes), len(sizes))
    want = sm.run(type("Plain", (SizeSteps,), {"template_key": lambda s, r, p: None})(0.05, 3),
                  problem, _trace(sizes), len(sizes), seed=5, progress=False)  # fmt: skip
    np.testing.assert_array_equal(got.server, want.server)
    for column in COLUMNS:
        np.testing.assert_array_equal(getattr(got, column), getattr(want, column))

"""``explain`` says what the planner and the run do, no more and no less: templating as the
planner keys it (per-node trip counts, a clock's per-round steps), an activated phase's
sparse rows as its intended path (not the general path), and gossip ticks in compiled
segments only where the segmenter can run them.

Each claim is checked against the engine itself (the planner's ``source`` of each round,
its slow-path notes, what a run segments), never against timing."""

import networkx as nx
import pytest

import stochmix as sm
from stochmix.algorithms import ADPSGD, DGD, FedAvg, PushPull, RandomSteps
from stochmix.engine.runner import segments
from stochmix.mixing import DirectedRingSequence, StaticSequence
from stochmix.participation import Full, OnePeerPermutation, RandomEdge, UniformSample
from stochmix.problems import LeastSquares
from stochmix.timing import Clock, Exponential, TimeModel

N, D = 10, 3


@pytest.fixture(scope="module")
def problem():
    return LeastSquares.random(N, D, 5, seed=0)


def _ring(n):
    return StaticSequence(nx.cycle_graph(n), n)


def test_rounds_with_trip_counts_are_templated_and_summed_up(problem):
    """The planner keys such rounds by (template_key, largest count): a template it
    instantiated is reported as on, and rounds that differ only in their counts are one
    line."""
    rounds = 12
    found = sm.explain(FedAvg(0.01, RandomSteps.uniform(1, 5)), problem, Full(N), rounds=rounds)
    assert all(seg.repeats for plan in found.rounds for seg in plan.segments)
    sources = [plan.source for plan in found.rounds]
    assert "template" in sources  # the planner used a template: the claim below can fail
    assert found.templating.startswith("on (one plan per template_key")
    text = str(found)
    assert "each with its own trip counts" in text
    listed = [line for line in text.splitlines() if line.startswith("    1.")]
    most = [len(plan.segments[0].repeats) for plan in found.rounds]  # the largest counts
    changes = sum(a != b for a, b in zip(most, most[1:], strict=False))
    assert len(listed) == 1 + changes < rounds  # listed again only where the largest changes


def test_rounds_whose_clock_sets_the_steps_are_not_templated(problem):
    """A deadline with partial work puts each round's step counts in its record, which
    the planner builds in full: never templated."""
    clock = Clock(TimeModel(compute=Exponential(1.0)), deadline=3.0, partial_work=True)
    found = sm.explain(FedAvg(0.01, 3), problem, UniformSample(N, 5), rounds=10, clock=clock)
    assert all(plan.source == "built" for plan in found.rounds)
    assert found.templating.startswith("off (each round's record sets")
    assert "not yet checked" not in found.templating


def test_rounds_taken_from_the_cache_are_not_said_to_be_planned_in_full(problem):
    found = sm.explain(PushPull(0.01, DirectedRingSequence(N, (1,))), problem, Full(N), rounds=5)
    assert "cache" in {plan.source for plan in found.rounds}
    assert found.templating == "off (the method gives no template_key)"


def test_an_activated_phase_is_its_active_rows_not_the_general_path(problem):
    found = sm.explain(ADPSGD(0.01, _ring(N)), problem, RandomEdge(nx.cycle_graph(N)), rounds=3)
    assert found.fast and not found.slow_paths
    (segment,) = found.segments
    assert segment.kind == "active rows" and segment.fast and segment.why is None
    text = str(found)
    assert "general path" not in text and "activated phase, sparse rows of the active" in text


def test_ticks_the_segmenter_refuses_are_not_said_to_run_in_segments(problem):
    pairwise = sm.explain(DGD(0.01, _ring(N)), problem, RandomEdge(nx.cycle_graph(N)))
    assert "run in compiled segments" in pairwise.templating
    weights = RandomEdge(nx.cycle_graph(N), mixing="weights")
    found = sm.explain(DGD(0.01, _ring(N)), problem, weights)
    assert "not in compiled segments" in found.templating and "'weights'" in found.templating
    n = segments.MAX_NODES + 6  # a permutation round touches every node
    many = LeastSquares.random(n, D, 5, seed=0)
    found = sm.explain(DGD(0.01, _ring(n)), many, OnePeerPermutation(n))
    assert f"at most {segments.MAX_NODES} nodes" in found.templating
    assert "run in compiled segments" not in found.templating


@pytest.mark.slow  # compiles the segment loop (Numba) where its cache is cold
@pytest.mark.parametrize("mixing", ["pairwise", "weights"])
def test_what_explain_says_of_ticks_is_what_a_run_does(problem, monkeypatch, mixing):
    ran = []
    original = segments.Segmenter.run

    def counted(self, z, nodes, programs, *rest):
        out = original(self, z, nodes, programs, *rest)
        ran.append(out[0])
        return out

    monkeypatch.setattr(segments.Segmenter, "run", counted)
    process = RandomEdge(nx.cycle_graph(N), mixing=mixing)
    said = sm.explain(DGD(0.01, _ring(N)), problem, process).templating
    sm.run(DGD(0.01, _ring(N)), problem, process, 200, progress=False, metrics=("distance",))
    assert ("not in compiled segments" in said) == (sum(ran) == 0)

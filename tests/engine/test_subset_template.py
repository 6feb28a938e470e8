"""Templates of activated rounds (:mod:`stochmix.engine.plan.subset_template`).

Under node activation a decentralized iteration's phases are on the active nodes' rows;
their structure repeats at each position of the graph sequence, so the engine plans it
once and substitutes each iteration's active nodes. What must hold: the same bits as
building every round, every cost column equal (and equal to a count made here from the
graph), templates used from the fourth round on, the sparse rows of an instance equal to a
full build's, and a method whose rounds differ while claiming they repeat never templated.
"""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

import stochmix as sm
from stochmix import algorithms as A
from stochmix.engine.backends.names import make_backend
from stochmix.engine.model.layout import Layout
from stochmix.engine.model.method import RunContext
from stochmix.engine.plan import planner as planner_module
from stochmix.engine.plan.round_plan import plan_round
from stochmix.engine.plan.template import RoundTemplate
from stochmix.mixing import PeriodicSequence, StaticSequence

N = 30
GRAPH = StaticSequence(nx.random_regular_graph(4, N, seed=2))
PERIODIC = PeriodicSequence([nx.cycle_graph(N), nx.random_regular_graph(4, N, seed=5)])

METHODS = {
    "gradient tracking": lambda g: A.GradientTracking(0.05, g, check_mixing=False),
    "gradient tracking atc": lambda g: A.GradientTracking(0.05, g, check_mixing=False, form="atc"),
    "DGD": lambda g: A.DGD(0.05, g),
    "EXTRA": lambda g: A.EXTRA(0.05, g, check_mixing=False),
    "NIDS": lambda g: A.NIDS(0.05, g, check_mixing=False),
    "exact diffusion": lambda g: A.ExactDiffusion(0.05, g, check_mixing=False),
    "D2": lambda g: A.D2(0.05, g, check_mixing=False),
    "LED": lambda g: A.LED(0.05, g, check_mixing=False),
}


def _sources(monkeypatch) -> list:
    """Where each round's plan came from ("template", "cache", "built"), in order."""
    seen: list = []
    plan = planner_module.RoundPlanner.plan

    def recorded(self, r, participants):
        out = plan(self, r, participants)
        seen.append(self.source)
        return out

    monkeypatch.setattr(planner_module.RoundPlanner, "plan", recorded)
    return seen


def _untemplated(method):
    method.template_key = lambda r, participants: None
    return method


def _problem():
    return sm.problems.LeastSquares.random(N, 3, rows_per_client=4, seed=1)


COLUMNS = ("participants", "gradients", "messages", "floats", "sample_gradients")


@pytest.mark.parametrize("graph", [GRAPH, PERIODIC], ids=["static", "periodic"])
@pytest.mark.parametrize("name", list(METHODS))
def test_templated_activated_rounds_equal_full_builds_bit_for_bit(name, graph, monkeypatch):
    process = sm.participation.Bernoulli(0.4, N)
    want = sm.run(_untemplated(METHODS[name](graph)), _problem(), process, 24, seed=3,
                  progress=False)  # fmt: skip
    sources = _sources(monkeypatch)
    got = sm.run(METHODS[name](graph), _problem(), process, 24, seed=3, progress=False)
    np.testing.assert_array_equal(got.server, want.server)
    np.testing.assert_array_equal(got.final, want.final)
    for column in COLUMNS:
        np.testing.assert_array_equal(getattr(got, column), getattr(want, column))
    # each position of the period: built, checked at two sizes, then substituted
    assert sources[-10:] == ["template"] * 10


def test_the_messages_are_the_active_nodes_neighbours():
    """An activated iteration of gradient tracking (descend, then track) sends, in each of
    its two mixing phases, one message per edge into an active node: sum of the active
    nodes' degrees, counted here from the graph."""
    graph = nx.random_regular_graph(4, N, seed=2)
    process = sm.participation.Bernoulli(0.4, N)
    got = sm.run(A.GradientTracking(0.05, StaticSequence(graph), check_mixing=False),
                 _problem(), process, 24, seed=3, progress=False)  # fmt: skip
    records = process.activations(3)
    degree = dict(graph.degree())
    next(records)  # the first iteration also starts every node's tracker
    for r in range(2, 25):
        active = next(records).nodes
        if active.size in (0, N):
            continue
        assert got.messages[r] == 2 * sum(degree[int(i)] for i in active)
        assert got.gradients[r] == active.size
        assert got.floats[r] == 3 * got.messages[r]


def test_an_instance_has_the_sparse_rows_of_a_full_build():
    """What analysis and backends without row subsets read of a templated phase (its
    rows, sparse mixing and gradient rows, clients) is what a full build gives."""
    method = METHODS["gradient tracking"](GRAPH)
    method.check_participation(sm.participation.Bernoulli(0.4, N))
    back = make_backend("numpy", np.float64)
    layout = Layout(method.blocks(N))
    ctx = RunContext(layout, N, 3, None)
    method.start(ctx)
    planner = planner_module.RoundPlanner(method, back, ctx)
    rng = np.random.default_rng(0)
    sets = [np.sort(rng.choice(N, k, replace=False)) for k in (9, 12, 10, 11, 13)]
    for r, active in enumerate(sets, start=1):
        plan = planner.plan(r, active)
    assert planner.source == "template"
    built = plan_round(method.round_phases(len(sets), sets[-1], ctx), back, method, ctx)
    assert len(plan) == len(built) == 2
    for mine, full in zip(plan, built, strict=True):
        np.testing.assert_array_equal(mine.rows, full.rows)
        np.testing.assert_array_equal(mine.clients, full.clients)
        np.testing.assert_array_equal(mine.mix.toarray(), full.mix.toarray())
        if full.inject is None:
            assert mine.inject is None
        else:
            np.testing.assert_array_equal(mine.inject.toarray(), full.inject.toarray())


def test_a_method_whose_rounds_differ_is_never_templated(monkeypatch):
    """DGD whose step changes with the round while it still claims its rounds repeat:
    the second full build differs from the template's instance, so the key is dropped
    and every round is built (the same numbers as a run without templates)."""

    class Wobbly(A.DGD):
        def round_phases(self, r, participants, ctx):
            self.lr = 0.05 * (1 + r % 3)
            return super().round_phases(r, participants, ctx)

    process = sm.participation.Bernoulli(0.4, N)
    want = sm.run(_untemplated(Wobbly(0.05, GRAPH)), _problem(), process, 15, seed=3,
                  progress=False)  # fmt: skip
    sources = _sources(monkeypatch)
    got = sm.run(Wobbly(0.05, GRAPH), _problem(), process, 15, seed=3, progress=False)
    np.testing.assert_array_equal(got.server, want.server)
    assert "template" not in sources


def test_push_sum_rounds_are_templated_with_the_numbers_of_full_builds(monkeypatch):
    """Push-sum's push reaches inactive rows, as a scatter of the active nodes' columns of
    its matrix (PushedColumns): since push-sum says its iterations repeat
    (``rounds_repeat``), its activated rounds are planned once per key and substituted,
    with the numbers and the costs of a run without templates, bit for bit."""
    process = sm.participation.Bernoulli(0.4, N)
    want = sm.run(_untemplated(A.PushSum(0.05, GRAPH)), _problem(), process, 12, seed=3,
                  progress=False)  # fmt: skip
    sources = _sources(monkeypatch)
    got = sm.run(A.PushSum(0.05, GRAPH), _problem(), process, 12, seed=3, progress=False)
    np.testing.assert_array_equal(got.server, want.server)
    np.testing.assert_array_equal(got.node_models, want.node_models)
    for column in ("participants", "gradients", "messages", "floats"):
        np.testing.assert_array_equal(getattr(got, column), getattr(want, column))
    assert "template" in sources


def test_without_the_floats_of_a_row_an_activated_plan_is_not_a_template():
    """A caller of RoundTemplate.attempt that cannot count floats gets the reason."""
    from stochmix.engine.plan.subset_template import SubsetRecipe

    assert RoundTemplate.attempt([], np.arange(3)) is not None
    assert SubsetRecipe.attempt(object(), np.arange(3), lambda block: 3) == (
        "it is not part of a node-local segment"
    )

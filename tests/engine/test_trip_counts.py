"""Per-node trip counts: uneven local steps as one run (issue 42c).

A federated round with local steps K_i is the pull over S, the step repeated over the
nested sets ``{i : K_i >= j}``, and the upload. The engine runs all of it as one run over
S, each repetition a guarded region of the program: bound by count (S in its order, each
node with its K_i: the Numba loop), or by prefix (S in decreasing-count order, each
repetition on a prefix: the programs of chunks). What must hold: the order and prefixes
are right (against a brute-force count), the two bindings are the same run;
the numbers and every cost column equal the general path's (each phase through its sparse
rows) on the NumPy programs, the Numba loop and Torch, templated or not, with counts of 0;
a round is one run; a backend without the capability and gradients that draw random
numbers keep one run per repetition.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import stochmix as sm
from stochmix.algorithms import FOCUS, SCAFFOLD, FedAvg, FedDyn, FedMid, FedProx, RandomSteps
from stochmix.engine.backends.numpy_backend import NumpyBackend
from stochmix.engine.model.trips import TripCounts
from stochmix.engine.plan import planner as planner_module
from stochmix.engine.plan.round_plan import LocalStep
from stochmix.engine.plan.schedule import EndGuard, Guard, plan_schedule
from tests._backends import PATHS, SparseOnly, path_options

N = 60
COLUMNS = ("gradients", "messages", "floats", "sample_gradients")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 7), min_size=1, max_size=40))
def test_order_extents_members_and_ranks_match_a_count(counts):
    counts = np.array(counts)
    nodes = np.arange(counts.size) * 3 + 5  # sorted, not 0..n-1
    trips = TripCounts(nodes, counts)
    assert trips.most == counts.max()
    ordered = counts[trips.order]
    assert (np.diff(ordered) <= 0).all()  # decreasing counts
    for k in np.unique(counts):  # by position within a count
        assert (np.diff(trips.order[ordered == k]) > 0).all()
    for j in range(1, trips.most + 1):
        members = nodes[counts >= j]
        assert trips.extents[j - 1] == members.size
        np.testing.assert_array_equal(trips.members(j), members)
        prefix = nodes[trips.order][: members.size]
        assert set(prefix.tolist()) == set(members.tolist())
        np.testing.assert_array_equal(members[trips.ranks(j)], prefix)


def test_counts_must_match_the_nodes():
    with pytest.raises(ValueError, match="counts: one per node"):
        TripCounts(np.arange(3), np.ones(4, dtype=int))


class ZeroSteps(FedAvg):
    """FedAvg whose participants take 0 to 3 local steps (as under a clock's deadline),
    drawn from the round index: a round is built in full (no trip counts to template)."""

    def round_steps(self, r, participants, ctx):
        steps = np.random.default_rng(r).integers(0, 4, participants.size)
        return steps if (steps != steps[0]).any() else steps[0]


def _problem():
    return sm.problems.LeastSquares.random(N, 4, rows_per_client=3, seed=1)


LR = 0.05
METHODS = {
    "FedAvg": lambda: FedAvg(LR, RandomSteps.uniform(1, 5)),
    "FedAvg per client": lambda: FedAvg(LR, np.arange(N) % 4 + 1),
    "FedAvg with zero steps": lambda: ZeroSteps(LR),
    "SCAFFOLD": lambda: SCAFFOLD(LR, RandomSteps.uniform(1, 4)),
    "FedProx": lambda: FedProx(LR, 0.1, RandomSteps.uniform(1, 4)),
    "FedDyn": lambda: FedDyn(LR, RandomSteps.uniform(1, 3)),
    "FOCUS": lambda: FOCUS(LR, RandomSteps.uniform(1, 4)),
    "FedMid (L1)": lambda: FedMid(LR, RandomSteps.uniform(1, 4)),
}


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", list(METHODS))
def test_uneven_rounds_equal_the_general_path(name, path):
    paths = path_options(path)
    problem = _problem()
    if name.startswith("FedMid"):  # its prox: an element-wise kernel inside the run
        problem = sm.problems.Composite(problem, sm.problems.L1(0.01))
    participation = sm.participation.UniformSample(N, 20)
    options = {"seed": 4, "progress": False}
    got = sm.run(METHODS[name](), problem, participation, 12, **options, **paths)
    want = sm.run(METHODS[name](), problem, participation, 12, **options, backend=SparseOnly())
    scale = 1.0 + float(np.abs(want.final).max())
    assert float(np.abs(got.final - want.final).max()) <= 1e-12 * scale
    for column in COLUMNS:
        np.testing.assert_array_equal(getattr(got, column), getattr(want, column))


def _plans(method, rounds=4, backend=None):
    """The plans of a run's rounds and where each came from."""
    seen = []
    original = planner_module.RoundPlanner.plan

    def plan(self, r, participants):
        out = original(self, r, participants)
        seen.append((self.source, out))
        return out

    planner_module.RoundPlanner.plan = plan
    try:
        sm.run(method, _problem(), sm.participation.UniformSample(N, 20), rounds,
               seed=2, progress=False, backend=backend or "numpy")  # fmt: skip
    finally:
        planner_module.RoundPlanner.plan = original
    return seen


def test_an_uneven_round_is_one_run_and_templated():
    seen = _plans(FedAvg(LR, RandomSteps.uniform(1, 5)), rounds=5)
    for _, plan in seen:
        (step,) = plan  # pull, every repetition, upload and the server's sum: one run
        assert isinstance(step, LocalStep) and len(step.extents) == 5
        assert step.extents[0] == step.nodes.size and list(step.extents) == sorted(
            step.extents, reverse=True
        )
        # bound by count: the participants in their order, each with its trips
        assert step.counts is not None and (np.diff(step.nodes) > 0).all()
        assert [int((step.counts > j).sum()) for j in range(5)] == list(step.extents)
    assert [source for source, _ in seen][2:] == ["template"] * 3


def test_by_prefix_orders_the_nodes_and_cuts_each_repetitions_coefficients():
    seen = _plans(FedAvg(LR, np.arange(N) % 4 + 1), rounds=3)
    for _, plan in seen:
        (step,) = plan
        prefixed = step.by_prefix()
        assert prefixed.counts is None and prefixed.extents == step.extents
        assert prefixed.by_prefix() is prefixed
        order = np.argsort(-step.counts, kind="stable")
        np.testing.assert_array_equal(prefixed.nodes, step.nodes[order])
        np.testing.assert_array_equal(prefixed.clients, step.clients[order])
        structure = step.structure
        body = len(structure.forms) - structure.tail
        slot = 0
        for k, lf in enumerate(structure.forms):
            level = structure.levels[k] if k < body else -1
            for _ in lf.coefficients:
                c, p = step.coefs[slot], prefixed.coefs[slot]
                if np.ndim(c) and k < body:
                    assert np.shape(c)[0] == step.nodes.size  # by count: every node
                    want = np.asarray(c)[order]
                    cut = want if level < 0 else want[: step.extents[level]]
                    np.testing.assert_array_equal(p, cut)
                else:
                    assert p is c
                slot += 1


def test_a_per_node_coefficient_of_a_repetition_is_read_at_its_node():
    # weights per client inside the repeated step: a run bound by count gives each node
    # its own value (the prefix binding reads them in the prefix order); both equal the
    # general path on every path (test_uneven_rounds_equal_the_general_path runs them)
    from stochmix.engine.model.trips import spread_over

    values = np.array([1.0, 2.0, 3.0])
    members = np.array([False, True, True, False, True])
    np.testing.assert_array_equal(spread_over(values, members, 5), [1.0, 1.0, 2.0, 1.0, 3.0])
    same = spread_over(np.full(3, 0.5), members, 5)
    assert (same == 0.5).all()  # equal values stay equal (templates read them as one number)


class NoTrips(NumpyBackend):
    """The NumPy backend without trip counts: a repetition is a run of its own."""

    applies_trip_counts = False


def test_without_the_capability_each_repetition_is_its_own_run():
    seen = _plans(FedAvg(LR, RandomSteps.uniform(1, 3)), rounds=3, backend=NoTrips())
    for _, plan in seen:
        assert len(plan) >= 3 and all(not item.extents for item in plan)


def test_random_gradients_keep_one_run_per_repetition():
    problem = sm.problems.Minibatch(_problem(), 2)
    participation = sm.participation.UniformSample(N, 20)
    method = FedAvg(LR, RandomSteps.uniform(1, 3))
    got = sm.run(method, problem, participation, 6, seed=3, progress=False)
    want = sm.run(FedAvg(LR, RandomSteps.uniform(1, 3)), problem, participation, 6, seed=3,
                  progress=False, backend=SparseOnly())  # fmt: skip
    np.testing.assert_allclose(got.final, want.final, rtol=0, atol=1e-12)


def test_a_guarded_region_leaves_every_block_where_it_was():
    # FedProx's proximal step reads the server row and writes x: in place; SCAFFOLD's
    # corrected step too. Plan a run with two repetitions and check the regions.
    (_, plan), *_ = _plans(SCAFFOLD(LR, RandomSteps.uniform(1, 2)), rounds=1)
    (step,) = [item for item in plan if isinstance(item, LocalStep) and item.extents]
    schedule = plan_schedule(
        list(step.structure.forms), step.structure.model, step.structure.tail,
        levels=step.structure.levels,
    )  # fmt: skip
    kinds = [type(s) for s in schedule.steps]
    assert kinds.count(Guard) == kinds.count(EndGuard) == 2
    assert "guard 0" in schedule.describe() and "guard 1" in schedule.describe()


def test_levels_must_match_the_body():
    (_, plan), *_ = _plans(FedAvg(LR, RandomSteps.uniform(1, 2)), rounds=1)
    (step,) = plan
    with pytest.raises(ValueError, match="levels: one per form"):
        plan_schedule(list(step.structure.forms), "x", step.structure.tail, levels=(0,))


def test_step_groups_is_deprecated_and_still_works():
    from stochmix.algorithms.local_training import step_groups

    with pytest.warns(DeprecationWarning, match="step_groups is deprecated"):
        groups = step_groups(np.array([1, 4, 6]), np.array([2, 1, 2]))
    assert [(g.tolist(), k) for g, k in groups] == [([4], 1), ([1, 6], 2)]


def test_explain_shows_one_segment_with_its_repetitions():
    problem = _problem()
    shown = sm.explain(FedAvg(LR, np.arange(N) % 3 + 1), problem, sm.participation.Full(N), 2)
    (segment,) = shown.rounds[0].segments
    assert segment.kind == "node-local" and segment.repeats == (N, 40, 20)
    assert "repetitions over 60/40/20 nodes" in str(shown)


def test_threads_share_the_work_of_the_repetitions():
    from stochmix.engine.codegen.chunks import _parts, work_before
    from stochmix.engine.codegen.rowwise import RowwiseProgram

    extents = (100, 80, 60, 40, 20)
    assert work_before(0, extents) == 0 and work_before(100, extents) == 400
    assert work_before(30, extents) == 30 + 4 * 30 + 20  # four prefixes cover it, one ends
    bounds = [(lo, lo + 10) for lo in range(0, 100, 10)]
    parts = _parts(bounds, 2, extents)
    assert [b for part in parts for b in part] == bounds  # contiguous, in order
    works = [sum(work_before(hi, extents) - work_before(lo, extents) for lo, hi in p)
             for p in parts]  # fmt: skip
    assert max(works) <= 0.6 * sum(works)  # (halves by node count: 290 against 110)
    cuts = RowwiseProgram._bounds(None, 100, 50, extents)
    assert cuts[0][0] == 0 and cuts[-1][1] == 100 and len(cuts) == 2
    first = work_before(cuts[0][1], extents)
    assert abs(first - (400 - first)) <= 6  # balanced to a node's work


def test_threads_share_the_work_of_a_run_bound_by_count():
    from stochmix.engine.codegen.chunks import ByCount, work_before
    from stochmix.engine.codegen.rowwise import RowwiseProgram

    rng = np.random.default_rng(0)
    # counts that grow along the nodes: halves by node count would be far apart
    counts = np.sort(rng.integers(0, 9, 100_000))
    exact = np.concatenate(([0], np.cumsum(counts)))
    reps = ByCount(counts)
    for t in (0, 1, 195, 196, 50_000, 99_999, 100_000):
        assert abs(work_before(t, reps) - (t + exact[t])) <= 8  # pro rata within a step
    assert work_before(100_000, reps) == 100_000 + exact[-1]
    cuts = RowwiseProgram._bounds(None, 100_000, 50_000, reps)
    assert cuts[0][0] == 0 and cuts[-1][1] == 100_000 and len(cuts) == 2
    first = cuts[0][1] + exact[cuts[0][1]]
    total = 100_000 + exact[-1]
    assert abs(first - (total - first)) <= 0.001 * total
    assert cuts[0][1] > 55_000  # (the later nodes weigh more)
    small = ByCount(np.array([3, 0, 2, 5]))  # exact for small runs
    assert [work_before(t, small) for t in range(5)] == [0, 4, 5, 8, 14]


def test_a_large_uneven_round_on_two_threads_equals_the_general_path():
    pytest.importorskip("numba")
    n = 40_000
    problem = sm.problems.Quadratic.random(n, 10, seed=3)
    participation = sm.participation.UniformSample(n, 20_000)  # x d: two threads compiled
    method = lambda: FedAvg(0.05 / problem.smoothness, RandomSteps.uniform(1, 5))  # noqa: E731
    got = sm.run(method(), problem, participation, 3, seed=2, progress=False, compiled=True)
    want = sm.run(method(), problem, participation, 3, seed=2, progress=False,
                  backend=SparseOnly())  # fmt: skip
    np.testing.assert_allclose(got.final, want.final, rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(got.gradients, want.gradients)


class _BuiltInFull(FedAvg):
    def template_key(self, r, participants):
        return None


def _masks(rounds, n):
    masks = np.zeros((len(rounds), n), dtype=bool)
    for row, members in zip(masks, rounds, strict=True):
        row[members] = True
    return sm.participation.Trace(masks)


@pytest.mark.parametrize(
    "case",
    [
        # trip order = sorted order in the rounds that make and check the template, then
        # reversed: the repeated steps' nodes fit both "the participants" and "the
        # participants in trip order"
        ("trips", np.array([3, 1, 1, 3, 1, 1, 1, 1]), [[0, 1], [0, 2], [1, 3]]),
        # groups (gradients with random draws: one run per repetition): the group {K_i >=
        # 2} holds every participant in the first rounds, then not
        ("groups", np.array([2, 3, 3, 2, 3, 3, 1, 3, 3]), [[0, 1, 2], [3, 4, 5], [6, 7, 8]]),
    ],
)
def test_a_node_array_that_fits_two_ways_is_told_apart_by_a_full_build(case):
    """A template's node array that fits several bases in the rounds seen so far is used
    only where the fits agree; a later round where they differ is built in full, which
    keeps the fit that holds (it used to run the repeated steps on the wrong clients)."""
    kind, counts, rounds = case
    n = counts.size
    problem = sm.problems.LeastSquares.random(n, 4, rows_per_client=3, seed=1)
    if kind == "groups":
        problem = sm.problems.Noisy(problem, sigma=0.0, seed=3)
    steps = sm.algorithms.ClientSteps(counts)
    got = sm.run(FedAvg(0.05, steps), problem, _masks(rounds, n), len(rounds), seed=0,
                 progress=False)  # fmt: skip
    want = sm.run(_BuiltInFull(0.05, steps), problem, _masks(rounds, n), len(rounds), seed=0,
                  progress=False)  # fmt: skip
    np.testing.assert_array_equal(got.server, want.server)
    np.testing.assert_array_equal(got.gradients, want.gradients)

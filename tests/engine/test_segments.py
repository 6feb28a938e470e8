"""Compiled segments of small gossip rounds (stochmix.engine.runner.segments): the same run as
round by round, to rounding; where they run and where they do not."""

import networkx as nx
import numpy as np
import pytest

import stochmix as sm
import stochmix.engine.runner.segments as segments_module
from stochmix import algorithms, mixing, participation, problems
from stochmix.engine import DivergenceWarning
from tests._segments import batch_sizes

pytest.importorskip("numba")

N = 10


def _graph():
    return nx.cycle_graph(N)


@pytest.mark.parametrize(
    "make",
    [
        lambda g: algorithms.DGD(0.02, g, form="cta"),
        lambda g: algorithms.DGD(0.02, g),
        lambda g: algorithms.GradientTracking(0.05, g),
        lambda g: algorithms.PushPull(0.05, g, row_rule="metropolis", column_rule="metropolis"),
        lambda g: algorithms.EXTRA(0.05, g),
        lambda g: algorithms.NIDS(0.05, g),
        # (it reports x and takes gradients at z; slow stage: 7 s a process)
        pytest.param(lambda g: algorithms.KGT(0.05, g, 2), marks=pytest.mark.slow),
    ],
)
# (matchings in the slow stage, for the quick suite's time: the edge process covers the
# same loop, a matching only holds more edges a tick)
@pytest.mark.parametrize("process", ["edge", pytest.param("matching", marks=pytest.mark.slow)])
def test_segmented_run_equals_round_by_round(monkeypatch, make, process):
    problem = problems.Quadratic.random(N, 3, seed=4)
    graph = _graph()
    sequence = mixing.StaticSequence(graph)
    draws = (
        participation.RandomEdge(graph)
        if process == "edge"
        else participation.RandomMatching(graph)
    )
    plain = sm.run(make(sequence), problem, draws, 400, seed=7, compiled=False, progress=False)
    batches = batch_sizes(monkeypatch)
    fast = sm.run(make(sequence), problem, draws, 400, seed=7, progress=False)
    assert batches, "no round ran in a segment"
    scale = np.abs(plain.server).max()
    assert np.abs(fast.server - plain.server).max() <= 1e-12 * scale
    assert np.allclose(fast.distance, plain.distance, rtol=1e-10, atol=1e-14)
    for name in ("participants", "gradients", "messages", "floats"):
        assert np.array_equal(getattr(fast, name), getattr(plain, name)), name
    if process == "edge":
        assert np.array_equal(fast.time, plain.time)


def test_segments_keep_the_schedule_and_the_last_round(monkeypatch):
    problem = problems.Logistic.random(N, 3, seed=1)  # its objective is scheduled
    sequence = mixing.StaticSequence(_graph())
    batches = batch_sizes(monkeypatch)
    result = sm.run(
        algorithms.DGD(0.02, sequence, form="cta"), problem, participation.RandomEdge(_graph()),
        1000, seed=2, progress=False, evaluate_every=100,
    )  # fmt: skip
    assert batches and max(batches) <= 100  # a batch ends where a scheduled metric is due
    rounds, _ = result.evaluated("objective_gap")
    assert set(range(0, 1001, 100)) <= set(rounds.tolist())
    assert np.isfinite(result.distance).all()  # distance: every round, from the model


@pytest.mark.slow  # (long: run after the quick suite)
def test_no_segments_where_they_cannot_run(monkeypatch):
    problem = problems.Quadratic.random(N, 3, seed=1)
    graph = _graph()
    sequence = mixing.StaticSequence(graph)
    batches = batch_sizes(monkeypatch)
    # a decaying step changes the coefficients every round
    sm.run(algorithms.DGD(0.02, sequence, decay=0.5), problem, participation.RandomEdge(graph),
           200, progress=False)  # fmt: skip
    # a decaying step of push-sum (whose ticks otherwise run in segments: x / w declared)
    sm.run(algorithms.PushSum(0.02, sequence, decay=0.5), problem,
           participation.RandomEdge(graph), 200, progress=False)  # fmt: skip
    # the method's own weights on the activated edges: coefficients that depend on the edge
    sm.run(algorithms.DGD(0.02, sequence), problem,
           participation.RandomEdge(graph, mixing="weights"), 200, progress=False)  # fmt: skip
    # node activation reads neighbours outside the round's nodes
    sm.run(algorithms.DGD(0.02, sequence), problem, participation.PoissonClocks(1.0, n_nodes=N),
           200, progress=False)  # fmt: skip
    # a callback sees every round's state
    sm.run(algorithms.DGD(0.02, sequence), problem, participation.RandomEdge(graph), 200,
           progress=False, callback=lambda r, z, ctx: None)  # fmt: skip
    assert batches == []


def test_divergence_inside_a_segment_stops_the_run():
    problem = problems.Quadratic.random(N, 3, seed=1)
    graph = _graph()
    with pytest.warns(DivergenceWarning):
        result = sm.run(
            algorithms.DGD(1e3, mixing.StaticSequence(graph), form="cta"), problem,
            participation.RandomEdge(graph), 5000, progress=False,
        )  # fmt: skip
    assert result.diverged and result.rounds < 5000


def test_a_segmented_run_resumes_from_its_checkpoint(tmp_path):
    problem = problems.Quadratic.random(N, 3, seed=1)
    graph = _graph()
    sequence = mixing.StaticSequence(graph)

    def run(rounds):
        return sm.run(
            algorithms.GradientTracking(0.05, sequence), problem,
            participation.RandomEdge(graph), rounds, seed=3, progress=False,
            checkpoint=tmp_path / "run.ckpt", checkpoint_every=250,
        )  # fmt: skip

    whole = sm.run(algorithms.GradientTracking(0.05, sequence), problem,
                   participation.RandomEdge(graph), 1000, seed=3, progress=False)  # fmt: skip
    run(500)
    resumed = run(1000)
    assert resumed.config["resumed_from"] == 500
    assert np.allclose(resumed.server, whole.server, rtol=1e-12, atol=1e-15)


class _DGDByParity(algorithms.DGD):
    """DGD whose rounds' segment variants are their parity: needless (the rounds do not
    differ), so it only splits each key in two."""

    def segment_variants(self, first, nodes):
        return (first + np.arange(nodes.shape[0])) % 2


def test_segment_variants_extend_the_keys(monkeypatch):
    """A method's segment_variants is asked for the rounds that may run in segments and
    appended to their keys: each (key, variant) is verified and gets its program (here
    two, one per parity), and the run equals the round-by-round one."""
    problem = problems.Quadratic.random(N, 3, seed=4)
    graph = _graph()
    sequence = mixing.StaticSequence(graph)
    draws = participation.RandomEdge(graph)
    plain = sm.run(_DGDByParity(0.02, sequence), problem, draws, 400, seed=7, compiled=False,
                   progress=False)  # fmt: skip
    seen: list = []
    original = segments_module.Segmenter.run

    def kept(self, z, nodes, programs, *rest):
        seen.append((dict(self.verified), programs.size))
        return original(self, z, nodes, programs, *rest)

    monkeypatch.setattr(segments_module.Segmenter, "run", kept)
    fast = sm.run(_DGDByParity(0.02, sequence), problem, draws, 400, seed=7, progress=False)
    assert sum(size for _, size in seen) > 350
    verified = seen[-1][0]
    assert {key[-1] for key in verified} == {0, 1}  # the variant: the key's last entry
    assert len({key[:-1] for key in verified}) == 1 and len(set(verified.values())) == 2
    assert np.abs(fast.server - plain.server).max() <= 1e-12 * np.abs(plain.server).max()


def test_a_method_whose_ticks_hold_row_maps_runs_with_rounds_repeat_set():
    """CHOCO's ticks hold a nonlinear row map (its compression; rand-k here: top-k has a
    slot form): with ``rounds_repeat`` set, as the slow-path hint suggests, the segmenter
    finds no slot form for them and runs each tick as planned (it used to stop the run
    with NonlinearPhaseError), with the numbers of the run without the flag."""
    n = 12
    graph = nx.cycle_graph(n)
    problem = problems.LeastSquares.random(n, 4, 6, seed=0)
    make = lambda: algorithms.CHOCO(  # noqa: E731
        0.01, mixing.StaticSequence(graph, n), compression="rand_k:2"
    )
    plain = sm.run(make(), problem, participation.RandomEdge(graph), 80, progress=False,
                   metrics=("distance",), seed=5)  # fmt: skip
    flagged = make()
    flagged.rounds_repeat = True
    got = sm.run(flagged, problem, participation.RandomEdge(graph), 80, progress=False,
                 metrics=("distance",), seed=5)  # fmt: skip
    np.testing.assert_array_equal(got.server, plain.server)


class _ReportsX(algorithms.KGT):
    """K-GT reporting its x rows by overriding node_models (not by reported_block)."""

    rounds_repeat = True

    def node_models(self, z, ctx):
        return z[ctx.layout.slice("x")]


def test_a_method_whose_nodes_report_other_rows_says_its_ticks_are_built_in_full():
    """A method whose node_models reads other rows than its model block's (an override:
    the segment loop keeps the average of one declared block) never runs its gossip ticks
    in compiled segments: explain lists that as a slow path, while K-GT, which declares
    its reported block (reported_block), and DGD list none."""
    n = 12
    graph = nx.cycle_graph(n)
    problem = problems.LeastSquares.random(n, 4, 6, seed=0)
    seq = mixing.StaticSequence(graph, n)
    own = sm.explain(_ReportsX(0.01, seq, 2), problem, participation.RandomEdge(graph), 3)
    assert any("report other rows" in note.why for note in own.slow_paths)
    for method in (algorithms.KGT(0.01, seq, 2), algorithms.DGD(0.01, seq)):
        assert not sm.explain(method, problem, participation.RandomEdge(graph), 3).slow_paths

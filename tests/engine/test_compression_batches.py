"""CHOCO's compression step ``xhat + TopK_k(x - xhat)`` in the compiled batches and gossip
segments (stochmix.engine.runner.slot_form, ``TOP_K_STEP``): top-k's rule for ties (the
lowest indices, in NumPy and in the loop alike), the loop's step entry by entry, and
CHOCO's runs batched against the runs made round by round in every column of the Result;
a compressor that draws (or channel noise) keeps every round built.

Top-k keeps entries by magnitude, a discontinuous choice: runs whose rounding differs (the
batch loop sums a phase's terms in another order than SciPy's products) may keep another
entry where two magnitudes are within rounding of each other, and then drift apart as far
as a perturbation of one unit in the last place of ``x0`` moves the run itself. The runs
compared here are short enough (or continuous: no compression) to agree to 1e-10.
"""

import networkx as nx
import numpy as np
import pytest

import stochmix as sm
from stochmix import algorithms, mixing, participation, problems
from stochmix.engine.runner.slot_form import TOP_K_STEP
from stochmix.mixing.compression import TopK
from tests._segments import assert_same_run, batch_sizes
from tests.engine.test_kernel_batches import _loop, _one_phase

pytest.importorskip("numba")

N = 12
GRAPH = nx.random_regular_graph(3, N, seed=2)


def _top_k_by_hand(row: np.ndarray, k: int) -> np.ndarray:
    """The k entries of largest magnitude, ties to the lowest index: a stable sort."""
    keep = sorted(range(row.size), key=lambda j: -abs(row[j]))[:k]
    out = np.zeros_like(row)
    out[keep] = row[keep]
    return out


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_top_k_breaks_ties_toward_the_lowest_index(k):
    rng = np.random.default_rng(k)
    x = rng.integers(-3, 4, size=(200, 6)).astype(float)  # many ties, zeros, signs
    got = TopK(k)(x)
    want = np.array([_top_k_by_hand(row, k) for row in x])
    np.testing.assert_array_equal(got, want)
    assert ((got != 0) | (x == 0)).sum(axis=1).min() >= min(k, 6)  # k kept (zeros tie)


@pytest.mark.parametrize("k", [1, 2, 6, np.inf])
def test_the_loop_applies_the_step_as_numpy_does(k):
    """Row 0 (b, the target) becomes b + TopK_k(a - b), a row 1, bit for bit."""
    rng = np.random.default_rng(3)
    for trial in range(20):
        z = rng.integers(-3, 4, size=(2, 6)).astype(float)
        if trial % 2:
            z += rng.standard_normal((2, 6))
        arrays = _one_phase(0)
        arrays.update(k_kind=np.array([TOP_K_STEP]), k_par=np.array([float(k), 0.0]),
                      m_coef=np.array([-1.0, 1.0]))  # fmt: skip
        b, a = z[0].copy(), z[1].copy()
        want = b + (a - b if k == np.inf else TopK(int(k))((a - b)[None, :])[0])
        assert _loop(z, arrays) == 1
        np.testing.assert_array_equal(z[0], want)
        np.testing.assert_array_equal(z[1], a)


def _problem():
    return problems.LeastSquares.random(N, 6, rows_per_client=6, seed=5)


def _pair(compression, process, rounds, monkeypatch, **options):
    problem = _problem()

    def make():
        return algorithms.CHOCO(0.05 / problem.smoothness, mixing.StaticSequence(GRAPH),
                                compression=compression, **options)  # fmt: skip

    plain = sm.run(make(), problem, process, rounds, seed=3, compiled=False, progress=False)
    sizes = batch_sizes(monkeypatch)
    fast = sm.run(make(), problem, process, rounds, seed=3, compiled=True, progress=False)
    return plain, fast, sizes


@pytest.mark.parametrize("compression, rounds", [("top_k:2", 40), ("none", 200)])
def test_choco_rounds_of_every_node_run_batched(compression, rounds, monkeypatch):
    plain, fast, sizes = _pair(compression, participation.Full(N), rounds, monkeypatch)
    assert sum(sizes) == rounds - 3
    assert_same_run(plain, fast)


def test_choco_gossip_ticks_run_in_segments(monkeypatch):
    plain, fast, sizes = _pair("top_k:1", participation.RandomEdge(GRAPH), 120, monkeypatch)
    assert sum(sizes) >= 110
    assert_same_run(plain, fast)


@pytest.mark.parametrize(
    "compression, options", [("rand_k:2", {}), ("top_k:1", {"channel_noise": 0.01})]
)
def test_draws_keep_every_round_built(compression, options, monkeypatch):
    """A compressor that draws, or channel noise: the iterations do not repeat (each
    round draws anew), so nothing is batched and every round is built."""
    plain, fast, sizes = _pair(compression, participation.Full(N), 20, monkeypatch, **options)
    assert sizes == []
    method = algorithms.CHOCO(0.1, mixing.StaticSequence(GRAPH), compression=compression,
                              **options)  # fmt: skip
    assert method.rounds_repeat is False
    plan = sm.explain(method, _problem(), participation.Full(N), rounds=4, compiled=False)
    assert [r.source for r in plan.rounds] == ["built"] * 4
    why = sm.explain(method, _problem(), participation.RandomEdge(GRAPH), rounds=2)
    assert "rounds_repeat is False (for these arguments" in str(why)


def test_rounds_repeat_may_be_set_on_the_instance():
    method = algorithms.CHOCO(0.1, mixing.StaticSequence(GRAPH))
    assert method.rounds_repeat is True  # top-k, no noise
    method.rounds_repeat = False
    assert method.rounds_repeat is False
    other = algorithms.CHOCO(0.1, mixing.StaticSequence(GRAPH))
    assert other.rounds_repeat is True and other.fingerprint() != method.fingerprint()


def test_a_methods_changed_settings_are_read_afresh_by_the_next_run():
    """Whether the iterations repeat is asked afresh every run: a CHOCO whose compressor
    or noise changes after a run must not reuse plans as the first run's settings did."""
    problem = _problem()
    sequence = mixing.StaticSequence(GRAPH)
    method = algorithms.CHOCO(0.05 / problem.smoothness, sequence)
    sm.run(method, problem, participation.Full(N), 5, progress=False)  # top-k: repeats
    method.channel_noise = 0.05
    got = sm.run(method, problem, participation.Full(N), 30, seed=3, compiled=False,
                 progress=False)  # fmt: skip
    fresh = algorithms.CHOCO(0.05 / problem.smoothness, sequence, channel_noise=0.05)
    want = sm.run(fresh, problem, participation.Full(N), 30, seed=3, compiled=False,
                  progress=False)  # fmt: skip
    np.testing.assert_array_equal(got.server, want.server)


def test_a_reused_plans_row_map_draws_as_its_rounds_own():
    """A user who sets rounds_repeat on a CHOCO whose compressor draws gets its plans
    reused; each reused map then draws with its round's number, so the run is the one
    whose every round is built."""
    problem = _problem()

    def run(flag):
        method = algorithms.CHOCO(0.05 / problem.smoothness, mixing.StaticSequence(GRAPH),
                                  compression="rand_k:2")  # fmt: skip
        if flag:
            method.rounds_repeat = True
        return sm.run(method, problem, participation.Full(N), 30, seed=3, compiled=False,
                      progress=False)  # fmt: skip

    flagged = algorithms.CHOCO(0.1, mixing.StaticSequence(GRAPH), compression="rand_k:2")
    flagged.rounds_repeat = True
    plan = sm.explain(flagged, problem, participation.Full(N), rounds=4, compiled=False)
    assert [r.source for r in plan.rounds[2:]] == ["cache", "cache"]  # (reused: the case)
    np.testing.assert_array_equal(run(True).server, run(False).server)


def test_a_nan_entry_is_never_kept_by_numpy_or_the_loop():
    row = np.array([[np.nan, 1.0, 2.0, -3.0]])
    np.testing.assert_array_equal(TopK(1)(row), [[0.0, 0.0, 0.0, -3.0]])
    np.testing.assert_array_equal(TopK(2)(row), [[0.0, 0.0, 2.0, -3.0]])
    np.testing.assert_array_equal(TopK(3)(np.array([[np.nan, np.nan, 2.0, -3.0]])),
                                  [[0.0, 0.0, 2.0, -3.0]])  # fmt: skip
    for k in (1, 2, 3):
        z = np.array([[0.0, 0.0, 0.0, 0.0], [np.nan, 1.0, 2.0, -3.0]])
        arrays = _one_phase(0)
        arrays.update(k_kind=np.array([TOP_K_STEP]), k_par=np.array([float(k), 0.0]),
                      m_coef=np.array([-1.0, 1.0]))  # fmt: skip
        _loop(z, arrays)
        np.testing.assert_array_equal(z[0], TopK(k)(np.array([[np.nan, 1.0, 2.0, -3.0]]))[0])


def test_explain_says_a_decaying_push_sum_step_is_why_its_ticks_are_built():
    problem = _problem()
    method = algorithms.PushSum(0.05, mixing.StaticSequence(GRAPH), decay=0.5)
    text = str(sm.explain(method, problem, participation.RandomEdge(GRAPH), rounds=2))
    assert "step decays" in text and "elsewhere than its model rows" not in text


@pytest.mark.parametrize(
    "kind",
    ["dgd", "choco"] + [pytest.param(k, marks=pytest.mark.slow) for k in ("push_sum", "gt")],
)
def test_gossip_batches_record_consensus_every_tick(kind):
    """A gossip batch records ``consensus`` at every tick, as round by round (it recorded
    it at the batch's end only): a running sum of squares about a centre, updated by the
    rows each tick writes and taken afresh every n ticks or after a 1000-fold fall. Pure
    averaging drives it down twelve decades here; it agrees to the rounding of the
    round-by-round formula (whose own relative error grows as the spread falls below the
    model's scale)."""
    problem = problems.Quadratic.random(N, 3, seed=0)
    sequence = mixing.StaticSequence(GRAPH)
    make = {
        "dgd": lambda: algorithms.DGD(1e-9, sequence, form="cta"),
        "choco": lambda: algorithms.CHOCO(0.0, sequence, gamma=1.0, compression="none"),
        "push_sum": lambda: algorithms.PushSum(1e-3, sequence),
        "gt": lambda: algorithms.GradientTracking(0.05 / problem.smoothness, sequence),
    }[kind]
    x0 = np.random.default_rng(0).standard_normal((N, 3)) + 3.0
    runs = [
        sm.run(make(), problem, participation.RandomEdge(GRAPH), 1500, x0=x0, seed=1,
               metrics=("consensus",), progress=False, compiled=compiled).consensus
        for compiled in (False, True)
    ]  # fmt: skip
    assert not np.isnan(runs[1]).any()
    np.testing.assert_allclose(runs[1], runs[0], rtol=1e-6, atol=1e-15 * runs[0][0])

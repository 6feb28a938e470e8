"""Participation processes, weight rules and statistics."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stochmix.participation import (
    Bernoulli,
    Full,
    Markov,
    ParticipationProcess,
    Periodic,
    Regularized,
    Trace,
    UniformSample,
    WeightedSample,
    empirical_probabilities,
    mean_intervals,
    participation_intervals,
    period_averaged_weights,
    unbiased_weights,
    uniform_weights,
    weight_variance,
)
from tests import examples

BAD = (ValueError, TypeError)


def assert_close_frequencies(freq, p, rounds, inflation=1.0):
    """|freq - p| within 5 standard errors of a mean of ``rounds`` Bernoulli(p) draws."""
    se = inflation * np.sqrt(np.maximum(p * (1 - p), 1e-12) / rounds)
    worst = np.max(np.abs(freq - p) / se)
    assert worst < 5.0, f"frequencies off by {worst:.1f} standard errors"


def all_processes():
    rng = np.random.default_rng(7)
    return [
        Full(6),
        UniformSample(20, 4),
        WeightedSample(rng.random(20) + 0.1, 3),
        WeightedSample(rng.random(400) + 0.1, 5),  # the i.i.d.-draws path
        Bernoulli(rng.uniform(0.2, 0.9, 20)),
        Bernoulli(0.05, n_clients=30),  # the binomial-count path
        Regularized(20, 6),
        Periodic(4, 3, n_clients=20),
        Periodic(4, 3, n_clients=20, size=2, selection="uniform", p_available=0.7),
        Markov(0.3, 0.2, n_clients=20),
    ]


# ----------------------------------------------------------------------------- marginals


@pytest.mark.parametrize(
    "process",
    [
        UniformSample(50, 7),
        Bernoulli.heterogeneous(50, 0.05, 0.95, seed=3),
        Bernoulli(0.07, n_clients=50),
        Bernoulli(1.0, n_clients=5),
        WeightedSample(np.linspace(0.0, 3.0, 30), 1),
        Regularized(7, 3),  # size does not divide N: 1/3, not 3/7
        Regularized(12, 4),
        Periodic(3, 5, n_clients=12, p_available=0.6),
        Periodic(2, 4, n_clients=10, size=2),  # regularized, chunks do not divide the window
        Periodic(2, 4, n_clients=10, size=3, selection="uniform"),
        Periodic(np.array([5, 5, 9, 9, 9, 2, 5, 2, 9, 9]), 6, size=2),  # unequal groups
    ],
    ids=repr,
)
def test_empirical_frequencies_match_probabilities(process):
    rounds = 6000
    freq = process.estimate_probabilities(rounds, seed=11)
    assert_close_frequencies(freq, process.probabilities, rounds)


def test_full_everyone_every_round():
    masks = Full(5).sample(3, seed=0)
    assert masks.dtype == bool and masks.shape == (3, 5) and masks.all()
    np.testing.assert_array_equal(Full(5).probabilities, np.ones(5))


def test_periodic_regularized_probability_formula():
    # n_g = 5, S = 2: chunks of 2, 2, 1 (c = 3); a window of A = 4 has one complete
    # sub-cycle and one extra chunk of 2 out of 5: 1.4 participations per window of 4
    # rounds, over a cycle of 8 rounds.
    process = Periodic(2, 4, n_clients=10, size=2)
    np.testing.assert_allclose(process.probabilities, 1.4 / 8)


def test_weighted_sample_inclusion_probabilities_exact():
    w = np.array([1.0, 2.0, 3.0, 0.0, 4.0])
    total = w.sum()
    # P(i in S) for two successive draws ∝ w (numpy's choice(p=, replace=False) law).
    exact = np.array(
        [
            w[i] / total + sum(w[j] / total * w[i] / (total - w[j]) for j in range(5) if j != i)
            for i in range(5)
        ]
    )
    process = WeightedSample(w, 2)
    assert process.probabilities is None
    rng = np.random.default_rng(5)
    rounds = 20000
    for draw in (process._by_keys, lambda r: process._by_draws(r, batches=50)):
        counts = np.zeros(5)
        for _ in range(rounds):
            chosen = draw(rng)
            assert chosen.size == 2 and np.unique(chosen).size == 2
            counts[chosen] += 1
        assert counts[3] == 0
        assert_close_frequencies(counts / rounds, exact, rounds)


def test_weighted_sample_exact_cases_and_fallback():
    w = np.array([0.0, 1.0, 2.0])
    np.testing.assert_allclose(WeightedSample(w, 1).probabilities, w / 3)
    full = WeightedSample(w, 2)
    np.testing.assert_array_equal(full.probabilities, [0.0, 1.0, 1.0])
    np.testing.assert_array_equal(full.sample(3, seed=0), np.tile([False, True, True], (3, 1)))
    # Weights concentrated on one client: the i.i.d.-draws path gives up, keys take over.
    heavy = np.ones(400)
    heavy[0] = 1e9
    masks = WeightedSample(heavy, 10).sample(20, seed=1)
    assert (masks.sum(axis=1) == 10).all() and masks[:, 0].all()


def test_estimate_probabilities_without_closed_form():
    process = WeightedSample(np.array([1.0, 1.0, 1.0, 1.0]), 2)  # symmetric: 1/2 each
    rounds = 4000
    assert_close_frequencies(process.estimate_probabilities(rounds, seed=2), 0.5, rounds)


# ------------------------------------------------------------------------- streams, seeds


@pytest.mark.parametrize("process", all_processes(), ids=repr)
def test_same_seed_same_stream_different_seed_different(process):
    a = process.sample(30, seed=123)
    b = process.sample(30, seed=123)
    c = process.sample(30, seed=124)
    assert a.shape == (30, process.n_clients) and a.dtype == bool
    np.testing.assert_array_equal(a, b)
    if not isinstance(process, Full):
        assert not np.array_equal(a, c)
    # Each call to masks starts afresh, even when two streams are consumed interleaved.
    s1, s2 = process.masks(123), process.masks(123)
    for t in range(30):
        np.testing.assert_array_equal(next(s1), a[t])
        np.testing.assert_array_equal(next(s2), a[t])


def test_seed_kinds():
    process = UniformSample(40, 5)
    seq = np.random.SeedSequence(9)
    np.testing.assert_array_equal(process.sample(5, seed=seq), process.sample(5, seed=9))
    np.testing.assert_array_equal(process.sample(5, seed=np.int64(9)), process.sample(5, seed=9))
    rng = np.random.default_rng(9)
    first, second = process.sample(5, seed=rng), process.sample(5, seed=rng)
    assert not np.array_equal(first, second)  # a Generator is used, and advanced, as is
    with pytest.raises(TypeError, match="seed"):
        process.masks(seed="nine")


def test_masks_are_fresh_arrays():
    for process in all_processes():
        stream = process.masks(0)
        first = next(stream)
        kept = first.copy()
        first[:] = ~first
        second = next(stream)
        assert second is not first
        np.testing.assert_array_equal(process.sample(1, seed=0)[0], kept)


def test_uniform_sample_exact_size_large_population():
    process = UniformSample(10**6, 10**4)
    mask = next(process.masks(0))
    assert mask.shape == (10**6,) and mask.sum() == 10**4


def test_repr_is_readable():
    assert repr(UniformSample(10, 3)) == "UniformSample(n_clients=10, size=3)"
    assert repr(Bernoulli(0.5, n_clients=4)) == "Bernoulli(p=0.5, n_clients=4)"
    assert "offset=random" in repr(Periodic(2, 3, n_clients=4))
    assert "Trace(rounds=2, n_clients=3" in repr(Trace(np.zeros((2, 3), dtype=bool)))


# ----------------------------------------------------------------------------- Regularized


@pytest.mark.parametrize("n, size", [(10, 3), (12, 4), (5, 5), (6, 1)])
def test_regularized_once_per_cycle(n, size):
    process = Regularized(n, size)
    cycle = process.cycle_length
    assert cycle == -(-n // size)
    masks = process.sample(5 * cycle, seed=4).reshape(5, cycle, n)
    np.testing.assert_array_equal(masks.sum(axis=1), 1)  # every client once per cycle
    sizes = masks.sum(axis=2)
    np.testing.assert_array_equal(sizes[:, :-1], size)
    np.testing.assert_array_equal(sizes[:, -1], n - (cycle - 1) * size)
    # Fresh permutations: the cycles are not all the same.
    assert cycle == 1 or any(not np.array_equal(masks[0], masks[k]) for k in range(1, 5))


# -------------------------------------------------------------------------------- Periodic


def test_periodic_windows_fixed_offset():
    process = Periodic(3, 4, offset=0, n_clients=6)
    assert process.cycle_length == 12
    masks = process.sample(24, seed=0)
    groups = [
        np.array([1, 1, 0, 0, 0, 0]),
        np.array([0, 0, 1, 1, 0, 0]),
        np.array([0, 0, 0, 0, 1, 1]),
    ]
    for t in range(24):
        np.testing.assert_array_equal(masks[t], groups[(t // 4) % 3].astype(bool))
    shifted = Periodic(3, 4, offset=5, n_clients=6).sample(12, seed=0)
    np.testing.assert_array_equal(shifted, np.roll(masks[:12], -5, axis=0))


def test_periodic_random_offset_and_run_lengths():
    process = Periodic(6, 1, n_clients=6)  # one client per group, one round each
    starts = np.array([np.flatnonzero(next(process.masks(s)))[0] for s in range(600)])
    counts = np.bincount(starts, minlength=6)
    assert counts.min() > 50  # uniform over the 6 offsets (expected 100 each)

    process = Periodic(4, 5, n_clients=8)
    for seed in range(20):
        masks = process.sample(60, seed=seed)
        group = np.argmax(masks, axis=1) // 2
        assert (masks.sum(axis=1) == 2).all()
        change = np.flatnonzero(np.diff(group)) + 1
        runs = np.diff(np.concatenate([[0], change, [60]]))
        assert 1 <= runs[0] <= 5 and (runs[1:-1] == 5).all() and runs[-1] <= 5
        assert ((np.diff(group)[change - 1]) % 4 == 1).all()  # groups in turn


def test_periodic_explicit_labels_order():
    labels = np.array([7, 3, 7, 3, 11])
    process = Periodic(labels, 2, offset=0)
    assert process.n_groups == 3
    np.testing.assert_array_equal(process.group_sizes, [2, 2, 1])
    masks = process.sample(6, seed=0)
    np.testing.assert_array_equal(masks[0], labels == 3)
    np.testing.assert_array_equal(masks[2], labels == 7)
    np.testing.assert_array_equal(masks[4], labels == 11)


def test_periodic_wang_ji_setup():
    majority = np.repeat(np.arange(10), 25)
    process = Periodic.wang_ji(majority, offset=0)
    assert process.n_clients == 250 and process.n_groups == 5 and process.cycle_length == 500
    masks = process.sample(500, seed=3)
    assert (masks.sum(axis=1) == 10).all()
    for g in range(5):
        window = masks[100 * g : 100 * (g + 1)]
        members = majority // 2 == g
        assert not window[:, ~members].any()
        np.testing.assert_array_equal(window[:, members].sum(axis=0), 20)
        # Regularized: each member once in every 5 consecutive rounds of the window.
        np.testing.assert_array_equal(window[:, members].reshape(20, 5, 50).sum(axis=1), 1)
    np.testing.assert_allclose(process.probabilities, 1 / 25)
    default = Periodic.wang_ji()
    assert default.n_clients == 250 and default.n_groups == 5 and default.size == 10


# ---------------------------------------------------------------------------------- Markov


def test_markov_stationary_and_transitions():
    p_on, p_off = 0.2, 0.3
    process = Markov(p_on, p_off, n_clients=2000)
    np.testing.assert_allclose(process.probabilities, 0.4)
    masks = process.sample(300, seed=8)
    # Started from the stationary law.
    assert_close_frequencies(masks[0].mean(), 0.4, 2000)
    before, after = masks[:-1], masks[1:]
    off, on = ~before, before
    n_off, n_on = off.sum(), on.sum()
    assert_close_frequencies((off & after).sum() / n_off, p_on, n_off)
    assert_close_frequencies((on & ~after).sum() / n_on, p_off, n_on)
    # Per-client stationary frequencies (correlated rounds: inflate the standard error).
    rng = np.random.default_rng(1)
    p_on_i, p_off_i = rng.uniform(0.1, 0.6, 40), rng.uniform(0.1, 0.6, 40)
    het = Markov(p_on_i, p_off_i)
    lam = 1 - p_on_i - p_off_i
    rounds = 5000
    assert_close_frequencies(
        het.estimate_probabilities(rounds, seed=2),
        het.probabilities,
        rounds,
        inflation=np.sqrt((1 + lam) / (1 - lam)),
    )


def test_markov_always_on_when_p_off_zero():
    masks = Markov(0.5, 0.0, n_clients=10).sample(5, seed=0)
    assert masks.all()


# ----------------------------------------------------------------------------------- Trace


def test_trace_replay_and_end(tmp_path):
    recorded = np.array([[1, 0, 1], [0, 0, 0], [1, 1, 0]], dtype=bool)
    trace = Trace(recorded)
    assert trace.probabilities is None and trace.n_clients == 3 and trace.rounds == 3
    stream = trace.masks()
    for row in recorded:
        np.testing.assert_array_equal(next(stream), row)
    with pytest.raises(ValueError, match="trace length 3"):
        next(stream)
    with pytest.raises(ValueError, match="trace length 3"):
        trace.sample(4)
    np.testing.assert_array_equal(
        Trace(recorded, repeat=True).sample(7), recorded[[0, 1, 2, 0, 1, 2, 0]]
    )
    np.testing.assert_allclose(empirical_probabilities(trace.masks_array), [2 / 3, 1 / 3, 1 / 3])
    recorded[0, 0] = False  # the trace keeps its own copy
    assert trace.sample(1)[0, 0]

    path = tmp_path / "trace.npy"
    np.save(path, recorded)
    np.testing.assert_array_equal(Trace(path).sample(3), recorded)
    np.testing.assert_array_equal(Trace(str(path)).sample(3), recorded)


def test_trace_bad_inputs(tmp_path):
    with pytest.raises(TypeError, match="masks"):
        Trace(np.ones((2, 3), dtype=np.int64))
    with pytest.raises(BAD, match="masks"):
        Trace(np.ones(3, dtype=bool))
    with pytest.raises(BAD, match="masks"):
        Trace(np.ones((0, 3), dtype=bool))
    with pytest.raises(ValueError, match="masks"):
        Trace(tmp_path / "missing.npy")
    np.save(tmp_path / "ints.npy", np.ones((2, 2)))
    with pytest.raises(TypeError, match="masks"):
        Trace(tmp_path / "ints.npy")


# ------------------------------------------------------------------------------ bad inputs


@pytest.mark.parametrize(
    "make, name",
    [
        (lambda: Full(0), "n_clients"),
        (lambda: Full(2.0), "n_clients"),
        (lambda: UniformSample(10, 0), "size"),
        (lambda: UniformSample(10, -3), "size"),
        (lambda: UniformSample(10, 11), "size"),
        (lambda: UniformSample(0, 1), "n_clients"),
        (lambda: WeightedSample(np.array([1.0, -1.0]), 1), "weights"),
        (lambda: WeightedSample(np.array([0.0, 0.0]), 1), "weights"),
        (lambda: WeightedSample(np.array([1.0, np.nan]), 1), "weights"),
        (lambda: WeightedSample(np.array([1.0, 0.0, 2.0]), 3), "size"),
        (lambda: WeightedSample(np.array([1.0, 2.0]), 0), "size"),
        (lambda: Bernoulli(0.0, n_clients=3), r"\bp\b"),
        (lambda: Bernoulli(1.5, n_clients=3), r"\bp\b"),
        (lambda: Bernoulli(np.array([0.5, -0.1]), n_clients=2), r"\bp\b"),
        (lambda: Bernoulli(np.array([0.5, np.nan])), r"\bp\b"),
        (lambda: Bernoulli(0.5), "n_clients"),
        (lambda: Bernoulli(np.array([0.5, 0.5]), n_clients=3), "n_clients"),
        (lambda: Bernoulli.heterogeneous(5, 0.0, 0.5), "low"),
        (lambda: Bernoulli.heterogeneous(5, 0.5, 1.2), "high"),
        (lambda: Bernoulli.heterogeneous(5, 0.6, 0.5), "high"),
        (lambda: Regularized(5, 0), "size"),
        (lambda: Regularized(5, 6), "size"),
        (lambda: Periodic(3, 2), "n_clients"),
        (lambda: Periodic(0, 2, n_clients=4), "groups"),
        (lambda: Periodic(5, 2, n_clients=4), "groups"),
        (lambda: Periodic(np.array([0.5, 1.0]), 2), "groups"),
        (lambda: Periodic(np.array([0, 1]), 2, n_clients=3), "n_clients"),
        (lambda: Periodic(2, 0, n_clients=4), "active_rounds"),
        (lambda: Periodic(2, 3, offset=6, n_clients=4), "offset"),
        (lambda: Periodic(2, 3, offset=-1, n_clients=4), "offset"),
        (lambda: Periodic(2, 3, n_clients=4, p_available=0.0), "p_available"),
        (lambda: Periodic(2, 3, n_clients=4, p_available=1.1), "p_available"),
        (lambda: Periodic(2, 3, n_clients=4, size=0), "size"),
        (lambda: Periodic(2, 3, n_clients=4, size=1, selection="random"), "selection"),
        (lambda: Periodic.wang_ji(np.array([-1, 2])), "majority_labels"),
        (lambda: Markov(0.0, 0.5, n_clients=3), "p_on"),
        (lambda: Markov(0.5, 1.5, n_clients=3), "p_off"),
        (lambda: Markov(0.5, -0.1, n_clients=3), "p_off"),
        (lambda: Markov(np.array([0.5, 0.5]), np.array([0.5, 0.5, 0.5])), "p_off"),
        (lambda: Markov(0.5, 0.5), "n_clients"),
        (lambda: Trace(np.ones((2, 2), dtype=bool), repeat="yes"), "repeat"),
        (lambda: UniformSample(5, 2).sample(0), "rounds"),
        (lambda: UniformSample(5, 2).estimate_probabilities(-1), "rounds"),
    ],
)
def test_bad_inputs_name_the_argument(make, name):
    with pytest.raises(BAD, match=name):
        make()


# ------------------------------------------------------------------------------ statistics


def reference_intervals(masks):
    out = []
    for i in range(masks.shape[1]):
        rounds = np.flatnonzero(masks[:, i])
        out.append(np.diff(rounds))
    return out


def test_participation_intervals_and_means():
    masks = np.array(
        [[1, 0, 1, 0], [0, 0, 1, 0], [1, 0, 1, 1], [0, 0, 1, 0], [0, 1, 1, 0], [1, 0, 1, 0]],
        dtype=bool,
    )
    intervals = participation_intervals(masks)
    assert len(intervals) == 4
    np.testing.assert_array_equal(intervals[0], [2, 3])
    assert intervals[1].size == 0 and intervals[3].size == 0
    np.testing.assert_array_equal(intervals[2], [1, 1, 1, 1, 1])
    np.testing.assert_allclose(mean_intervals(masks), [2.5, np.nan, 1.0, np.nan])
    np.testing.assert_allclose(empirical_probabilities(masks), [0.5, 1 / 6, 1.0, 1 / 6])

    random_masks = Bernoulli.heterogeneous(30, 0.02, 0.6, seed=0).sample(200, seed=1)
    for got, want in zip(
        participation_intervals(random_masks), reference_intervals(random_masks), strict=True
    ):
        np.testing.assert_array_equal(got, want)
    expected = [w.mean() if w.size else np.nan for w in reference_intervals(random_masks)]
    np.testing.assert_allclose(mean_intervals(random_masks), expected)


def test_mean_interval_of_bernoulli_is_inverse_probability():
    process = Bernoulli(np.array([0.1, 0.25, 0.5, 1.0]))
    means = mean_intervals(process.sample(20000, seed=3))
    np.testing.assert_allclose(means, 1 / process.probabilities, rtol=0.05)


def test_weight_variance():
    n, size = 12, 4
    masks = Regularized(n, size).sample(60, seed=0)
    weights = np.zeros(masks.shape)
    for t, mask in enumerate(masks):
        weights[t, mask] = uniform_weights(np.flatnonzero(mask))
    cycle = n // size
    assert weight_variance(weights, cycle) == pytest.approx(0.0, abs=1e-30)
    assert weight_variance(weights, cycle, center=1 / n) == pytest.approx(0.0, abs=1e-30)
    assert weight_variance(weights, 2) > 0
    qbar = period_averaged_weights(weights, 7)
    assert qbar.shape == (60 // 7, n)
    np.testing.assert_allclose(qbar[1], weights[7:14].mean(axis=0))

    # Independent participation: the variance shrinks like 1/P.
    indep = UniformSample(n, size).sample(4000, seed=1) / size
    v1, v10 = weight_variance(indep, 1), weight_variance(indep, 10)
    assert 0.06 < v10 / v1 < 0.16

    with pytest.raises(BAD, match="period"):
        weight_variance(weights, 0)
    with pytest.raises(BAD, match="period"):
        weight_variance(weights, 61)
    with pytest.raises(BAD, match="weights_per_round"):
        weight_variance(np.full((4, 2), np.nan), 2)


def test_statistics_bad_masks():
    with pytest.raises(BAD, match="masks"):
        empirical_probabilities(np.ones((3, 2), dtype=np.int64))
    with pytest.raises(BAD, match="masks"):
        mean_intervals(np.ones(3, dtype=bool))
    with pytest.raises(BAD, match="masks"):
        participation_intervals(np.zeros((0, 3), dtype=bool))


# --------------------------------------------------------------------------------- weights


def test_uniform_and_unbiased_weights():
    np.testing.assert_allclose(uniform_weights(np.array([0, 3, 5])), [1 / 3] * 3)
    empty = uniform_weights(np.array([], dtype=np.int64))
    assert empty.shape == (0,) and empty.dtype == float
    p = np.array([0.5, 0.25, 1.0, 0.1])
    np.testing.assert_allclose(unbiased_weights(np.array([1, 3]), p, 4), [1 / (4 * 0.25), 1 / 0.4])
    assert unbiased_weights(np.array([], dtype=np.int64), p, 4).shape == (0,)
    # Unbiased: E[sum_{i in S} q_i x_i] = mean(x), exactly, under Bernoulli(p).
    x = np.array([3.0, -1.0, 2.0, 7.0])
    all_q = unbiased_weights(np.arange(4), p, 4)
    assert np.sum(p * all_q * x) == pytest.approx(x.mean())


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda: uniform_weights(np.array([3, 1])), "participants"),
        (lambda: uniform_weights(np.array([1, 1])), "participants"),
        (lambda: uniform_weights(np.array([-1, 2])), "participants"),
        (lambda: uniform_weights(np.array([[1, 2]])), "participants"),
        (lambda: unbiased_weights(np.array([0, 4]), np.full(4, 0.5), 4), "participants"),
        (lambda: unbiased_weights(np.array([2, 0]), np.full(4, 0.5), 4), "participants"),
        (lambda: unbiased_weights(np.array([0]), np.full(3, 0.5), 4), "probabilities"),
        (lambda: unbiased_weights(np.array([0]), np.array([0.5, 0.0]), 2), "probabilities"),
        (lambda: unbiased_weights(np.array([0]), np.array([0.5, 1.5]), 2), "probabilities"),
        (lambda: unbiased_weights(np.array([0]), np.full(2, 0.5), 0), "n_clients"),
    ],
)
def test_weights_bad_inputs(call, name):
    with pytest.raises(BAD, match=name):
        call()


# ------------------------------------------------------------------------------ properties


@settings(max_examples=examples(30), deadline=None)
@given(
    p=st.lists(st.floats(min_value=1e-6, max_value=1.0), min_size=1, max_size=40),
    seed=st.integers(0, 2**32 - 1),
)
def test_property_bernoulli_masks(p, seed):
    process = Bernoulli(np.array(p))
    assert isinstance(process, ParticipationProcess)
    np.testing.assert_array_equal(process.probabilities, p)
    masks = process.sample(3, seed=seed)
    assert masks.shape == (3, len(p)) and masks.dtype == bool
    assert masks[:, np.array(p) == 1.0].all()


@settings(max_examples=examples(30), deadline=None)
@given(data=st.data())
def test_property_uniform_and_regularized_sizes(data):
    n = data.draw(st.integers(1, 300), label="n")
    size = data.draw(st.integers(1, n), label="size")
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    masks = UniformSample(n, size).sample(4, seed=seed)
    assert (masks.sum(axis=1) == size).all()
    reg = Regularized(n, size)
    cycle = reg.cycle_length
    counts = reg.sample(2 * cycle, seed=seed).reshape(2, cycle, n).sum(axis=1)
    assert (counts == 1).all()


@settings(max_examples=examples(20), deadline=None)
@given(
    groups=st.integers(1, 6),
    active=st.integers(1, 6),
    extra=st.integers(0, 10),
    size=st.one_of(st.none(), st.integers(1, 4)),
    seed=st.integers(0, 2**16),
)
def test_property_periodic_one_group_at_a_time(groups, active, extra, size, seed):
    n = groups + extra
    if size is not None:
        size = min(size, -(-n // groups))  # at most the largest group
    process = Periodic(groups, active, n_clients=n, size=size)
    masks = process.sample(2 * process.cycle_length, seed=seed)
    for mask in masks:
        present = np.unique(process.labels[mask])
        assert present.size <= 1
    # Over any whole number of cycles the frequencies equal the probabilities when every
    # group's selection completes whole sub-cycles; with size=None always.
    if size is None:
        np.testing.assert_allclose(masks.mean(axis=0), process.probabilities)


def test_all_public_names_exported():
    import stochmix.participation as part

    for name in part.__all__:
        assert hasattr(part, name)
    assert isinstance(list(itertools.islice(Full(2).masks(), 2)), list)


@pytest.mark.parametrize(
    "process",
    [
        Full(7),
        UniformSample(50, 6),
        WeightedSample(np.linspace(1, 5, 20), 4),
        Bernoulli(np.linspace(0.05, 0.9, 30)),
        Regularized(11, 3),
        Markov(0.3, 0.2, n_clients=9),
    ],
    ids=repr,
)
def test_participant_indices_are_the_masks_rounds(process):
    masks = process.masks(3)
    indices = process.participants(3)
    for _ in range(25):
        got = next(indices)
        np.testing.assert_array_equal(got, np.flatnonzero(next(masks)))
        assert got.dtype == np.int64 or np.issubdtype(got.dtype, np.integer)

"""Participant sets drawn at a cost proportional to the participants (``draws="fast"``) and
the streams of stochmix 0.1.0 kept bit for bit (``draws="legacy"``).

The statistical tests use fixed seeds, so they are deterministic, and thresholds of about
five standard deviations: a draw with the wrong law fails them, a right one passes.
"""

from __future__ import annotations

import hashlib
import itertools
from math import comb

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stochmix import config, participation
from stochmix._fingerprint import digest
from stochmix.participation import (
    Bernoulli,
    Periodic,
    Regularized,
    UniformSample,
    WeightedSample,
    processes,
)
from tests import examples

Z = 5.0  # standard deviations allowed in the frequency checks


@pytest.fixture(params=["skips", "numpy"])
def small_sets(request, monkeypatch):
    """Small uniform sets both ways: geometric skips (forced) and NumPy's draw."""
    if request.param == "skips":
        monkeypatch.setattr(processes, "_FLOYD_SIZE", 0)
    return request.param


# ------------------------------------------------------------- the 0.1.0 streams, copied
def _old_uniform(n, size, seed):
    """stochmix 0.1.0 ``UniformSample._index_stream``."""
    rng = np.random.default_rng(seed)
    while True:
        yield np.sort(rng.choice(n, size, replace=False, shuffle=False))


def _old_bernoulli(p, seed):
    """stochmix 0.1.0 ``Bernoulli._stream`` (masks)."""
    rng = np.random.default_rng(seed)
    n = p.size
    homogeneous = bool(np.all(p == p[0]))
    if homogeneous and p[0] <= 0.1:
        while True:
            count = int(rng.binomial(n, float(p[0])))
            mask = np.zeros(n, dtype=bool)
            mask[rng.choice(n, count, replace=False, shuffle=False)] = True
            yield mask
    elif homogeneous and p[0] == 1.0:
        while True:
            yield np.ones(n, dtype=bool)
    else:
        while True:
            yield rng.random(n) < p


def _digest(stream, rounds=20):
    h = hashlib.sha256()
    for array in itertools.islice(stream, rounds):
        h.update(np.asarray(array).tobytes())
        h.update(b"|")
    return h.hexdigest()[:16]


# Digests of 20 rounds from seed 7, recorded with the code of stochmix 0.1.0 before the
# fast draws existed: (masks, participants).
RECORDED = {
    "uniform_20000_500": ("a42dbe6319da4007", "2537a1b6572ffa3d"),
    "uniform_1000_300": ("b2ae60f2ed55611d", "73b74ba6557bee5d"),
    "bern_hom_0.05": ("a0bfdbe22b25450b", "e2d77683a854ff81"),
    "bern_hom_0.5": ("bca0f382a4001dae", "1fdfcddc0a0448c1"),
    "bern_het": ("83d03b8a292f2ade", "588dc64a461b2913"),
    "weighted": ("a16f17f9db64e18d", "d230fe2d0afcde6b"),
    "regularized": ("223d924b36fef14e", "3d2fa8bf55ef6471"),
    "periodic": ("da221cd0bb6b2627", "3d2e80d15ea67e22"),
}


def _recorded_processes():
    legacy = {"draws": "legacy"}
    return {
        "uniform_20000_500": UniformSample(20000, 500, **legacy),
        "uniform_1000_300": UniformSample(1000, 300, **legacy),
        "bern_hom_0.05": Bernoulli(0.05, n_clients=3000, **legacy),
        "bern_hom_0.5": Bernoulli(0.5, n_clients=3000, **legacy),
        "bern_het": Bernoulli.heterogeneous(3000, 0.005, 0.2, seed=1, **legacy),
        # no draws option: their streams are unchanged
        "weighted": WeightedSample(np.arange(1, 2001), 50),
        "regularized": Regularized(1000, 70),
        "periodic": Periodic(5, 3, n_clients=100, size=7),
    }


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_legacy_streams_match_the_recorded_ones(name):
    process = _recorded_processes()[name]
    masks, indices = RECORDED[name]
    assert _digest(process.masks(7)) == masks
    assert _digest(process.participants(7)) == indices


@pytest.mark.parametrize(("n", "size"), [(20000, 500), (20000, 9000), (50, 50), (7, 1)])
@pytest.mark.parametrize("seed", [0, 3])
def test_legacy_uniform_is_the_old_algorithm(n, size, seed):
    process = UniformSample(n, size, draws="legacy")
    old = _old_uniform(n, size, seed)
    for new_idx, new_mask, old_idx in zip(
        itertools.islice(process.participants(seed), 10), process.masks(seed), old, strict=False
    ):
        np.testing.assert_array_equal(new_idx, old_idx)
        assert new_idx.dtype == np.int64
        np.testing.assert_array_equal(np.flatnonzero(new_mask), old_idx)


@pytest.mark.parametrize(
    "p",
    [
        np.full(500, 0.05),
        np.full(500, 0.1),
        np.full(500, 0.4),
        np.ones(30),
        np.linspace(0.01, 1.0, 400),
        np.r_[np.full(300, 1e-3), 1.0],
    ],
    ids=["sparse", "edge", "dense", "ones", "ramp", "outlier"],
)
def test_legacy_bernoulli_is_the_old_algorithm(p):
    process = Bernoulli(p, draws="legacy")
    for new_mask, new_idx, old in itertools.islice(
        zip(process.masks(11), process.participants(11), _old_bernoulli(p, 11), strict=False), 10
    ):
        np.testing.assert_array_equal(new_mask, old)
        np.testing.assert_array_equal(new_idx, np.flatnonzero(old))


# ------------------------------------------------------------------------ shape of sets
def _check_sets(process, rounds, seed, size=None):
    n = process.n_clients
    for chosen in itertools.islice(process.participants(seed), rounds):
        assert chosen.dtype == np.int64 and chosen.ndim == 1
        assert np.all(np.diff(chosen) > 0)  # sorted and distinct
        if chosen.size:
            assert 0 <= chosen[0] and chosen[-1] < n
        if size is not None:
            assert chosen.size == size


@settings(max_examples=examples(80), deadline=None)
@given(
    n=st.integers(1, 5000),
    fraction=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**32 - 1),
    skips=st.booleans(),
)
def test_uniform_sets_have_exact_size_sorted_distinct_in_range(n, fraction, seed, skips):
    size = max(1, round(fraction * n))
    default = processes._FLOYD_SIZE
    processes._FLOYD_SIZE = 0 if skips else default
    try:
        _check_sets(UniformSample(n, size), 5, seed, size=size)
    finally:
        processes._FLOYD_SIZE = default


@settings(max_examples=examples(60), deadline=None)
@given(
    p=st.lists(st.floats(1e-6, 1.0), min_size=1, max_size=300),
    seed=st.integers(0, 2**32 - 1),
)
def test_bernoulli_sets_sorted_distinct_in_range(p, seed):
    process = Bernoulli(np.array(p))
    _check_sets(process, 5, seed)
    p = np.array(p)
    for chosen in itertools.islice(process.participants(seed), 5):
        assert np.all(np.isin(np.flatnonzero(p == 1.0), chosen))  # p_i = 1 always there


@pytest.mark.parametrize("n", [1, 2, 10**6])
def test_uniform_extremes(n, small_sets):
    _check_sets(UniformSample(n, 1), 3, 0, size=1)
    if n <= 10:
        _check_sets(UniformSample(n, n), 3, 0, size=n)


# ----------------------------------------------------------------------------- the law
@pytest.mark.parametrize(("n", "size"), [(12, 5), (400, 30)])
def test_uniform_marginals_and_pairs(n, size, small_sets):
    rounds = 20000 if n < 100 else 4000
    masks = UniformSample(n, size).sample(rounds, seed=1)
    assert np.all(masks.sum(axis=1) == size)
    p = size / n
    freq = masks.mean(axis=0)
    assert np.all(np.abs(freq - p) <= Z * np.sqrt(p * (1 - p) / rounds))
    if n > 100:
        return
    pair = size * (size - 1) / (n * (n - 1))
    both = (masks.T.astype(float) @ masks) / rounds
    off = both[~np.eye(n, dtype=bool)]
    assert np.all(np.abs(off - pair) <= Z * np.sqrt(pair * (1 - pair) / rounds))


@pytest.mark.parametrize(("n", "size"), [(6, 2), (6, 4), (9, 3)])
def test_uniform_every_subset_equally_likely(n, size, small_sets):
    """Chi-square over all C(n, size) subsets."""
    rounds = 12000
    sets = itertools.islice(UniformSample(n, size).participants(5), rounds)
    codes = np.array([int(np.sum(2**s)) for s in sets])
    _, counts = np.unique(codes, return_counts=True)
    cells = comb(n, size)
    assert counts.size == cells
    expected = rounds / cells
    chi2 = np.sum((counts - expected) ** 2 / expected)
    dof = cells - 1
    assert chi2 < dof + Z * np.sqrt(2 * dof), chi2


def test_uniform_smallest_member_law_large_n(small_sets):
    """Large N: P(min >= c) = C(N - c, S) / C(N, S), chi-square over eight bins."""
    n, size, rounds = 40000, 3, 12000
    lows = np.array(
        [s[0] for s in itertools.islice(UniformSample(n, size).participants(6), rounds)]
    )
    cuts = np.linspace(0, n, 9).astype(int)
    survive = np.array([comb(n - c, size) / comb(n, size) for c in cuts])
    expected = rounds * (survive[:-1] - survive[1:])
    counts = np.histogram(lows, bins=cuts)[0]
    chi2 = np.sum((counts - expected) ** 2 / expected)
    assert chi2 < 7 + Z * np.sqrt(14), chi2


def _bernoulli_cases():
    rng = np.random.default_rng(0)
    mixed = np.r_[rng.uniform(0.05, 0.2, 300), np.full(2000, 1e-3), [1.0, 1.0], np.full(5, 0.5)]
    rng.shuffle(mixed)
    return {
        # single group: p within a factor of about four
        "single": rng.uniform(0.05, 0.2, 400),
        # several groups (1 next to tiny p): grouped by powers of two
        "grouped": mixed,
        "outlier": np.r_[np.full(2000, 2e-3), 1.0, np.full(2000, 2e-3)],
        # most clients candidates: one uniform per client
        "dense": rng.uniform(0.3, 0.9, 300),
        "homogeneous": np.full(400, 0.03),
    }


PLANS = {"single": 1, "grouped": None, "outlier": 2, "dense": 0, "homogeneous": 1}


@pytest.mark.parametrize("case", sorted(PLANS))
def test_bernoulli_marginals(case):
    p = _bernoulli_cases()[case]
    process = Bernoulli(p)
    plan = process._plan
    groups = 0 if plan is None else len(plan)
    assert groups == PLANS[case] if PLANS[case] is not None else groups > 2  # path covered
    rounds = 4000
    counts = np.zeros(p.size)
    sizes = []
    for chosen in itertools.islice(process.participants(3), rounds):
        counts[chosen] += 1
        sizes.append(chosen.size)
    # clients with p = 1 every round
    assert np.all(counts[p == 1.0] == rounds)
    # each client with enough expected hits: a z-test
    big = p * rounds * (1 - p) >= 25
    z = (counts[big] - rounds * p[big]) / np.sqrt(rounds * p[big] * (1 - p[big]))
    assert np.all(np.abs(z) <= Z), np.abs(z).max()
    # tiny p pooled
    small = (p * rounds * (1 - p) < 25) & (p < 1)
    if small.any():
        mean = rounds * p[small].sum()
        var = rounds * np.sum(p[small] * (1 - p[small]))
        assert abs(counts[small].sum() - mean) <= Z * np.sqrt(var)
    # the count per round: mean sum p, variance sum p (1 - p)
    sizes = np.array(sizes, dtype=float)
    var = np.sum(p * (1 - p))
    assert abs(sizes.mean() - p.sum()) <= Z * np.sqrt(var / rounds)
    if var > 1:
        assert abs(sizes.var() / var - 1) <= Z * np.sqrt(2 / rounds) * 1.5


@pytest.mark.parametrize("case", ["single", "grouped"])
def test_bernoulli_pairs_and_rounds_independent(case):
    p = _bernoulli_cases()[case]
    rounds = 6000
    masks = Bernoulli(p).sample(rounds, seed=9).astype(float)
    # neighbours and far pairs: P(i and j) = p_i p_j
    n = p.size
    i = np.arange(n - 1)
    for j in (i + 1, (i + n // 2) % n):
        both = (masks[:, i] * masks[:, j]).sum(axis=0)
        expected = rounds * p[i] * p[j]
        var = rounds * p[i] * p[j] * (1 - p[i] * p[j])
        pooled = (both.sum() - expected.sum()) / np.sqrt(var.sum())
        assert abs(pooled) <= Z
    # consecutive rounds: P(in t and in t + 1) = p_i^2
    again = (masks[1:] * masks[:-1]).sum(axis=0)
    expected = (rounds - 1) * p**2
    var = (rounds - 1) * p**2 * (1 - p**2) * 3  # overlapping pairs: a loose variance
    keep = p < 1
    assert abs((again[keep] - expected[keep]).sum()) <= Z * np.sqrt(var[keep].sum())


def test_rounds_with_nobody():
    p = np.array([0.01, 0.02, 0.005, 0.03])
    rounds = 20000
    sets = list(itertools.islice(Bernoulli(p).participants(2), rounds))
    empty = sum(s.size == 0 for s in sets)
    q = np.prod(1 - p)
    assert abs(empty - rounds * q) <= Z * np.sqrt(rounds * q * (1 - q))
    assert all(s.dtype == np.int64 for s in sets)
    masks = Bernoulli(p).masks(2)
    for s, m in zip(sets[:200], masks, strict=False):
        np.testing.assert_array_equal(np.flatnonzero(m), s)


# ---------------------------------------------------------------------- seeds, options
FAST = [
    UniformSample(1000, 100),
    UniformSample(1000, 900),
    Bernoulli.heterogeneous(1000, 0.005, 0.2, seed=0),
    Bernoulli(0.05, n_clients=1000),
    Bernoulli(np.r_[np.full(500, 1e-3), 1.0]),
    Bernoulli(0.6, n_clients=100),
    Bernoulli(1.0, n_clients=10),
]


@pytest.mark.parametrize("process", FAST, ids=repr)
def test_fast_streams_reproducible_and_masks_agree(process):
    a = list(itertools.islice(process.participants(4), 8))
    b = list(itertools.islice(process.participants(np.random.SeedSequence(4)), 8))
    c = list(itertools.islice(process.masks(4), 8))
    for x, y, m in zip(a, b, c, strict=True):
        np.testing.assert_array_equal(x, y)
        np.testing.assert_array_equal(np.flatnonzero(m), x)
        assert m.dtype == bool and m.shape == (process.n_clients,)
    other = list(itertools.islice(process.participants(5), 8))
    if process.probabilities.min() < 1:
        assert any(not np.array_equal(x, y) for x, y in zip(a, other, strict=True))
    gen = np.random.default_rng(4)
    first = next(process.participants(gen))
    second = next(process.participants(gen))  # the generator was advanced
    np.testing.assert_array_equal(first, a[0])
    if process.probabilities.min() < 1:
        assert not np.array_equal(second, a[0])


def test_fast_differs_from_legacy_and_both_are_named():
    fast, legacy = UniformSample(10**5, 3000), UniformSample(10**5, 3000, draws="legacy")
    assert not np.array_equal(next(fast.participants(0)), next(legacy.participants(0)))
    assert "draws" not in repr(fast) and "draws='legacy'" in repr(legacy)
    assert digest(fast) != digest(legacy)
    het = Bernoulli.heterogeneous(50, 0.1, 0.5, seed=0, draws="legacy")
    assert het.draws == "legacy" and "draws='legacy'" in repr(het)
    assert digest(het) != digest(Bernoulli.heterogeneous(50, 0.1, 0.5, seed=0))


@pytest.mark.parametrize(
    "make",
    [
        lambda d: UniformSample(10, 3, draws=d),
        lambda d: Bernoulli(0.5, n_clients=3, draws=d),
        lambda d: Bernoulli.heterogeneous(5, 0.1, 0.2, seed=0, draws=d),
    ],
)
@pytest.mark.parametrize(
    ("bad", "error"), [("slow", ValueError), (None, TypeError), (1, TypeError)]
)
def test_bad_draws_named(make, bad, error):
    with pytest.raises(error, match="draws"):
        make(bad)


@pytest.mark.parametrize(
    "table",
    [
        {"kind": "uniform_sample", "size": 3},
        {"kind": "bernoulli", "p": 0.3},
        {"kind": "bernoulli", "low": 0.1, "high": 0.4},
    ],
)
def test_config_passes_draws(table):
    raw = {
        "problem": {"kind": "quadratic", "n_clients": 6, "dim": 3},
        "methods": [{"kind": "fedavg", "lr": 0.05}],
    }
    legacy = config.parse({**raw, "participation": {**table, "draws": "legacy"}})
    assert legacy.participation.draws == "legacy"
    assert legacy.resolved()["participation"]["draws"] == "legacy"
    fast = config.parse({**raw, "participation": table})
    assert fast.participation.draws == "fast"
    assert fast.resolved()["participation"]["draws"] == "fast"
    with pytest.raises(config.ConfigError, match="draws"):
        config.parse({**raw, "participation": {**table, "draws": "quick"}})


def test_unchanged_processes_give_sorted_indices_of_their_masks():
    for process in (
        WeightedSample(np.arange(1, 401), 20),
        WeightedSample(np.r_[np.zeros(5), np.ones(5)], 5),
        Regularized(50, 7),
        Periodic(5, 3, n_clients=100, size=7, p_available=0.5),
        Periodic(5, 3, n_clients=100),
    ):
        for idx, mask in itertools.islice(
            zip(process.participants(1), process.masks(1), strict=False), 30
        ):
            assert idx.dtype == np.int64
            np.testing.assert_array_equal(idx, np.flatnonzero(mask))


def test_exported():
    assert participation.UniformSample is UniformSample


def test_reused_draw_buffers_neither_change_the_stream_nor_leak_into_results():
    from stochmix.participation.processes import _skips, _uniform_subset

    n, size, work = 200_000, 20_000, {}
    fresh, reused = np.random.default_rng(4), np.random.default_rng(4)
    kept = []
    for _ in range(6):
        expected = _uniform_subset(fresh, n, size)
        got = _uniform_subset(reused, n, size, work)
        np.testing.assert_array_equal(got, expected)
        kept.append((got, expected))
    for got, expected in kept:  # later rounds wrote the buffers, not these arrays
        np.testing.assert_array_equal(got, expected)
        assert not np.shares_memory(got, work["positions"])
    # a skip past the end at a tiny rate (the clamped path) draws the same positions
    for q in (1e-12, 1e-6, 0.5):
        a = _skips(np.random.default_rng(7), n, q)
        b = _skips(np.random.default_rng(7), n, q, {})
        np.testing.assert_array_equal(a, b)
        assert np.all(np.diff(a) > 0) and (a.size == 0 or (a[0] >= 0 and a[-1] < n))


# Digests of 20 rounds from seed 7 of the default (fast) draws, recorded with the code of
# 24 November before the draws reused their buffers (commit a696757): (masks, participants).
RECORDED_FAST = {
    "uniform_200000_20000": ("926dd045cc7f4231", "436863bd0186ccc0"),
    "uniform_200000_150000": ("540781dac6da5416", "456fa2486b7da814"),
    "bern_hom_0.03": ("8ec5d5a82bdc1d03", "4a7c5feef1912ab7"),
    "bern_het": ("09bb75e11c3be713", "a359a5d9450dc268"),
    "bern_groups": ("16712614b2f4e08e", "b6656ecdfe46e2d2"),
}


def _recorded_fast_processes():
    return {
        "uniform_200000_20000": UniformSample(200000, 20000),  # geometric skips
        "uniform_200000_150000": UniformSample(200000, 150000),  # the excluded drawn
        "bern_hom_0.03": Bernoulli(0.03, n_clients=50000),
        "bern_het": Bernoulli.heterogeneous(50000, 0.005, 0.2, seed=1),
        # four groups thinned at their own rates, some empty in some rounds
        "bern_groups": Bernoulli(np.repeat([0.0001, 0.001, 0.01, 0.2], 12500)),
    }


@pytest.mark.parametrize("name", sorted(RECORDED_FAST))
def test_fast_streams_match_the_recorded_ones(name):
    process = _recorded_fast_processes()[name]
    masks, indices = RECORDED_FAST[name]
    assert _digest(process.masks(7)) == masks
    stream = process.participants(7)
    kept = list(itertools.islice(stream, 20))
    assert _digest(iter(kept)) == indices
    assert _digest(process.participants(7)) == indices  # the kept rounds were not reused

"""Data sets and partitions: loaders, splits, partitioners, heterogeneity statistics."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stochmix.participation import Periodic
from stochmix.problems import (
    DATASETS,
    Dataset,
    LeastSquares,
    client_arrays,
    client_majority,
    dirichlet_partition,
    iid_partition,
    label_entropy,
    label_swap,
    load_dataset,
    majority_partition,
    make_classification_data,
    make_regression_data,
    partition_stats,
    train_test_split,
)
from tests import examples

SHAPES = {
    "breast_cancer": (569, 30, 2),
    "diabetes": (442, 10, None),
    "digits": (1797, 64, 10),
    "iris": (150, 4, 3),
    "wine": (178, 13, 3),
}


def assert_partition(parts, n_samples, n_clients):
    """Every sample in exactly one part; parts sorted int64 arrays."""
    assert len(parts) == n_clients
    for p in parts:
        assert p.dtype == np.int64 and p.ndim == 1
        assert np.all(np.diff(p) > 0)
    counts = np.bincount(np.concatenate(parts), minlength=n_samples)
    assert counts.shape == (n_samples,)
    assert np.all(counts == 1)


def balanced_labels(n_classes, per_class, seed=0):
    return np.random.default_rng(seed).permutation(np.repeat(np.arange(n_classes), per_class))


# --------------------------------------------------------------------------- loaders


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_load_dataset_shapes(name):
    pytest.importorskip("sklearn")
    n, d, c = SHAPES[name]
    data = load_dataset(name)
    assert data.features.shape == (n, d) and data.targets.shape == (n,)
    assert data.n_classes == c and data.name == name and len(data.feature_names) == d
    assert data.n_samples == n and data.dim == d
    assert not np.isnan(data.features).any() and not np.isnan(data.targets).any()
    assert data.features.dtype == np.float64
    # Standardized: zero mean, unit or zero (constant column) standard deviation.
    np.testing.assert_allclose(data.features.mean(axis=0), 0.0, atol=1e-10)
    std = data.features.std(axis=0)
    assert np.all(np.isclose(std, 1.0) | (std == 0))
    if c is None:
        assert data.targets.dtype == np.float64
    else:
        assert data.targets.dtype == np.int64
        assert set(np.unique(data.targets)) == set(range(c))
    assert not data.features.flags.writeable and not data.targets.flags.writeable


def test_load_dataset_options_and_errors():
    pytest.importorskip("sklearn")
    assert set(DATASETS) == set(SHAPES)
    raw = load_dataset("iris", standardize=False, dtype=np.float32)
    assert raw.features.dtype == np.float32
    assert raw.features.min() >= 0  # the raw iris measurements are positive lengths
    with pytest.raises(ValueError, match="name"):
        load_dataset("mnist")
    with pytest.raises(TypeError, match="dtype"):
        load_dataset("iris", dtype=np.int64)


def test_train_test_split_stratified():
    data = make_classification_data(300, 3, n_classes=3, seed=0)
    train, test = train_test_split(data, 0.2, seed=1)
    assert train.n_samples + test.n_samples == 300 and test.n_samples == 60
    np.testing.assert_array_equal(np.bincount(test.targets), [20, 20, 20])
    # Together the two sets hold every row once.
    rows = np.concatenate([train.features, test.features])
    assert np.unique(rows, axis=0).shape[0] == 300
    assert {tuple(r) for r in rows} == {tuple(r) for r in data.features}
    again = train_test_split(data, 0.2, seed=1)
    np.testing.assert_array_equal(again[1].features, test.features)
    other = train_test_split(data, 0.2, seed=2)
    assert not np.array_equal(other[1].features, test.features)


def test_train_test_split_regression_and_errors():
    data = make_regression_data(50, 2, seed=0)
    train, test = train_test_split(data, 0.3, seed=0)
    assert (train.n_samples, test.n_samples) == (35, 15) and test.n_classes is None
    for bad in (0.0, 1.0, 1.5, -0.1):
        with pytest.raises(ValueError, match="test_fraction"):
            train_test_split(data, bad, seed=0)
    with pytest.raises(ValueError, match="test_fraction"):
        train_test_split(data, 0.001, seed=0)  # empty test set
    with pytest.raises(ValueError, match="stratify"):
        train_test_split(data, 0.3, seed=0, stratify=True)


def test_synthetic_classification():
    data = make_classification_data(3000, 8, n_classes=3, separation=4.0, seed=0)
    assert data.features.shape == (3000, 8) and data.n_classes == 3
    np.testing.assert_array_equal(np.bincount(data.targets), [1000, 1000, 1000])
    means = np.stack([data.features[data.targets == c].mean(axis=0) for c in range(3)])
    dist = np.linalg.norm(means[:, None] - means[None], axis=-1)[np.triu_indices(3, 1)]
    np.testing.assert_allclose(dist, 4.0, atol=0.25)  # orthonormal directions, dim >= C
    within = data.features - means[data.targets]
    np.testing.assert_allclose(within.var(axis=0), 1.0, atol=0.1)
    same = make_classification_data(3000, 8, n_classes=3, separation=4.0, seed=0)
    np.testing.assert_array_equal(same.features, data.features)
    low = make_classification_data(50, 2, n_classes=5, seed=0)  # dim < n_classes
    assert low.features.shape == (50, 2) and not np.isnan(low.features).any()
    with pytest.raises(ValueError, match="n_samples"):
        make_classification_data(2, 3, n_classes=3 + 1)
    with pytest.raises(ValueError, match="separation"):
        make_classification_data(10, 3, 2, -1.0)
    with pytest.raises(ValueError, match="n_classes"):
        make_classification_data(10, 3, 1)


def test_synthetic_regression():
    data, coef = make_regression_data(500, 5, noise=0.01, seed=3, return_coef=True)
    assert data.features.shape == (500, 5) and data.n_classes is None and coef.shape == (5,)
    fit = np.linalg.lstsq(data.features, data.targets, rcond=None)[0]
    np.testing.assert_allclose(fit, coef, atol=0.01)
    ill = make_regression_data(20000, 3, condition=100.0, seed=0)
    var = ill.features.var(axis=0)
    assert 70 < var[0] / var[-1] < 140
    with pytest.raises(ValueError, match="noise"):
        make_regression_data(10, 2, noise=-1.0)
    with pytest.raises(ValueError, match="condition"):
        make_regression_data(10, 2, condition=0.5)


def test_dataset_checks():
    x = np.ones((3, 2))
    with pytest.raises(ValueError, match="targets"):
        Dataset(x, np.array([0, 1, 2]), 2, "x", ("a", "b"))  # label 2 >= n_classes
    with pytest.raises(ValueError, match="feature_names"):
        Dataset(x, np.zeros(3), None, "x", ("a",))
    data = Dataset(x, np.array([0, 1, 0]), 2, "x", ("a", "b"))
    assert data.subset(np.array([2, 0])).targets.tolist() == [0, 0]
    x[0, 0] = 5.0  # the Dataset holds its own copy
    assert data.features[0, 0] == 1.0


# --------------------------------------------------------------------------- partitions


@settings(max_examples=examples(40), deadline=None)
@given(n=st.integers(1, 300), data=st.data(), seed=st.integers(0, 2**32 - 1))
def test_iid_partition_exactly_once(n, data, seed):
    n_clients = data.draw(st.integers(1, n))
    parts = iid_partition(n, n_clients, seed=seed)
    assert_partition(parts, n, n_clients)
    sizes = np.array([p.size for p in parts])
    assert sizes.max() - sizes.min() <= 1


@settings(max_examples=examples(40), deadline=None)
@given(
    n=st.integers(1, 300),
    n_classes=st.integers(1, 12),
    log_alpha=st.floats(-3, 4),
    data=st.data(),
    seed=st.integers(0, 2**32 - 1),
)
def test_dirichlet_partition_exactly_once(n, n_classes, log_alpha, data, seed):
    labels = np.random.default_rng(seed).integers(0, n_classes, size=n)
    n_clients = data.draw(st.integers(1, min(n, 40)))
    min_size = data.draw(st.integers(0, n // n_clients))
    parts = dirichlet_partition(labels, n_clients, 10.0**log_alpha, seed=seed, min_size=min_size)
    assert_partition(parts, n, n_clients)
    assert min(p.size for p in parts) >= min_size


@settings(max_examples=examples(40), deadline=None)
@given(
    n_classes=st.integers(2, 10),
    per_class=st.integers(1, 40),
    frac=st.floats(0, 1),
    data=st.data(),
    seed=st.integers(0, 2**32 - 1),
)
def test_majority_partition_exactly_once_balanced(n_classes, per_class, frac, data, seed):
    """Balanced labels with every label a majority label: always feasible."""
    labels = balanced_labels(n_classes, per_class, seed)
    n = labels.size
    n_clients = data.draw(st.integers(n_classes, n))
    parts, majority = majority_partition(labels, n_clients, frac, seed=seed)
    assert_partition(parts, n, n_clients)
    assert majority.shape == (n_clients,) and np.all(np.diff(majority) >= 0)
    np.testing.assert_array_equal(np.unique(majority), np.arange(n_classes))


@settings(max_examples=examples(40), deadline=None)
@given(
    n=st.integers(2, 200),
    n_classes=st.integers(2, 6),
    frac=st.floats(0, 1),
    data=st.data(),
    seed=st.integers(0, 2**32 - 1),
)
def test_majority_partition_exactly_once_or_refused(n, n_classes, frac, data, seed):
    """Arbitrary label sizes: a partition, or a ValueError about majority_fraction."""
    labels = np.random.default_rng(seed).integers(0, n_classes, size=n)
    n_clients = data.draw(st.integers(1, n))
    try:
        parts, majority = majority_partition(labels, n_clients, frac, seed=seed)
    except ValueError as err:
        assert "majority_fraction" in str(err)
        return
    assert_partition(parts, n, n_clients)
    counts = partition_stats(labels, parts)
    own = counts[np.arange(n_clients), majority]
    sizes = counts.sum(axis=1)
    assert np.all(np.abs(own - frac * sizes) <= 2.0)


def test_dirichlet_alpha_controls_label_skew():
    labels = balanced_labels(10, 200)
    global_counts = np.bincount(labels)
    global_entropy = label_entropy(global_counts)
    assert isinstance(global_entropy, float)
    np.testing.assert_allclose(global_entropy, np.log(10))
    for seed in range(5):
        near_iid = partition_stats(labels, dirichlet_partition(labels, 10, 1e4, seed=seed))
        props = near_iid / near_iid.sum(axis=1, keepdims=True)
        assert np.abs(props - global_counts / labels.size).max() < 0.02
        assert label_entropy(near_iid).mean() > 0.99 * global_entropy
        skewed = partition_stats(labels, dirichlet_partition(labels, 10, 0.05, seed=seed))
        assert label_entropy(skewed).mean() < 0.6 * global_entropy


def test_dirichlet_min_size_rebalancing():
    labels = balanced_labels(5, 100)
    parts = dirichlet_partition(labels, 100, 0.01, seed=0, min_size=3)
    assert_partition(parts, 500, 100)
    assert min(p.size for p in parts) == 3
    raw = dirichlet_partition(labels, 100, 0.01, seed=0, min_size=0)
    assert min(p.size for p in raw) == 0  # the raw draw leaves clients empty
    # Rebalancing moves only what is missing: the raw draw is kept when no client is short.
    a = dirichlet_partition(labels, 5, 100.0, seed=1, min_size=0)
    b = dirichlet_partition(labels, 5, 100.0, seed=1, min_size=1)
    for p, q in zip(a, b, strict=True):
        np.testing.assert_array_equal(p, q)
    # Tiny alpha is drawn in log space: no NaN, still a partition.
    assert_partition(dirichlet_partition(labels, 7, 1e-6, seed=2), 500, 7)


def test_majority_partition_fraction_paper_setup():
    """Wang & Ji: one majority label per client, 5% of other labels, 25 clients per label."""
    labels = balanced_labels(10, 240)
    parts, majority = majority_partition(labels, 100, 0.95, seed=0)
    counts = partition_stats(labels, parts)
    sizes = counts.sum(axis=1)
    assert np.all(sizes == 24)  # equal sizes when the labels allow it
    np.testing.assert_array_equal(np.bincount(majority), np.full(10, 10))
    own = counts[np.arange(100), majority]
    assert np.all(np.abs(own / sizes - 0.95) <= 1.0 / sizes)
    np.testing.assert_array_equal(client_majority(labels, parts), majority)
    # The minority 5% come from the other labels, spread over several of them overall.
    other = counts.copy()
    other[np.arange(100), majority] = 0
    assert other.sum() == 100 * 24 - own.sum()
    for g in range(10):
        assert np.count_nonzero(other[majority == g].sum(axis=0)) >= 5
    # The majority labels serve as Periodic group labels ({0, 1}, {2, 3}, ...).
    process = Periodic(majority // 2, 100)
    assert process.n_clients == 100


def test_majority_partition_unbalanced_labels():
    labels = np.repeat([0, 1], [212, 357])  # breast cancer's label sizes
    for frac in (0.8, 0.95):
        parts, majority = majority_partition(labels, 10, frac, seed=0)
        assert_partition(parts, labels.size, 10)
        counts = partition_stats(labels, parts)
        sizes = counts.sum(axis=1)
        own = counts[np.arange(10), majority]
        assert np.all(np.abs(own / sizes - frac) <= 2.0 / sizes)
    single, majority = majority_partition(labels, 4, 1.0, seed=0)
    assert np.all(partition_stats(labels, single)[np.arange(4), 1 - majority] == 0)


def test_majority_partition_given_labels_and_errors():
    labels = balanced_labels(3, 60)
    chosen = np.array([2, 0, 1, 2, 0, 1])
    parts, majority = majority_partition(labels, 6, 0.9, seed=0, majority_labels=chosen)
    np.testing.assert_array_equal(majority, chosen)
    np.testing.assert_array_equal(client_majority(labels, parts), chosen)
    with pytest.raises(ValueError, match="majority_labels"):
        majority_partition(labels, 6, 0.9, seed=0, majority_labels=np.array([0, 1, 2, 3, 0, 1]))
    for bad in (-0.1, 1.1):
        with pytest.raises(ValueError, match="majority_fraction"):
            majority_partition(labels, 6, bad, seed=0)
    with pytest.raises(ValueError, match="majority_fraction"):
        majority_partition(labels, 2, 1.0, seed=0)  # label 2 would have no client
    with pytest.raises(ValueError, match="n_clients"):
        majority_partition(labels, 181, 0.9, seed=0)


@settings(max_examples=examples(30), deadline=None)
@given(frac=st.floats(0, 1), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_label_swap_changes_exactly_the_intended_labels(frac, seed, data):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 4, size=200)
    parts = iid_partition(200, 8, seed=seed)
    group = np.array(sorted(data.draw(st.sets(st.integers(0, 7), max_size=8))), dtype=np.int64)
    before = labels.copy()
    new = label_swap(labels, parts, group, frac, swap=(1, 3), seed=seed)
    np.testing.assert_array_equal(labels, before)  # input untouched
    changed = new != labels
    assert np.all(np.isin(labels[changed], [1, 3]))
    np.testing.assert_array_equal(new[changed], 4 - labels[changed])  # 1 <-> 3
    in_group = np.zeros(200, dtype=bool)
    for i in group:
        in_group[parts[i]] = True
    assert not changed[~in_group].any()
    for i in range(8):
        eligible = np.isin(labels[parts[i]], [1, 3]).sum()
        expected = int(np.floor(frac * eligible + 0.5)) if i in group else 0
        assert changed[parts[i]].sum() == expected
    again = label_swap(labels, parts, group, frac, swap=(1, 3), seed=seed)
    np.testing.assert_array_equal(again, new)


def test_label_swap_extremes_and_errors():
    labels = np.tile([0, 1, 2], 20)
    parts = iid_partition(60, 4, seed=0)
    mask = np.array([False, True, False, True])
    full = label_swap(labels, parts, mask, 1.0, swap=(0, 1), seed=0)
    swapped = np.concatenate([parts[1], parts[3]])
    kept = np.concatenate([parts[0], parts[2]])
    np.testing.assert_array_equal(full[swapped], np.array([1, 0, 2])[labels[swapped]])
    np.testing.assert_array_equal(full[kept], labels[kept])
    np.testing.assert_array_equal(label_swap(labels, parts, [1, 3], 0.0, seed=0), labels)
    np.testing.assert_array_equal(
        label_swap(labels, parts, [1, 3], 1.0, seed=5), full
    )  # fraction 1 is deterministic; mask and indices agree
    for bad in (-0.5, 1.5):
        with pytest.raises(ValueError, match="fraction"):
            label_swap(labels, parts, [1], bad, seed=0)
    with pytest.raises(ValueError, match="swap"):
        label_swap(labels, parts, [1], 0.5, swap=(2, 2), seed=0)
    with pytest.raises(ValueError, match="group"):
        label_swap(labels, parts, [4], 0.5, seed=0)
    with pytest.raises(ValueError, match="clients_partition"):
        label_swap(labels, [parts[0], parts[0]], [1], 0.5, seed=0)


def test_same_seed_same_partition():
    labels = balanced_labels(4, 50)
    makers = [
        lambda s: iid_partition(200, 7, seed=s),
        lambda s: dirichlet_partition(labels, 7, 0.5, seed=s),
        lambda s: majority_partition(labels, 8, 0.8, seed=s).parts,
    ]
    for make in makers:
        a, b, c = make(11), make(11), make(12)
        assert all(np.array_equal(p, q) for p, q in zip(a, b, strict=True))
        assert not all(np.array_equal(p, q) for p, q in zip(a, c, strict=True))
    gen_a = iid_partition(200, 7, seed=np.random.default_rng(3))
    gen_b = iid_partition(200, 7, seed=np.random.default_rng(3))
    assert all(np.array_equal(p, q) for p, q in zip(gen_a, gen_b, strict=True))


def test_partition_bad_inputs():
    labels = balanced_labels(3, 5)
    for alpha in (0.0, -1.0):
        with pytest.raises(ValueError, match="alpha"):
            dirichlet_partition(labels, 3, alpha, seed=0)
    with pytest.raises(ValueError, match="n_clients"):
        iid_partition(5, 6, seed=0)
    with pytest.raises(ValueError, match="n_clients"):
        dirichlet_partition(labels, 16, 1.0, seed=0)
    with pytest.raises(ValueError, match="n_clients"):
        iid_partition(5, 0, seed=0)
    with pytest.raises(ValueError, match="min_size"):
        dirichlet_partition(labels, 4, 1.0, seed=0, min_size=4)
    with pytest.raises(ValueError, match="labels"):
        dirichlet_partition(np.array([0, -1, 2]), 2, 1.0, seed=0)


# --------------------------------------------------------------------------- statistics


def test_partition_stats_and_entropy():
    labels = np.array([0, 0, 1, 2, 2, 2])
    parts = [np.array([0, 1]), np.array([2, 3, 4]), np.array([5]), np.array([], dtype=np.int64)]
    counts = partition_stats(labels, parts)
    np.testing.assert_array_equal(counts, [[2, 0, 0], [0, 1, 2], [0, 0, 1], [0, 0, 0]])
    assert partition_stats(labels, parts, n_classes=5).shape == (4, 5)
    with pytest.raises(ValueError, match="n_classes"):
        partition_stats(labels, parts, n_classes=2)
    ent = label_entropy(counts)
    p = np.array([1, 2]) / 3
    np.testing.assert_allclose(ent, [0.0, -(p * np.log(p)).sum(), 0.0, 0.0])
    np.testing.assert_array_equal(client_majority(labels, parts), [0, 2, 2, -1])
    with pytest.raises(ValueError, match="counts"):
        label_entropy(np.array([[1.0, -1.0]]))


def test_client_arrays_build_least_squares():
    data = make_regression_data(120, 4, noise=0.5, seed=0)
    parts = iid_partition(data.n_samples, 6, seed=0)
    a_list, b_list = client_arrays(data.features, data.targets, parts)
    assert len(a_list) == len(b_list) == 6
    for p, a, b in zip(parts, a_list, b_list, strict=True):
        assert a.shape == (p.size, 4) and b.shape == (p.size,)
    reg = 0.1
    problem = LeastSquares(a_list, b_list, reg)
    x, y = data.features, data.targets
    expected = np.linalg.solve(x.T @ x + 6 * reg * np.eye(4), x.T @ y)
    np.testing.assert_allclose(problem.x_star, expected, rtol=1e-10)
    # (the runtime shape checker of the test suite may object first, with a TypeError)
    with pytest.raises((ValueError, TypeError), match="targets"):
        client_arrays(data.features, data.targets[:-1], parts)
    with pytest.raises(ValueError, match="parts"):
        client_arrays(data.features, data.targets, [np.array([0, 500])])


def test_dataset_labels_is_the_name_and_targets_its_alias():
    x = np.ones((3, 2))
    data = Dataset(x, np.array([1, 0, 1]), 2, "x", ("a", "b"))
    assert data.labels is data.targets  # one array, two names
    assert data.labels.tolist() == [1, 0, 1] and data.labels.dtype == np.int64
    assert not data.labels.flags.writeable
    with pytest.raises(AttributeError):
        data.labels = np.zeros(3)  # read-only, like every field of a Dataset
    assert data.subset(np.array([2, 1])).labels.tolist() == [1, 0]
    regression = make_regression_data(5, 2, seed=0)
    assert regression.labels.dtype == np.float64 and regression.labels.shape == (5,)

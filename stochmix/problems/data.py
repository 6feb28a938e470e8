"""Small real data sets, shipped inside scikit-learn, and synthetic ones in plain NumPy.

:func:`load_dataset` reads one of the toy data sets that scikit-learn installs with itself
(nothing is ever downloaded); scikit-learn is an optional dependency, imported only there
(``pip install "stochmix[data]"``). :func:`make_classification_data` and
:func:`make_regression_data` need NumPy only. Every loader returns a :class:`Dataset`;
:func:`train_test_split` splits one in two. To hand a data set to federated clients, split
its rows with a partitioner of :mod:`stochmix.problems.partition` and build the problem with
:func:`~stochmix.problems.partition.client_arrays`::

    from stochmix.problems import LeastSquares, client_arrays, iid_partition, load_dataset

    data = load_dataset("diabetes")
    parts = iid_partition(data.n_samples, 10, seed=0)
    problem = LeastSquares(*client_arrays(data.features, data.labels, parts), reg=1e-3)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
from jaxtyping import Float, Real

from .._validate import as_float, as_int, choice, make_rng

__all__ = [
    "DATASETS",
    "Dataset",
    "load_dataset",
    "make_classification_data",
    "make_regression_data",
    "train_test_split",
]

IntLike = int | np.integer
FloatLike = float | np.floating
SeedLike = int | np.integer | np.random.SeedSequence | np.random.Generator | None

#: name -> (scikit-learn loader, classification?)
_LOADERS = {
    "breast_cancer": ("load_breast_cancer", True),
    "diabetes": ("load_diabetes", False),
    "digits": ("load_digits", True),
    "iris": ("load_iris", True),
    "wine": ("load_wine", True),
}

#: The names :func:`load_dataset` takes (data files shipped inside scikit-learn).
DATASETS: tuple[str, ...] = tuple(sorted(_LOADERS))
"""The names :func:`load_dataset` accepts."""


@dataclasses.dataclass(frozen=True, eq=False)
class Dataset:
    """A data set: n samples of d features with one label each.

    The arrays are copied at construction and made read-only, so a ``Dataset`` cannot be
    changed after it is made. The labels are read as :attr:`labels`; ``targets`` is the
    same array under its constructor name (``Dataset(features, targets, n_classes, name,
    feature_names)``), kept as an alias.

    Attributes:
        features: (n, d) floating array, one row per sample.
        labels: (n,) array, one label per sample: int64 class labels in
            ``[0, n_classes)`` for classification, float64 values for regression.
        targets: the same array as ``labels`` (the constructor's argument; an alias).
        n_classes: the number of classes (>= 2), or ``None`` for a regression data set.
        name: a short name, e.g. ``"digits"``.
        feature_names: d names, one per column of ``features``.

    Raises:
        ValueError: shapes that do not match, no sample or no feature, values that are not
            finite, class labels outside ``[0, n_classes)``, or a wrong number of names.
        TypeError: features that are not floating, or non-integer class labels.
    """

    features: Float[np.ndarray, "n d"]
    targets: Real[np.ndarray, " n"]
    n_classes: int | None
    name: str
    feature_names: tuple[str, ...]

    def __post_init__(self):
        x = np.array(self.features)  # a copy: the caller's array is left writeable
        if not np.issubdtype(x.dtype, np.floating):
            raise TypeError(f"features must be a floating array, got dtype {x.dtype}")
        if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1:
            raise ValueError(f"features must have shape (n, d) with n, d >= 1, got {x.shape}")
        if not np.isfinite(x).all():
            raise ValueError("features must be finite (they hold NaN or inf)")
        y = np.array(self.targets)
        if y.shape != (x.shape[0],):
            raise ValueError(f"targets must have shape ({x.shape[0]},), got {y.shape}")
        n_classes = self.n_classes
        if n_classes is None:
            y = y.astype(np.float64) if not np.issubdtype(y.dtype, np.floating) else y
            if not np.isfinite(y).all():
                raise ValueError("targets must be finite (they hold NaN or inf)")
        else:
            n_classes = as_int(n_classes, "n_classes", minimum=2)
            if not np.issubdtype(y.dtype, np.integer):
                raise TypeError(f"targets must hold integer class labels, got dtype {y.dtype}")
            y = y.astype(np.int64)
            if y.min() < 0 or y.max() >= n_classes:
                raise ValueError(
                    f"targets must lie in [0, {n_classes}) (n_classes={n_classes}), got range "
                    f"[{y.min()}, {y.max()}]"
                )
        names = tuple(str(s) for s in self.feature_names)
        if len(names) != x.shape[1]:
            raise ValueError(
                f"feature_names must hold {x.shape[1]} names (one per column), got {len(names)}"
            )
        x.setflags(write=False)
        y.setflags(write=False)
        object.__setattr__(self, "features", x)
        object.__setattr__(self, "targets", y)
        object.__setattr__(self, "n_classes", n_classes)
        object.__setattr__(self, "name", str(self.name))
        object.__setattr__(self, "feature_names", names)

    @property
    def labels(self) -> Real[np.ndarray, " n"]:
        """The (n,) labels, one per sample: int64 class labels in ``[0, n_classes)`` for
        classification, float64 values for regression (read-only). The same array as
        ``targets``, the constructor's name for it."""
        return self.targets

    @property
    def n_samples(self) -> int:
        """n, the number of samples (rows)."""
        return self.features.shape[0]

    @property
    def dim(self) -> int:
        """d, the number of features (columns)."""
        return self.features.shape[1]

    @property
    def is_classification(self) -> bool:
        """Whether :attr:`labels` are class labels (``n_classes`` is not None)."""
        return self.n_classes is not None

    def subset(self, indices: Sequence[int] | np.ndarray) -> Dataset:
        """The samples ``indices`` (a 1-d integer array), in that order, as a new Dataset."""
        idx = np.asarray(indices)
        if idx.ndim != 1 or (idx.size and not np.issubdtype(idx.dtype, np.integer)):
            raise ValueError(f"indices must be a 1-d integer array, got {idx.dtype} {idx.shape}")
        return dataclasses.replace(self, features=self.features[idx], targets=self.targets[idx])

    def __repr__(self) -> str:
        kind = "regression" if self.n_classes is None else f"{self.n_classes} classes"
        return (
            f"Dataset(name={self.name!r}, n_samples={self.n_samples}, dim={self.dim}, {kind}, "
            f"dtype={self.features.dtype})"
        )


# --------------------------------------------------------------------------- helpers


def _float_dtype(dtype) -> np.dtype:
    try:
        dt = np.dtype(dtype)
    except TypeError as err:
        raise TypeError(f"dtype must be a NumPy floating dtype, got {dtype!r}") from err
    if not np.issubdtype(dt, np.floating):
        raise TypeError(f"dtype must be a NumPy floating dtype, got {dt}")
    return dt


def _standardized(x: np.ndarray) -> np.ndarray:
    """Columns with zero mean and unit (population) standard deviation; constant columns
    become zero rather than NaN."""
    mean = x.mean(axis=0)
    std = x.std(axis=0)
    return (x - mean) / np.where(std > 0, std, 1.0)


def _sklearn_datasets():
    try:
        import sklearn.datasets
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            'load_dataset needs scikit-learn, an optional dependency: pip install "stochmix[data]"'
        ) from err
    return sklearn.datasets


# --------------------------------------------------------------------------- loaders


def load_dataset(name: str, *, standardize: bool = True, dtype=np.float64) -> Dataset:
    """One of the small data sets shipped inside scikit-learn (read from the installed
    package, never downloaded).

    ============== ======== ===== =========================================
    name           n        d     labels
    ============== ======== ===== =========================================
    breast_cancer  569      30    2 classes
    diabetes       442      10    regression (disease progression, 25..346)
    digits         1797     64    10 classes (8x8 images of digits)
    iris           150      4     3 classes
    wine           178      13    3 classes
    ============== ======== ===== =========================================

    Args:
        name: one of :data:`DATASETS`.
        standardize: rescale every feature to zero mean and unit standard deviation over the
            whole data set (constant columns, such as the blank border pixels of ``digits``,
            become 0). Targets are never rescaled. Standardizing before
            :func:`train_test_split` uses the test rows' statistics too, which is harmless for
            optimization experiments but not for honest test accuracy: pass
            ``standardize=False`` and scale yourself in that case.
        dtype: floating dtype of ``features`` (float64 by default).

    Returns:
        a :class:`Dataset`; class labels are int64 in ``[0, n_classes)``.

    Raises:
        ValueError: an unknown ``name``.
        TypeError: a ``dtype`` that is not floating.
        ImportError: scikit-learn is not installed (``pip install "stochmix[data]"``).
    """
    choice(name, "name", _LOADERS)
    dt = _float_dtype(dtype)
    loader, classification = _LOADERS[name]
    bunch = getattr(_sklearn_datasets(), loader)()
    x = np.asarray(bunch.data, dtype=np.float64)
    if standardize:
        x = _standardized(x)
    if classification:
        y = np.asarray(bunch.target).astype(np.int64)
        n_classes = len(bunch.target_names)
    else:
        y = np.asarray(bunch.target, dtype=np.float64)
        n_classes = None
    return Dataset(
        features=x.astype(dt),
        targets=y,
        n_classes=n_classes,
        name=name,
        feature_names=tuple(str(s) for s in bunch.feature_names),
    )


def train_test_split(
    dataset: Dataset,
    test_fraction: FloatLike = 0.25,
    seed: SeedLike = None,
    *,
    stratify: bool | None = None,
) -> tuple[Dataset, Dataset]:
    """Split ``dataset`` at random into a training and a test set.

    Stratified by default for classification: each class c with n_c samples puts
    ``round(test_fraction * n_c)`` of them in the test set, so both sets keep the class
    proportions (and the test size may differ from ``round(test_fraction * n)`` by a few
    rows). Otherwise ``round(test_fraction * n)`` rows go to the test set. Both sets keep the
    original order of the rows.

    Args:
        dataset: the data set to split.
        test_fraction: fraction of the rows for the test set, in (0, 1).
        seed: seed of the shuffle (int, SeedSequence, Generator or None).
        stratify: split class by class; default True for classification, False for
            regression (True is refused for regression).

    Returns:
        ``(train, test)``, two :class:`Dataset` of the same name, each with at least one row.

    Raises:
        ValueError: ``test_fraction`` outside (0, 1), a split that leaves one side empty, or
            ``stratify=True`` for a regression data set.
    """
    if not isinstance(dataset, Dataset):
        raise TypeError(f"dataset must be a Dataset, got {type(dataset).__name__}")
    frac = as_float(test_fraction, "test_fraction", positive=True)
    if frac >= 1:
        raise ValueError(f"test_fraction must lie in (0, 1), got {frac}")
    if stratify is None:
        stratify = dataset.is_classification
    if stratify and not dataset.is_classification:
        raise ValueError("stratify must be False for a regression data set (no class labels)")
    rng = make_rng(seed)
    n = dataset.n_samples
    if stratify:
        labels = dataset.labels
        key = rng.random(n)
        order = np.lexsort((key, labels))  # by class, random within a class
        n_classes = dataset.n_classes
        assert n_classes is not None  # stratify is for class labels (checked above)
        counts = np.bincount(labels, minlength=n_classes)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        rank = np.arange(n) - np.repeat(starts, counts)  # rank within the class
        n_test = np.rint(frac * counts).astype(np.int64)
        is_test = np.empty(n, dtype=bool)
        is_test[order] = rank < np.repeat(n_test, counts)
    else:
        is_test = np.zeros(n, dtype=bool)
        is_test[rng.permutation(n)[: int(np.rint(frac * n))]] = True
    n_test_total = int(is_test.sum())
    if n_test_total == 0 or n_test_total == n:
        raise ValueError(
            f"test_fraction={frac} leaves {'the test' if n_test_total == 0 else 'the training'}"
            f" set empty for {n} samples"
        )
    return dataset.subset(np.flatnonzero(~is_test)), dataset.subset(np.flatnonzero(is_test))


# --------------------------------------------------------------------------- synthetic


def make_classification_data(
    n_samples: IntLike,
    dim: IntLike,
    n_classes: IntLike = 2,
    separation: FloatLike = 2.0,
    seed: SeedLike = None,
    *,
    dtype=np.float64,
) -> Dataset:
    """A Gaussian mixture with one isotropic, unit-variance component per class.

    The labels are balanced (class c has ``n_samples // n_classes`` samples, one more for
    the first ``n_samples % n_classes`` classes), in random order. The class means are
    ``separation / sqrt(2)`` times unit vectors: orthonormal ones (drawn uniformly, so every
    two means are exactly ``separation`` apart) when ``dim >= n_classes``, otherwise
    independent uniform directions. Sample j is ``mean[y_j] + N(0, I_d)``; ``separation = 0``
    makes the classes indistinguishable.

    Args:
        n_samples: n >= n_classes.
        dim: d >= 1.
        n_classes: C >= 2.
        separation: distance between class means, >= 0.
        seed: int, SeedSequence, Generator or None.
        dtype: floating dtype of the features.

    Returns:
        a :class:`Dataset` named ``"synthetic_classification"``, features (n, d), int64
        labels (n,) in ``[0, C)``.
    """
    c = as_int(n_classes, "n_classes", minimum=2)
    n = as_int(n_samples, "n_samples", minimum=c)
    d = as_int(dim, "dim", minimum=1)
    sep = as_float(separation, "separation", nonnegative=True)
    dt = _float_dtype(dtype)
    rng = make_rng(seed)
    g = rng.standard_normal((d, c))
    if d >= c:
        q, r = np.linalg.qr(g)
        directions = q * np.sign(np.diag(r))  # Haar-distributed orthonormal columns
    else:
        directions = g / np.linalg.norm(g, axis=0)
    means = (sep / np.sqrt(2.0)) * directions.T  # (C, d)
    labels = rng.permutation(np.arange(n) % c).astype(np.int64)
    x = means[labels] + rng.standard_normal((n, d))
    return Dataset(
        features=x.astype(dt),
        targets=labels,
        n_classes=c,
        name="synthetic_classification",
        feature_names=tuple(f"x{j}" for j in range(d)),
    )


def make_regression_data(
    n_samples: IntLike,
    dim: IntLike,
    noise: FloatLike = 0.1,
    seed: SeedLike = None,
    *,
    condition: FloatLike = 1.0,
    return_coef: bool = False,
    dtype=np.float64,
) -> Dataset | tuple[Dataset, Float[np.ndarray, " d"]]:
    """A linear model with Gaussian noise: ``y = X w + noise * e``.

    ``w ~ N(0, I_d)`` and ``e ~ N(0, I_n)``. The rows of X are ``N(0, S^2)`` with
    ``S = diag(s)`` and s spaced geometrically from 1 down to ``1 / sqrt(condition)``, so the
    population covariance of the features has condition number ``condition`` (1: isotropic).

    Args:
        n_samples: n >= 1.
        dim: d >= 1.
        noise: standard deviation of the noise, >= 0.
        seed: int, SeedSequence, Generator or None.
        condition: condition number of the feature covariance, >= 1.
        return_coef: also return w.
        dtype: floating dtype of the features (labels are float64).

    Returns:
        a :class:`Dataset` named ``"synthetic_regression"`` (``n_classes=None``), or
        ``(dataset, w)`` with w of shape (d,) when ``return_coef``.
    """
    n = as_int(n_samples, "n_samples", minimum=1)
    d = as_int(dim, "dim", minimum=1)
    sigma = as_float(noise, "noise", nonnegative=True)
    kappa = as_float(condition, "condition", positive=True)
    if kappa < 1:
        raise ValueError(f"condition must be >= 1, got {kappa}")
    dt = _float_dtype(dtype)
    rng = make_rng(seed)
    coef = rng.standard_normal(d)
    scales = np.geomspace(1.0, 1.0 / np.sqrt(kappa), d)
    x = rng.standard_normal((n, d)) * scales
    y = x @ coef + sigma * rng.standard_normal(n)
    data = Dataset(
        features=x.astype(dt),
        targets=y,
        n_classes=None,
        name="synthetic_regression",
        feature_names=tuple(f"x{j}" for j in range(d)),
    )
    return (data, coef) if return_coef else data

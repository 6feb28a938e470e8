"""Objectives with per-client gradients: f(x) = (1/N) sum_i F_i(x).

Every problem offers ``gradients(clients, points)``, the gradients of a batch of clients each at
its own point, vectorized over the batch; see :class:`Problem` for the whole interface
(its client arrays are a :class:`ClientData`, ``problem.data``; points and gradients may
be NumPy arrays or Torch tensors, :class:`Array` in annotations such as
``Float[Array, "m d"]``).

- :class:`Quadratic`: F_i(x) = 1/2 (x - z_i)^T H_i (x - z_i), diagonal or full H_i.
- :class:`LeastSquares`: F_i(x) = 1/2 ||A_i x - b_i||^2 + reg/2 ||x||^2 (ridge when reg > 0),
  clients with equal or different numbers of rows.
- :class:`Minibatch` / :class:`Noisy` (``problem.minibatch(b)``, ``problem.noisy(sigma)``):
  seeded stochastic gradients.
"""

from .._arrays import Array
from ._common import ClientData, client_rows
from .base import Problem
from .least_squares import LeastSquares
from .quadratic import Quadratic
from .stochastic import Minibatch, Noisy

__all__ = [
    "Array",
    "ClientData",
    "LeastSquares",
    "Minibatch",
    "Noisy",
    "Problem",
    "Quadratic",
    "client_rows",
]

# Data sets and their split among clients (scikit-learn only for load_dataset, imported there).
from .data import (
    DATASETS,
    Dataset,
    load_dataset,
    make_classification_data,
    make_regression_data,
    train_test_split,
)
from .partition import (
    MajorityPartition,
    client_arrays,
    client_majority,
    dirichlet_partition,
    iid_partition,
    label_entropy,
    label_swap,
    majority_partition,
    partition_stats,
)

__all__ += [
    "DATASETS",
    "Dataset",
    "MajorityPartition",
    "client_arrays",
    "client_majority",
    "dirichlet_partition",
    "iid_partition",
    "label_entropy",
    "label_swap",
    "load_dataset",
    "majority_partition",
    "make_classification_data",
    "make_regression_data",
    "partition_stats",
    "train_test_split",
]

# Learning problems: logistic regression (NumPy) and torch modules (torch imported lazily).
from .logistic import Logistic  # noqa: E402
from .torch_model import TorchModel  # noqa: E402

__all__ += ["Logistic", "TorchModel"]

# Composite problems: a smooth problem plus a regularizer with a prox.
from .composite import Composite, Subgradients  # noqa: E402
from .regularizers import (  # noqa: E402
    L1,
    REGULARIZERS,
    Box,
    ElasticNet,
    GroupLasso,
    NonNegative,
    Regularizer,
    regularizer,
)

__all__ += [
    "L1",
    "REGULARIZERS",
    "Box",
    "Composite",
    "ElasticNet",
    "GroupLasso",
    "NonNegative",
    "Regularizer",
    "Subgradients",
    "regularizer",
]

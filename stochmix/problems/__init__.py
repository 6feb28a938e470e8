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

Each name's module is imported when the name is first used
(``stochmix.problems.LeastSquares`` imports :mod:`~stochmix.problems.least_squares` and
what it needs only), so that a run of one problem does not pay for the data sets, their
partitions, the learning problems and the regularizers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._lazy import LazyExports

if TYPE_CHECKING:  # what the names below resolve to, for type checkers and IDEs
    from .._arrays import Array
    from ._common import ClientData, client_rows
    from .base import Problem
    from .composite import Composite, Subgradients
    from .data import (
        DATASETS,
        Dataset,
        load_dataset,
        make_classification_data,
        make_regression_data,
        train_test_split,
    )
    from .least_squares import LeastSquares
    from .logistic import Logistic
    from .nonconvex import NonconvexLogistic
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
    from .quadratic import Quadratic
    from .regularizers import (
        L1,
        REGULARIZERS,
        Box,
        ElasticNet,
        GroupLasso,
        NonNegative,
        Regularizer,
        regularizer,
    )
    from .stochastic import Minibatch, Noisy
    from .torch_model import TorchModel

#: each public name -> the module that defines it, imported on first use
_EXPORTS = LazyExports(
    __name__,
    {
        "Array": ".._arrays",
        "ClientData": "._common",
        "client_rows": "._common",
        "Problem": ".base",
        "LeastSquares": ".least_squares",
        "Quadratic": ".quadratic",
        "Minibatch": ".stochastic",
        "Noisy": ".stochastic",
        # data sets and their split among clients (scikit-learn only for load_dataset)
        **dict.fromkeys(
            "DATASETS Dataset load_dataset make_classification_data make_regression_data"
            " train_test_split".split(),
            ".data",
        ),
        **dict.fromkeys(
            "MajorityPartition client_arrays client_majority dirichlet_partition"
            " iid_partition label_entropy label_swap majority_partition partition_stats".split(),
            ".partition",
        ),
        # learning problems: logistic regression (NumPy) and torch modules (torch when used)
        "Logistic": ".logistic",
        "NonconvexLogistic": ".nonconvex",
        "TorchModel": ".torch_model",
        # composite problems: a smooth problem plus a regularizer with a prox
        "Composite": ".composite",
        "Subgradients": ".composite",
        **dict.fromkeys(
            "L1 REGULARIZERS Box ElasticNet GroupLasso NonNegative Regularizer regularizer".split(),
            ".regularizers",
        ),
    },
)

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

# Data sets and their split among clients.
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

# Learning problems.
__all__ += ["Logistic", "NonconvexLogistic", "TorchModel"]

# Composite problems.
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


if not TYPE_CHECKING:  # hidden from type checkers, so that they flag a misspelt name

    def __getattr__(name: str) -> Any:
        return _EXPORTS.load(name)

    def __dir__() -> list[str]:
        return _EXPORTS.dir()

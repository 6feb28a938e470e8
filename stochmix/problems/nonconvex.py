r"""A nonconvex finite sum: logistic regression with a nonconvex regularizer.

Client i holds n_i samples (a_r, y_r), r in S_i (the counts may differ), and

.. math::

    F_i(x) = \frac{1}{n_i} \sum_{r \in S_i} \ell(x; a_r, y_r) + R(x),\qquad
    R(x) = \lambda \sum_{j=1}^{d} \frac{x_j^2}{1 + x_j^2},\qquad
    f(x) = \frac{1}{N} \sum_i F_i(x),

with :math:`\ell` the logistic loss of :class:`~stochmix.problems.Logistic` (binary:
log(1 + exp(a.x)) - y a.x with y in {0, 1}, the same function as log(1 + exp(-s a.x))
with s = 2y - 1 in {-1, +1}; or the softmax cross-entropy). R is smooth and bounded
(0 <= R < lambda d) but not convex: R''(t) = lambda (2 - 6 t^2) / (1 + t^2)^3 is
negative for t^2 > 1/3. This is the problem of the numerical sections of Xin, Khan and
Kar's papers on decentralized variance reduction for nonconvex finite sums.

Each client is a finite sum F_i = (1/n_i) sum_r f_{i,r} with components
f_{i,r}(x) = \ell(x; a_r, y_r) + R(x) (the regularizer in every component), which is what
:meth:`NonconvexLogistic.sampled_gradients` draws from.

References:
    - R. Xin, U. A. Khan and S. Kar, "A fast randomized incremental gradient method for
      decentralized nonconvex optimization", IEEE Transactions on Automatic Control
      67(10):5150-5165, 2022 (arXiv:2011.03853): GT-SAGA on nonconvex finite sums.
    - R. Xin, U. A. Khan and S. Kar, "Fast decentralized nonconvex finite-sum
      optimization with recursive variance reduction", SIAM Journal on Optimization
      32(1):1-28, 2022 (arXiv:2008.07428): GT-SARAH.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from jaxtyping import Float, Int, Real

from .._arrays import namespace
from .._validate import as_float
from ._common import NUMPY_NAMESPACE
from .base import Problem
from .logistic import Logistic

__all__ = ["NonconvexLogistic"]


def _penalty_gradient(xp, x, reg: float):
    """grad R(x) = reg * 2 x / (1 + x^2)^2, entry by entry, in namespace ``xp``."""
    s = 1.0 + x * x
    return (2.0 * reg) * x / (s * s)


def _penalty(x: np.ndarray, reg: float) -> np.ndarray | np.floating:
    """R at each row of ``x`` (..., d): reg * sum_j x_j^2 / (1 + x_j^2), shape (...)."""
    sq = x * x
    return reg * (sq / (1.0 + sq)).sum(axis=-1)


class NonconvexLogistic(Problem):
    r"""N logistic-regression clients with the nonconvex regularizer
    R(x) = reg * sum_j x_j^2 / (1 + x_j^2) (see the module docstring for F_i).

    The data term is a :class:`~stochmix.problems.Logistic` without ridge term
    (:attr:`loss`), whose data, formulas and sampled gradients this problem reuses, adding
    R's gradient 2 reg x_j / (1 + x_j^2)^2 to every row.

    Args:
        features: one array (N, n, d) or a sequence of N arrays A_i of shape (n_i, d), at
            least one row each (the counts n_i may differ), as for ``Logistic``.
        labels: (N, n) or a sequence of N vectors y_i (n_i,) of integer class labels, as
            for ``Logistic`` ({0, 1} for the binary model).
        reg: lambda >= 0, the regularizer's coefficient (finite).
        n_classes, intercept, softmax: as for ``Logistic``.

    Attributes:
        dim: p for the binary model, p C for the multinomial one (as ``Logistic``).

    Constants: no minimiser is known (``x_star``, ``f_star`` and ``strong_convexity`` are
    None: f is not convex, and a run records the gradient norm, the consensus error and
    the objective value f(x) itself, never a distance or a gap); ``smoothness``
    L = L_loss + 2 reg, with L_loss the data term's bound (``Logistic.smoothness`` with no
    ridge term) and 2 reg = max_x abs(R''(x)) (at 0): a bound on the Lipschitz constant of every
    grad F_i, and of every component's gradient grad f_{i,r} the data term's own.

    Raises:
        ValueError, TypeError: as ``Logistic`` for the data; ``reg`` negative, not finite or
            not a real number.
    """

    def __init__(
        self,
        features: Real[np.ndarray, "n k d"] | Sequence[np.ndarray],
        labels: Real[np.ndarray, "n k"] | Sequence[np.ndarray],
        reg: float,
        n_classes: int | None = None,
        *,
        intercept: bool = False,
        softmax: bool | None = None,
    ):
        weight = as_float(reg, "reg", nonnegative=True)
        loss = Logistic(
            features, labels, 0.0, n_classes, intercept=intercept, softmax=softmax,
            allow_no_minimiser=True,
        )  # fmt: skip
        self._setup(loss, weight)

    @classmethod
    def from_stacked(
        cls,
        features: Real[np.ndarray, "r d"],
        labels: Real[np.ndarray, " r"],
        counts: Int[np.ndarray, " n"],
        reg: float,
        n_classes: int | None = None,
        *,
        intercept: bool = False,
        softmax: bool | None = None,
    ) -> NonconvexLogistic:
        """Build from all clients' samples stacked client after client: ``features``
        (R, d), ``labels`` (R,) and ``counts`` (N,) as for ``Logistic.from_stacked``; the
        other arguments as for the constructor."""
        weight = as_float(reg, "reg", nonnegative=True)
        loss = Logistic.from_stacked(
            features, labels, counts, 0.0, n_classes, intercept=intercept, softmax=softmax,
            allow_no_minimiser=True,
        )  # fmt: skip
        obj = cls.__new__(cls)
        obj._setup(loss, weight)
        return obj

    def _setup(self, loss: Logistic, reg: float) -> None:
        super().__init__(loss.n_clients, loss.dim, data=loss.data)
        self._loss = loss
        self._reg = reg

    # ----------------------------------------------------------------------- properties
    @property
    def reg(self) -> float:
        """lambda, the coefficient of R."""
        return self._reg

    @property
    def loss(self) -> Logistic:
        """The data term: a ``Logistic`` on the same samples with no ridge term (its
        ``predict`` and ``accuracy`` serve this problem's models)."""
        return self._loss

    @property
    def rows_per_client(self) -> Int[np.ndarray, " n"]:
        """n_i, shape (N,)."""
        return self._loss.rows_per_client

    @property
    def smoothness(self) -> float:
        """L = L_loss + 2 reg (see the class docstring)."""
        return self._loss.smoothness + 2.0 * self._reg

    def stacked(self) -> dict[str, Any]:
        """The data as :meth:`from_stacked` takes it (``NonconvexLogistic.from_stacked(
        **problem.stacked())`` rebuilds the problem): ``features`` (R, d) without the
        intercept column, ``labels`` (R,) int64, ``counts`` (N,), ``reg`` (lambda),
        ``n_classes``, ``intercept``, ``softmax``. Fresh copies."""
        out = self._loss.stacked()
        del out["allow_no_minimiser"]
        return out | {"reg": self._reg}

    # ----------------------------------------------------------------------- evaluation
    def gradient_formula(self, xp, data: dict, idx, x):
        """The data term's gradient (``Logistic.gradient_formula``) plus
        2 reg x / (1 + x^2)^2 entry by entry; shape (m, dim)."""
        g = self._loss.gradient_formula(xp, data, idx, x)
        return g + _penalty_gradient(xp, x, self._reg)

    def sampled_gradients(self, clients, points, picks, scale):
        """Row t: ``(scale[t] / n_c) sum_k grad loss_{picks[t, k]}(x_t) + grad R(x_t)``,
        c = ``clients[t]`` (the regularizer once, as in every component); with
        ``scale[t] = n_c / b`` the mean of the b picked components' gradients, unbiased
        for grad F_c (the :class:`~stochmix.protocols.FiniteSumProblem` contract).
        ``picks`` (m, b) are sample indices within each client, 0..n_c-1."""
        xp = NUMPY_NAMESPACE if isinstance(points, np.ndarray) else namespace(points)
        g = self._loss.sampled_gradients(clients, points, picks, scale)
        return g + _penalty_gradient(xp, points, self._reg)

    def chunk_cost(self) -> int:
        return self._loss.chunk_cost()

    def objective(self, x: Float[np.ndarray, " d"]) -> float:
        """f(x) = (1/N) sum_i (1/n_i) sum_{r in S_i} loss_r(x) + R(x), in float64."""
        x = self._check_point(x).astype(np.float64, copy=False)
        return self._loss.objective(x) + float(_penalty(x, self._reg))

    def gradient(self, x: Float[np.ndarray, " d"]) -> Float[np.ndarray, " d"]:
        """grad f(x): the data term's (``Logistic.gradient``, O(R p C)) plus grad R(x);
        dtype of x."""
        x = self._check_point(x)
        g = self._loss.gradient(x.astype(np.float64, copy=False))
        g = g + _penalty_gradient(np, x.astype(np.float64, copy=False), self._reg)
        return g.astype(x.dtype, copy=False)

    def client_objectives(self, points: Float[np.ndarray, "n d"]) -> Float[np.ndarray, " n"]:
        """F_i(points[i]) for every client i, shape (N,)."""
        pts = self._check_all_points(points)
        p64 = pts.astype(np.float64, copy=False)
        val = self._loss.client_objectives(p64) + _penalty(p64, self._reg)
        return val.astype(pts.dtype, copy=False)

    # ----------------------------------------------------------------------- generation
    @classmethod
    def random(
        cls,
        n_clients: int,
        dim: int,
        rows_per_client: int | tuple[int, int] = 20,
        *,
        reg: float = 0.1,
        n_classes: int = 2,
        heterogeneity: float = 1.0,
        scale: float = 1.0,
        intercept: bool = False,
        softmax: bool | None = None,
        seed=None,
    ) -> NonconvexLogistic:
        """A random heterogeneous instance: the samples of ``Logistic.random`` with the
        same arguments and seed (``rows_per_client`` a fixed n_i or a pair (low, high),
        each n_i uniform on low..high inclusive), and R of coefficient ``reg``."""
        weight = as_float(reg, "reg", nonnegative=True)
        made = Logistic.random(
            n_clients, dim, rows_per_client, n_classes=n_classes, reg=1.0,
            heterogeneity=heterogeneity, scale=scale, intercept=intercept, softmax=softmax,
            seed=seed,
        )  # fmt: skip
        data = made.stacked()
        del data["allow_no_minimiser"]
        return cls.from_stacked(**(data | {"reg": weight}))

    def __repr__(self) -> str:
        kind = f"softmax, C={self._loss.n_classes}" if self._loss.multinomial else "binary"
        return (
            f"NonconvexLogistic(n_clients={self.n_clients}, dim={self.dim}, {kind}, "
            f"reg={self._reg})"
        )

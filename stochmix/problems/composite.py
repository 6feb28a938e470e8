r"""Composite problems: a smooth problem plus a regularizer with a prox.

:class:`Composite` is F(x) = f(x) + r(x) with f = (1/N) sum_i F_i any smooth problem of
the library and r a :class:`~stochmix.problems.regularizers.Regularizer`: node i's
objective is F_i + r, so the global objective is the average of the nodes'. The
gradients the engine asks for are those of the smooth parts F_i (the hot path is the
wrapped problem's, fast paths included); proximal methods read :attr:`Composite.regularizer`
for the prox. Smooth methods refuse a composite problem (they would minimise f alone):
give them :meth:`Composite.with_subgradients` (a subgradient of r added to every
gradient: decentralized subgradient methods) or :attr:`Composite.smooth`.

Certified minimiser. :attr:`Composite.x_star` is computed once by accelerated proximal
gradient (FISTA with adaptive restart, step 1/L, L the smooth part's constant or found
by backtracking) on the global problem, then proximal-gradient steps until the fixed-point
residual of the prox-gradient map

.. math::

    \rho(x) = \lVert x - \operatorname{prox}_{r/L}(x - \nabla f(x)/L)\rVert
              \,/\, \max(\lVert x\rVert, \lVert\nabla f(x)\rVert/L, 10^{-300})

is at most 1e-12 (:attr:`Composite.residual` keeps it; a RuntimeWarning says when the
iteration budget ends above it).

Metrics. ``objective`` is (f + r)(x) - (f + r)(x_star); ``gradient_norm`` is the norm of
the gradient mapping G(x) = L (x - prox_{r/L}(x - grad f(x)/L)), which is grad f(x) when
r = 0 and zero exactly at the composite minimiser; ``distance`` is ||x - x_star||.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
from jaxtyping import Float

from .._validate import show
from ..protocols import ProblemLike
from ._common import DERIVED, fingerprint
from .base import Problem, rows_in_closed_form
from .regularizers import Box, GroupLasso, Regularizer

__all__ = ["Composite", "Subgradients", "proximal_minimiser"]

#: the fixed-point residual x_star is certified to
RESIDUAL = 1e-12


def _gradient_map(gradient, prox, x, step):
    """(T(x), grad f(x)) with T(x) = prox_{step r}(x - step grad f(x))."""
    g = gradient(x)
    return prox(x - step * g, step), g


def _residual(x, t, g, step) -> float:
    scale = max(float(np.linalg.norm(x)), float(np.linalg.norm(g)) * step, 1e-300)
    return float(np.linalg.norm(x - t)) / scale


def proximal_minimiser(
    gradient, objective, regularizer: Regularizer, x0, smoothness=None, max_iter=200_000
):
    """argmin f + r by FISTA with adaptive restart, then plain proximal-gradient steps to
    a fixed-point residual of at most 1e-12 (see the module docstring).

    Args:
        gradient: x -> grad f(x), shape (d,).
        objective: x -> f(x) (used by the backtracking).
        regularizer: r.
        x0: the starting point, shape (d,).
        smoothness: L, a Lipschitz constant of grad f, or None (backtracking from 1).
        max_iter: the iteration budget of both stages together.

    Returns:
        (x, residual): the minimiser and its certified residual.
    """

    def prox(v, t):
        return regularizer.prox(v[None, :], t)[0]

    lipschitz = 1.0 if smoothness is None else float(smoothness)
    x = np.asarray(x0, dtype=np.float64).copy()
    y, momentum = x.copy(), 1.0
    for _ in range(max_iter):
        t, g = _gradient_map(gradient, prox, y, 1.0 / lipschitz)
        if smoothness is None:  # backtracking: f(T) <= f(y) + <g, T - y> + L/2 ||T - y||^2
            fy = objective(y)
            while objective(t) > fy + g @ (t - y) + 0.5 * lipschitz * (
                (t - y) @ (t - y)
            ) + 1e-15 * abs(fy):
                lipschitz *= 2.0
                t, g = _gradient_map(gradient, prox, y, 1.0 / lipschitz)
        if _residual(y, t, g, 1.0 / lipschitz) <= RESIDUAL:
            x = y
            break
        if (y - t) @ (t - x) > 0.0:  # gradient restart (O'Donoghue and Candes)
            x, y, momentum = t, t, 1.0
            continue
        next_momentum = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * momentum * momentum))
        y = t + ((momentum - 1.0) / next_momentum) * (t - x)
        x, momentum = t, next_momentum
    best, residual, extra = x, math.inf, 100
    for _ in range(max_iter):  # monotone steps from the accelerated point, to rounding
        t, g = _gradient_map(gradient, prox, x, 1.0 / lipschitz)
        now = _residual(x, t, g, 1.0 / lipschitz)
        if now < residual:
            best, residual = x, now
        elif residual <= RESIDUAL:
            break  # certified, and no longer improving
        if residual <= RESIDUAL:
            extra -= 1
            if extra < 0:
                break
        x = t
    return best, residual


class Composite(Problem):
    r"""F(x) = f(x) + r(x): a smooth problem and a regularizer (see the module docstring).

    Args:
        problem: the smooth part, any problem of the library (its gradients are the ones
            the engine asks for).
        regularizer: r, a :class:`~stochmix.problems.regularizers.Regularizer`
            (:class:`~stochmix.problems.regularizers.L1`, ``ElasticNet``, ``GroupLasso``,
            ``NonNegative``, ``Box``).

    Attributes:
        smooth: the smooth problem f.
        regularizer: r.
    """

    # the smooth part's capabilities, as it declares them (the gradients are its own)
    pure_gradients = property(lambda self: bool(getattr(self.smooth, "pure_gradients", False)))
    unchecked_gradients = property(
        lambda self: bool(getattr(self.smooth, "unchecked_gradients", False))
    )
    client_slices = property(lambda self: bool(getattr(self.smooth, "client_slices", False)))
    compiled_gradient = property(
        lambda self: bool(getattr(self.smooth, "compiled_gradient", False))
    )
    compiled_samples = property(lambda self: bool(getattr(self.smooth, "compiled_samples", False)))
    #: the smooth part's: r's value and prox (in :meth:`objective_gap`, :meth:`gradient`)
    #: cost O(d) more
    closed_form_metrics = property(
        lambda self: frozenset(getattr(self.smooth, "closed_form_metrics", ()))
    )
    _derived = DERIVED | {"_solution"}

    def __init__(self, problem, regularizer: Regularizer):
        if not isinstance(problem, ProblemLike):
            raise TypeError(f"problem must be a stochmix Problem, got {show(problem)}")
        if isinstance(problem, Composite):
            raise TypeError("problem is composite already: give its smooth part one regularizer")
        if not isinstance(regularizer, Regularizer):
            raise TypeError(
                "regularizer must be a Regularizer (L1, ElasticNet, GroupLasso, NonNegative, "
                f"Box), got {show(regularizer)}"
            )
        super().__init__(problem.n_clients, problem.dim)
        self.smooth: Any = problem  # a Problem, or a wrapper meeting its contract
        self.regularizer = regularizer
        self._solution: tuple | None = None
        if isinstance(regularizer, GroupLasso):
            regularizer.membership(problem.dim)  # a bad group layout fails here, not mid-run
        if isinstance(regularizer, Box):
            regularizer.check_dim(problem.dim)  # bounds of another length: here, not mid-run

    # ---------------------------------------------------------------- the smooth gradients
    def gradients(self, clients, points):
        """grad F_i of the smooth parts (r is handled by the methods' prox)."""
        return self.smooth.gradients(clients, points)

    def gradients_unchecked(self, idx, x):
        return self.smooth.gradients_unchecked(idx, x)

    def bind_clients(self, idx, like):
        return self.smooth.bind_clients(idx, like)

    def row_gradient(self, dtype):
        return self.smooth.row_gradient(dtype)

    def sampled_row_gradient(self, dtype):
        found = getattr(self.smooth, "sampled_row_gradient", None)
        return found(dtype) if callable(found) else None

    def gradient_formula(self, xp, data, idx, x):
        return self.smooth.gradient_formula(xp, data, idx, x)

    def chunk_cost(self) -> int:
        return self.smooth.chunk_cost()

    def _slice_formula(self, dtype):
        return self.smooth._slice_formula(dtype)

    @property  # type: ignore[misc]
    def data(self):  # type: ignore[override]
        return self.smooth.data

    def __getattr__(self, name: str):
        # what else the smooth problem offers (its Hessians for exact local solves, its
        # samples for minibatches); only reached when normal lookup fails
        if name.startswith("__") or name in ("smooth", "regularizer", "_solution"):
            raise AttributeError(name)
        return getattr(self.__dict__["smooth"], name)

    # ---------------------------------------------------------------- the composite values
    @property
    def smoothness(self):
        return getattr(self.smooth, "smoothness", None)

    @property
    def strong_convexity(self):
        """The smooth part's constant (plus l2 for an elastic net)."""
        mu = getattr(self.smooth, "strong_convexity", None)
        if mu is None:
            return None
        return mu + float(getattr(self.regularizer, "l2", 0.0))

    def _solve(self) -> tuple:
        if self._solution is None:
            smooth = self.smooth
            start = getattr(smooth, "x_star", None)
            x0 = np.zeros(self.dim) if start is None else np.asarray(start, dtype=np.float64)
            x, residual = proximal_minimiser(
                smooth.gradient, smooth.objective, self.regularizer, x0, self.smoothness
            )
            if residual > 1e-12:
                warnings.warn(
                    f"the composite minimiser's prox-gradient residual is {residual:.2e}, above "
                    "1e-12, when the iteration budget ended",
                    RuntimeWarning,
                    stacklevel=3,
                )
            x.setflags(write=False)
            self._solution = (x, residual)
        return self._solution

    @property
    def x_star(self) -> Float[np.ndarray, " d"]:
        """The minimiser of f + r, certified (see the module docstring)."""
        return self._solve()[0]

    @property
    def residual(self) -> float:
        """The prox-gradient fixed-point residual of :attr:`x_star` (at most 1e-12)."""
        return self._solve()[1]

    def objective(self, x) -> float:
        """(f + r)(x)."""
        x = self._check_point(x)
        return float(self.smooth.objective(x)) + self.regularizer.value(x)

    def objective_gap(self, x) -> float:
        """(f + r)(x) - (f + r)(x_star), from the smooth part's own gap (a closed form
        where it has one) and r."""
        x = self._check_point(x)
        star = self.x_star
        smooth = self.smooth.objective_gap(x) - self.smooth.objective_gap(star)
        return float(smooth) + self.regularizer.value(x) - self.regularizer.value(star)

    def gradient(self, x) -> Float[np.ndarray, " d"]:
        """The gradient mapping L (x - prox_{r/L}(x - grad f(x)/L)) (see the module
        docstring); grad f(x) where L is unknown and r has no prox step to take."""
        x = self._check_point(x)
        lipschitz = self.smoothness
        g = np.asarray(self.smooth.gradient(x), dtype=np.float64)
        if lipschitz is None:
            return g
        t = self.regularizer.prox((x - g / lipschitz)[None, :], 1.0 / lipschitz)[0]
        return lipschitz * (x - t)

    def closed_form_rows(self, name: str, models):
        """:meth:`objective_gap` (``"objective"``) or the norm of the gradient mapping
        :meth:`gradient` (``"gradient_norm"``) at every row of ``models`` (B, d), from the
        smooth part's own (see :meth:`Problem.closed_form_rows`); None where it has none."""
        if name not in ("objective", "gradient_norm"):
            raise ValueError(f'name must be "objective" or "gradient_norm", got {name!r}')
        models = np.asarray(models, dtype=np.float64)
        if name == "objective":
            gaps = rows_in_closed_form(self.smooth, "objective", models)
            if gaps is None:
                return None
            star = self.x_star
            smooth = gaps - self.smooth.objective_gap(star)
            values = np.fromiter((self.regularizer.value(x) for x in models), float, len(models))
            return smooth + values - self.regularizer.value(star)  # (objective_gap's order)
        g = rows_in_closed_form(self.smooth, "gradient", models)
        if g is None:
            return None
        lipschitz = self.smoothness
        if lipschitz is None:
            return np.linalg.norm(g, axis=1)
        t = self.regularizer.prox(models - g / lipschitz, 1.0 / lipschitz)
        return np.linalg.norm(lipschitz * (models - t), axis=1)

    def client_objectives(self, points):
        return self.smooth.client_objectives(points) + np.array(
            [self.regularizer.value(p) for p in np.asarray(points)]
        )

    def stacked(self) -> dict:
        """The smooth part's data (its ``stacked()``: for a LASSO, a least-squares
        problem's ``features``, ``targets``, ``counts`` and ``reg``) plus ``regularizer``,
        r itself (an :class:`~stochmix.problems.regularizers.L1`'s weight is
        ``regularizer.weight``)."""
        return {**self.smooth.stacked(), "regularizer": self.regularizer}

    def with_subgradients(self) -> Subgradients:
        """This problem for subgradient methods: every gradient is grad F_i + a
        subgradient of r (see :class:`Subgradients`)."""
        return Subgradients(self)

    def fingerprint(self) -> str:
        return fingerprint(self, self._derived)

    def __repr__(self) -> str:
        return f"Composite({self.smooth!r}, {self.regularizer!r})"


class Subgradients(Problem):
    r"""A composite problem seen by a smooth method: row t of the gradients is
    grad F_i(x_t) + s(x_t), s(x) a subgradient of r at x (for L1, lam sign(x)); the
    minimiser and metrics stay the composite problem's. Decentralized subgradient descent
    (DGD with decaying steps) on it converges to the composite minimiser, slowly; the
    proximal methods converge to it exactly. Indicator regularizers (boxes) have no
    subgradient to offer and are refused.

    Args:
        problem: a :class:`Composite`.
    """

    pure_gradients = property(lambda self: self.composite.pure_gradients)
    unchecked_gradients = property(lambda self: self.composite.unchecked_gradients)
    client_slices = False
    compiled_gradient = False

    def __init__(self, problem: Composite):
        if not isinstance(problem, Composite):
            raise TypeError(f"problem must be a Composite, got {show(problem)}")
        if problem.regularizer.indicator:
            raise ValueError(
                f"problem's regularizer {problem.regularizer!r} is an indicator: it has no "
                "subgradient; use a proximal method"
            )
        super().__init__(problem.n_clients, problem.dim)
        self.composite = problem

    def gradients(self, clients, points):
        return self.gradients_unchecked(*self._check_batch(clients, points))

    def gradients_unchecked(self, idx, x):
        return self.composite.smooth.gradients_unchecked(
            idx, x
        ) + self.composite.regularizer.subgradient(x)

    def bind_clients(self, idx, like):
        smooth = self.composite.smooth.bind_clients(idx, like)
        sub = self.composite.regularizer.subgradient
        return lambda x: smooth(x) + sub(x)

    x_star = property(lambda self: self.composite.x_star)
    smoothness = property(lambda self: self.composite.smoothness)
    strong_convexity = property(lambda self: self.composite.strong_convexity)

    def objective(self, x) -> float:
        return self.composite.objective(x)

    def objective_gap(self, x) -> float:
        return self.composite.objective_gap(x)

    def gradient(self, x):
        return self.composite.gradient(x)

    def chunk_cost(self) -> int:
        return self.composite.chunk_cost()

    def stacked(self) -> dict:
        """The composite problem's :meth:`Composite.stacked`."""
        return self.composite.stacked()

    def __repr__(self) -> str:
        return f"Subgradients({self.composite!r})"

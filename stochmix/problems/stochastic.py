"""Stochastic gradients: minibatches drawn from a seeded generator, or additive noise.

Both wrap a problem and keep everything else of it (x_star, objective, constants); only
:meth:`gradients` becomes random. The run loop reseeds a wrapper at the start of every run
from the run's seed, so the same seed gives the same gradients, on either backend (the
draws are made with NumPy and sent to the points' device).
"""

from __future__ import annotations

import numpy as np
from jaxtyping import Float, Int

from .._arrays import Array, is_numpy, namespace
from .._arrays import like as to_like
from .._validate import as_float, as_int, as_seed, show
from ..protocols import ProblemLike
from ._common import DERIVED, fingerprint

__all__ = [
    "Minibatch",
    "Noisy",
]


class _Stochastic:
    """Shared parts: delegation to the wrapped problem and seeding.

    The wrappers meet the problem contract (:class:`stochmix.protocols.ProblemLike`)
    without deriving from :class:`~stochmix.problems.Problem`, whose ``minibatch`` and
    ``noisy`` build them: so this module does not import ``base`` and the package's
    dependencies point one way."""

    pure_gradients = False  # random draws: never split into chunks or threads

    def __init__(self, problem, seed=None):
        if not isinstance(problem, ProblemLike):
            raise TypeError(f"problem must be a stochmix Problem, got {show(problem)}")
        if seed is not None:  # only an integer seeds the draws (with the run's seed)
            seed = as_int(seed, "seed", minimum=0)
        self._n_clients = int(problem.n_clients)
        self._dim = int(problem.dim)
        self.problem = problem
        self.seed = seed
        self.reseed(None)

    n_clients = property(lambda self: self._n_clients, doc="N, the number of clients.")
    dim = property(lambda self: self._dim, doc="d, the dimension of the model.")

    def reseed(self, run_seed=None) -> None:
        """Restart the draws from (this wrapper's seed, the run's seed: an integer, or
        None for fresh draws)."""
        parts = [s for s in (self.seed, as_seed(run_seed, "run_seed")) if isinstance(s, int)]
        self._rng = np.random.default_rng(parts or None)

    def fingerprint(self) -> str:
        """A digest of the wrapped problem and this wrapper's parameters (checkpoints)."""
        return fingerprint(self, DERIVED)

    def minibatch(self, batch_size: int, seed=None):
        """This problem with minibatch gradients (see :class:`Minibatch`)."""
        return Minibatch(self, batch_size, seed)

    def noisy(self, sigma: float, seed=None):
        """This problem with Gaussian noise added to every gradient (see :class:`Noisy`)."""
        return Noisy(self, sigma, seed)

    def rng_state(self) -> dict:
        """The state of the draws (saved in checkpoints)."""
        return dict(self._rng.bit_generator.state)

    def set_rng_state(self, state: dict) -> None:
        """Continue the draws from a saved state."""
        self._rng.bit_generator.state = state

    def stacked(self) -> dict:
        """The data of the problem it wraps (its ``stacked()``)."""
        return self.problem.stacked()

    x_star = property(lambda self: self.problem.x_star)
    f_star = property(lambda self: self.problem.f_star)
    smoothness = property(lambda self: self.problem.smoothness)
    strong_convexity = property(lambda self: self.problem.strong_convexity)

    closed_form_metrics = property(lambda self: self.problem.closed_form_metrics)

    def objective(self, x: Float[np.ndarray, " d"]) -> float:
        return self.problem.objective(x)

    def objective_gap(self, x: Float[np.ndarray, " d"]) -> float:
        return self.problem.objective_gap(x)

    def closed_form_rows(self, name: str, models):
        return self.problem.closed_form_rows(name, models)

    def gradient(self, x: Float[np.ndarray, " d"]) -> Float[np.ndarray, " d"]:
        """The exact full gradient (metrics never use a random one)."""
        return self.problem.gradient(x)


class Minibatch(_Stochastic):
    """Minibatch gradients of a problem whose clients hold samples (LeastSquares and the
    learning problems): each requested client draws ``batch_size`` of its samples uniformly
    with replacement, and its gradient is the sum over them scaled by n_i / batch_size, an
    unbiased estimate of grad F_i."""

    def __init__(self, problem, batch_size: int, seed=None):
        if not isinstance(problem, ProblemLike):
            raise TypeError(f"problem must be a stochmix Problem, got {show(problem)}")
        if not hasattr(problem, "_sampled_gradient_formula"):
            raise TypeError(
                f"problem {type(problem).__name__} holds no samples to draw minibatches from; "
                "use Noisy(problem, sigma) for noisy gradients"
            )
        self.batch_size = as_int(batch_size, "batch_size", minimum=1)
        super().__init__(problem, seed)

    def gradients(
        self, clients: Int[np.ndarray, " m"], points: Float[Array, "m d"]
    ) -> Float[Array, "m d"]:
        """Row t is a minibatch estimate of grad F_{clients[t]}(points[t])."""
        idx, x = self.problem._check_batch(clients, points)
        counts = self.problem.rows_per_client[idx]
        picks = (self._rng.random((idx.size, self.batch_size)) * counts[:, None]).astype(np.int64)
        scale = counts / self.batch_size
        xp = namespace(x)
        return self.problem._sampled_gradient_formula(
            xp, to_like(idx, x), x, to_like(picks, x), to_like(scale.astype(float), x)
        )

    @property
    def samples_per_gradient(self) -> Int[np.ndarray, " n"]:
        """The samples one gradient of each client draws: ``batch_size`` each (a Result's
        ``sample_gradients`` column counts them)."""
        return np.full(self.n_clients, self.batch_size, dtype=np.int64)

    def __repr__(self) -> str:
        return f"Minibatch({self.problem!r}, batch_size={self.batch_size})"


class Noisy(_Stochastic):
    """grad F_i(x) + sigma * xi with xi standard normal, independent across calls: the
    stochastic-gradient model for problems without samples (e.g. Quadratic)."""

    def __init__(self, problem, sigma: float, seed=None):
        self.sigma = as_float(sigma, "sigma", nonnegative=True)
        super().__init__(problem, seed)

    def gradients(
        self, clients: Int[np.ndarray, " m"], points: Float[Array, "m d"]
    ) -> Float[Array, "m d"]:
        """Row t is grad F_{clients[t]}(points[t]) plus Gaussian noise of scale sigma."""
        exact = self.problem.gradients(clients, points)
        noise = self.sigma * self._rng.standard_normal(exact.shape)
        if is_numpy(exact):
            return exact + noise.astype(exact.dtype, copy=False)
        return exact + to_like(noise, exact)

    def __repr__(self) -> str:
        return f"Noisy({self.problem!r}, sigma={self.sigma})"

"""The arguments of a run: :class:`RunOptions`, the one record of everything
:func:`~stochmix.engine.runner.loop.run` takes besides the method, problem, participation
and rounds, made and checked once, before any work (errors name the argument and its
value); nothing below :func:`run` lists the options again. :func:`stochmix.explain` takes
the same record.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ... import protocols
from ..._validate import (
    as_float,
    as_float_dtype,
    as_int,
    as_real_array,
    as_seed,
    choice,
    flag_or_choice,
)
from ..backends.names import make_backend
from ..model.method import Method
from .recorder import METRICS, check_schedule

__all__ = ["DEFAULT_METRICS", "RunOptions", "checked_clock"]

#: the metrics a run records unless told otherwise
DEFAULT_METRICS = ("distance", "objective", "gradient_norm", "consensus")


@dataclass(frozen=True, eq=False)
class RunOptions:
    """Every keyword argument of :func:`~stochmix.engine.runner.loop.run`, with its
    default (see ``run`` for what each means). Made by ``run`` from its arguments, or
    ``RunOptions.of(**options)`` from keywords (unknown names refused), then
    :meth:`checked` once before any work; frozen, so that no part of the run changes
    what the others read. The fields take what a user passes (any type: :meth:`checked`
    checks each, naming it, before any work)."""

    x0: Any = None
    seed: Any = 0
    backend: Any = "numpy"
    dtype: Any = np.float64
    metrics: Any = DEFAULT_METRICS
    on_divergence: Any = "warn"
    callback: Any = None
    device: Any = None
    mixing: Any = None
    progress: Any = "auto"
    checkpoint: Any = None
    checkpoint_every: Any = 100
    compiled: Any = "auto"
    evaluate_every: Any = "auto"
    divergence_threshold: Any = 1e50
    storage: Any = "auto"
    clock: Any = None
    #: whether :meth:`checked` made this record (the run's set-up refuses any other)
    is_checked: bool = field(default=False, repr=False)

    @classmethod
    def of(cls, **options) -> RunOptions:
        """The record of ``options`` (keyword arguments of ``run``), the rest defaults."""
        names = {f.name for f in dataclasses.fields(cls) if f.name != "is_checked"}
        unknown = sorted(set(options) - names)
        if unknown:
            raise TypeError(f"options that run() does not take: {unknown}")
        return cls(**options)

    def replace(self, **changes) -> RunOptions:
        """A copy with ``changes`` (still checked if this one was: the changes must be
        checked values)."""
        return dataclasses.replace(self, **changes)

    def checked(self, method, problem, participation, rounds) -> tuple[int, RunOptions]:
        """``rounds`` and this record checked against the run's parts, before any work,
        with errors naming the argument, and normalised (the seed, the metrics as a tuple,
        ``x0`` an array of the problem's shape, the clock of an asynchronous method)."""
        if not isinstance(method, Method):
            raise TypeError(f"method must be a stochmix Method, got {type(method).__name__}")
        rounds = as_int(rounds, "rounds", minimum=0)
        _check_parts(problem, participation, self.backend, self.progress)
        choice(self.on_divergence, "on_divergence", ("warn", "raise"))
        metrics = self.metrics
        if isinstance(metrics, str) or not hasattr(metrics, "__iter__"):
            raise TypeError(
                f"metrics must be a tuple of metric names among {METRICS}, got {metrics!r}"
            )
        metrics = tuple(metrics)
        for m in metrics:
            choice(m, "metrics entry", METRICS)
        evaluate_every = check_schedule(self.evaluate_every)
        threshold = as_float(self.divergence_threshold, "divergence_threshold", positive=True)
        seed = as_seed(self.seed)  # the one normalisation: every later use sees the same value
        n = int(problem.n_clients)
        if int(participation.n_clients) != n:
            raise ValueError(
                f"participation covers {participation.n_clients} clients but the problem has {n}"
            )
        method.check_participation(participation)
        method.check_problem(problem)
        if getattr(participation, "loses_uploads", False) and not getattr(
            method, "reads_uploads", False
        ):
            raise ValueError(
                f"participation {participation!r} loses uploads, which {method.name} does not "
                "model (federated methods with local training do; asynchronous and "
                "decentralized methods, Scaffnew, do not)"
            )
        x0 = _check_starting_point(self.x0, int(problem.dim), n, method)
        every = as_int(self.checkpoint_every, "checkpoint_every", minimum=1)
        if self.callback is not None and not callable(self.callback):
            raise TypeError(
                f"callback must be callable as callback(r, z, ctx), got {self.callback!r}"
            )
        choice(self.storage, "storage", ("auto", "full", "compact"))
        as_float_dtype(self.dtype)
        compiled = flag_or_choice(self.compiled, "compiled", ("auto",))
        clock = checked_clock(self.clock, method, participation)
        return rounds, self.replace(
            x0=x0, seed=seed, metrics=metrics, evaluate_every=evaluate_every,
            divergence_threshold=threshold, checkpoint_every=every, compiled=compiled,
            clock=clock, is_checked=True,
        )  # fmt: skip

    def make_backend(self):
        """The backend object these options name (``backend``, ``dtype``, ``device``,
        ``mixing``, ``compiled``)."""
        options = {
            k: v for k, v in (("device", self.device), ("mixing", self.mixing)) if v is not None
        }
        if self.compiled != "auto":
            options["compiled"] = self.compiled
        return make_backend(self.backend, self.dtype, **options)


def checked_clock(clock, method, participation):
    """``clock`` checked before any work (a Clock over the participation's clients, on a
    single-process backend), or the default clock of an asynchronous method, or None.

    Every source of partial participation goes through the method's
    ``check_participation`` here, in one place: the process itself (checked first, by
    :meth:`RunOptions.checked` or a configuration), then, where the clock's ``deadline``
    or ``availability`` or lost uploads drop nodes from its rounds, the process so
    thinned (:func:`~stochmix.participation.thinned.thinned`): a method that needs every
    node in every round refuses them all, naming what drops the nodes."""
    from ...participation.thinned import thinned

    clock = _checked_clock(clock, method, participation)
    if not getattr(method, "asynchronous", False):  # its clock refuses both (above)
        seen = thinned(participation, clock)
        if seen is not participation:
            method.check_participation(seen)
    return clock


def _checked_clock(clock, method, participation):
    from ...timing import Clock, TimeModel  # the timing layer sits above the engine

    if clock is None:
        return Clock(TimeModel()) if getattr(method, "asynchronous", False) else None
    if not isinstance(clock, Clock):
        raise TypeError(f"clock must be a stochmix.timing.Clock, got {type(clock).__name__}")
    clock.check_clients(int(participation.n_clients))
    if getattr(participation, "activates", "nodes") == "edges":
        raise ValueError(
            f"clock must be None with participation {participation!r}: a clock times node "
            "participation; an edge-activation process keeps its own time (PoissonClocks, "
            f"RandomEdge's rate), got clock={clock!r}"
        )
    if getattr(method, "asynchronous", False) and clock.deadline is not None:
        raise ValueError(
            f"clock.deadline must be None for {method.name}: an asynchronous server waits "
            f"for no cohort, got deadline={clock.deadline!r}"
        )
    if getattr(method, "asynchronous", False) and clock.availability is not None:
        raise ValueError(
            f"clock.availability must be None for {method.name}: its arrival schedule draws "
            f"from every client, got availability={clock.availability!r}"
        )
    return clock


def _check_starting_point(x0, dim: int, n_clients: int | None = None, method=None) -> np.ndarray:
    """x0 of shape (dim,) (every row that starts at the model starts there), or, for a
    method whose model block holds one row per node and no server (decentralized:
    ``client_node == 0``), (n_clients, dim): node i starts at row i."""
    if x0 is None:
        return np.zeros(dim)
    x0 = as_real_array(x0, "x0", finite=False)  # refuses bool, complex, strings
    per_node = method is not None and getattr(method, "client_node", None) == 0
    if x0.ndim == 2 and per_node and x0.shape != (n_clients, dim):
        raise ValueError(
            f"x0 must have shape ({dim},) or, one row per node, ({n_clients}, {dim}); "
            f"got {x0.shape}"
        )
    if x0.ndim == 2 and not per_node:
        name = type(method).__name__ if method is not None else "this method"
        raise ValueError(
            f"x0 must have shape ({dim},), got {x0.shape}: per-node starting points "
            f"(n_clients, dim) are for decentralized methods (no server row); {name} "
            "starts every client from the one point x0"
        )
    if x0.ndim != 2 and x0.shape != (dim,):
        raise ValueError(f"x0 must have shape ({dim},), got {x0.shape}")
    if not np.isfinite(x0).all():
        raise ValueError("x0 must be finite")
    return x0


def _check_parts(problem, participation, backend, progress) -> None:
    """What ``run`` needs of its arguments, checked before any work against the contracts
    of :mod:`stochmix.protocols`, so that swapped or missing ones get an error naming
    them."""
    if not isinstance(problem, protocols.ProblemLike):
        raise TypeError(
            f"problem must be a stochmix problem (with n_clients, dim and gradients), "
            f"got {type(problem).__name__}"
        )
    if not isinstance(participation, protocols.ParticipationLike):
        raise TypeError(
            "participation must be a participation process (with n_clients, probabilities "
            f"and masks or participants), got {type(participation).__name__}"
        )
    if not isinstance(backend, (str, protocols.BackendLike)):
        raise TypeError(f'backend must be "numpy", "torch" or a backend object, got {backend!r}')
    if progress != "auto" and not isinstance(progress, (bool, np.bool_)):
        raise ValueError(f'progress must be "auto", True or False, got {progress!r}')

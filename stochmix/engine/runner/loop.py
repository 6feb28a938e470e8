"""The run loop: it applies the phases a method returns and records the results.

:func:`run` checks its arguments and hands the work to small parts, each testable alone:

* :class:`~stochmix.engine.plan.planner.RoundPlanner`: each round's plan, built from the
  method's phases or reused (plan cache, round templates);
* :func:`~stochmix.engine.backends.dispatch.execute`: applies a plan to the state;
* :class:`~stochmix.engine.runner.recorder.Recorder`: the per-round record (model, metrics,
  participants, wall time);
* :class:`~stochmix.engine.runner.checkpointer.Checkpointer`: saving, verifying and resuming.

It knows nothing about any particular method; it needs a
:class:`~stochmix.engine.model.method.Method` and objects that meet the contracts declared in
:mod:`stochmix.protocols`: a problem (``n_clients``, ``dim``, ``gradients(clients,
points)``, optionally ``x_star``, ``f_star``, ``objective(x)``, ``gradient(x)``, ...), a
participation process (``n_clients``, ``probabilities`` and ``masks(seed)`` or
``participants(seed)``) and a backend.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any, NamedTuple

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
from ..backends.dispatch import execute
from ..backends.names import make_backend
from ..backends.threads import resolve_threads, torch_threads
from ..model.layout import Layout
from ..model.method import Method, RunContext
from ..plan.capabilities import Capabilities, capabilities
from ..plan.gradients import RowGradient, row_gradient
from ..plan.liveness import PlanCheck, find_scratch
from ..plan.planner import RoundPlanner
from ..plan.round_plan import plan_round
from ..plan.slowpath import SLOW_PATH_MIN_ROUNDS, SlowPaths
from .checkpointer import Checkpointer, CheckpointWarning, run_identity
from .context import make_context
from .progress import Progress
from .recorder import METRICS, Recorder, check_schedule
from .result import Result
from .rounds import DivergenceError, DivergenceWarning, participant_stream, run_rounds
from .segments import segmenter

if TYPE_CHECKING:
    from ...protocols import BackendLike, ParticipationLike, ProblemLike
else:
    # run() checks these contracts itself, first, with errors naming the argument
    # (_check_parts); a runtime type checker (the test suite's) sees no constraint here
    BackendLike = ParticipationLike = ProblemLike = Any

__all__ = ["CheckpointWarning", "DivergenceError", "DivergenceWarning", "run"]

#: storage="auto" leaves rows out of states that would take at least this many bytes in
#: full (memory matters there, and rounds get faster: fewer rows to move; smaller runs skip
#: the few milliseconds of probing), and out of every state of a run on the compiled loop
#: (a long run by construction, whose rounds the compact state makes faster at any size:
#: FedAvg at 10^4 clients, d = 10, 0.17 against 0.28 ms a round)
COMPACT_MIN_BYTES = 1 << 26


def run(
    method: Method,
    problem: ProblemLike,
    participation: ParticipationLike,
    rounds: int,
    *,
    x0=None,
    seed=0,
    backend: str | BackendLike = "numpy",
    dtype=np.float64,
    metrics=("distance", "objective", "gradient_norm", "consensus"),
    on_divergence: str = "warn",
    callback=None,
    device=None,
    mixing=None,
    progress="auto",
    checkpoint=None,
    checkpoint_every: int = 100,
    compiled="auto",
    evaluate_every="auto",
    divergence_threshold: float = 1e50,
    storage="auto",
    clock=None,
) -> Result:
    """Run ``method`` on ``problem`` for ``rounds`` rounds of ``participation``.

    Each round draws one participation mask, asks the method for its phases and applies
    them in order: ``Z[rows] <- mix @ Z + inject @ G`` with ``G`` the gradients of the
    clients the phase names, taken at the method's points of the current ``Z``.

    Args:
        method: the algorithm (a :class:`Method`).
        problem: the objective, with per-client gradients.
        participation: the participation process, over ``problem.n_clients`` clients.
        rounds: number of rounds.
        x0: starting point, shape (dim,); zeros by default. Decentralized methods
            (``client_node == 0``) also take (n_clients, dim): node i starts at row i.
        seed: seeds the participation stream; the same seed gives the same masks, so every
            method in a comparison sees the same rounds.
        backend: "numpy" (SciPy sparse on the CPU), "torch" (tensors on ``device``),
            "distributed" (inside an initialised torch.distributed process group: client
            rows sharded over the ranks, the same bits on any number of ranks; see
            :mod:`stochmix.engine.backends.distributed`) or a backend object. Where Torch is
            loaded, the run's Torch work (the torch backend, a TorchModel's gradients)
            runs on the backend's ``threads`` (default one intra-op thread), set for the
            run and restored after it, even when it raises
            (:mod:`stochmix.engine.backends.threads`).
        device: Torch device ("cpu", "cuda", "cuda:1", ...); torch backend only.
        mixing: "dense", "sparse" or "auto" (default): how the torch backend applies phases.
        compiled: "auto" (default), True or False: whether the NumPy backend runs
            node-local phases through Numba-compiled loops over one node at a time (needs
            Numba, a core dependency where it supports the Python, and a problem with a
            compiled gradient: Quadratic, LeastSquares, Logistic). "auto" does so when it
            can, the run is long enough to repay compiling (about rounds x expected
            participants x dim >= 3e8) and a round touches at least 8192 node entries
            (participants x dim); True
            always (an error when it cannot); False never. Results agree with the NumPy
            path to rounding.
        progress: "auto" shows a progress line on a terminal for runs longer than two
            seconds (and the line a resumed checkpoint writes); True forces it, False hides
            it.
        checkpoint: a file path. Every ``checkpoint_every`` rounds the run's state is saved
            there atomically; if the file exists when the run starts, the run resumes from
            it (it must have been written by the same method, problem, participation, seed
            and backend) and continues exactly as if it had never stopped. A resumed run
            says so: "resumed from round 120 of 300 (checkpoint PATH)", or "checkpoint
            PATH is already complete (300 of 300 rounds); nothing to run" (its Result is
            returned at once), as an INFO message of the ``stochmix`` logger and, where
            the progress line is on, a line on stderr; ``Result.config["resumed_from"]``
            holds the round.
        checkpoint_every: rounds between checkpoints.
        dtype: float64 (default) or float32.
        metrics: which per-round metrics to record, among distance (needs x_star),
            objective (the gap f(x) - f_star, in ``Result.objective_gap``; where f_star is
            unknown, as for a TorchModel, the value f(x) itself, in ``Result.objective``,
            and ``objective_gap`` is None), gradient_norm and consensus. Distance costs
            O(d); objective and gradient_norm cost O(d^2) for problems that have them in
            closed form (Quadratic, LeastSquares) and a pass over all clients otherwise.
        evaluate_every: "auto" (default) or a positive integer k: metrics that cost a pass
            over all clients are evaluated only every k-th round (and always at round 0
            and the last round; NaN in between). "auto" picks k from the problem's size so
            that they take at most about 10% of the run (see
            :mod:`stochmix.engine.runner.recorder`), the same k every time.
        on_divergence: "warn" (stop, warn and return the partial result marked diverged)
            or "raise".
        divergence_threshold: a run whose reported model has an entry larger in magnitude
            than this many times max(1, the largest entry of its start) is treated as
            diverged, like NaN or Inf (a finite 1e60 is as useless); checked each round in
            O(d).
        callback: called as ``callback(r, z, ctx)`` after each round.
        storage: "auto" (default), "full" or "compact": which rows the state keeps.
            "full" keeps every row of every block. "compact" leaves out the node rows
            that the method's phases never read from the state (FedAvg's client models,
            overwritten by the pull before they are read; FOCUS's client trackers, zero
            after every collect; see :mod:`stochmix.engine.plan.liveness`): memory ``O(|S| d)``
            instead of O(N d) for each such block, the same numbers. "auto" is
            "compact" for states of at least :data:`COMPACT_MIN_BYTES` in full (finding
            the rows costs a few milliseconds of planning probe rounds) and for runs on
            the compiled loop, unless a callback is given (it gets the state ``z`` and
            may read any row; with "compact" it gets the kept rows, laid out by
            ``ctx.layout``).

        clock: a :class:`~stochmix.timing.Clock`: simulated time. Each round's cohort
            then takes the time its clients need (compute per local step, download and
            upload latencies), the server waits up to the clock's deadline (late clients
            are dropped, or contribute the steps they completed), and the Result gets a
            ``time`` column (seconds at the end of each round). Asynchronous methods
            (:class:`~stochmix.algorithms.FedBuff`, :class:`~stochmix.algorithms.FedAsync`)
            take their arrival order from it (every client 1 s a step when None).
            NumPy and Torch backends.

    Returns:
        A :class:`Result`; ``result.server[r]`` is the model after round r.
    """
    (rounds, metrics, evaluate_every, divergence_threshold, checkpoint_every, seed, x0) = _checked(
        method, problem, participation, rounds, x0, seed, backend, metrics, on_divergence,
        callback, progress, checkpoint_every, evaluate_every, divergence_threshold,
    )  # fmt: skip
    choice(storage, "storage", ("auto", "full", "compact"))
    as_float_dtype(dtype)
    compiled = flag_or_choice(compiled, "compiled", ("auto",))
    clock = checked_clock(clock, method, participation)
    back = _backend(backend, dtype, device, mixing, compiled)
    # Torch's intra-op threads at the run's count, restored however the run ends
    threads = back.threads if hasattr(back, "threads") else resolve_threads()
    with torch_threads(threads):
        return _run(
            method, problem, participation, rounds, back, x0=x0, seed=seed, dtype=dtype,
            metrics=metrics, on_divergence=on_divergence, callback=callback, progress=progress,
            checkpoint=checkpoint, checkpoint_every=checkpoint_every,
            evaluate_every=evaluate_every, divergence_threshold=divergence_threshold,
            compiled=compiled, storage=storage, clock=clock,
        )  # fmt: skip


def checked_clock(clock, method, participation):
    """``clock`` checked before any work (a Clock over the participation's clients, on a
    single-process backend), or the default clock of an asynchronous method, or None."""
    from ...timing import Clock, TimeModel  # the timing layer sits above the engine

    if clock is None:
        return Clock(TimeModel()) if getattr(method, "asynchronous", False) else None
    if not isinstance(clock, Clock):
        raise TypeError(f"clock must be a stochmix.timing.Clock, got {type(clock).__name__}")
    clock.check_clients(int(participation.n_clients))
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


def _run(
    method, problem, participation, rounds, back, *, x0, seed, dtype, metrics,
    on_divergence, callback, progress, checkpoint, checkpoint_every, evaluate_every,
    divergence_threshold, compiled, storage, clock=None,
) -> Result:  # fmt: skip
    """The run on its built backend, arguments checked (see :func:`run`)."""
    n = int(problem.n_clients)
    caps = capabilities(back)  # the backend's optional capabilities, found once
    if caps.sharded:  # backend="distributed": a shard per rank
        from .sharded import run_sharded

        if clock is not None:
            raise ValueError(
                "clock is not supported by backend='distributed' (yet); use numpy or torch"
            )
        return run_sharded(
            method, problem, participation, rounds, back, x0=x0, seed=seed, dtype=dtype,
            metrics=metrics, on_divergence=on_divergence, callback=callback, progress=progress,
            checkpoint=checkpoint, checkpoint_every=checkpoint_every,
            evaluate_every=evaluate_every, divergence_threshold=divergence_threshold,
            compiled=compiled,
        )  # fmt: skip
    setup = prepare(
        method, problem, participation, rounds, back, dtype, storage, callback, seed, caps=caps
    )
    rows, layout, ctx, planner = setup.rows, setup.layout, setup.ctx, setup.planner
    z = back.asarray(layout.initial(x0))
    recorder = Recorder(problem, method, ctx, metrics, rounds, evaluate_every, setup.expected)
    saver = None
    if checkpoint is not None:
        identity = run_identity(
            method, problem, participation, seed, back, x0, metrics, compiled, recorder.interval,
            clock,
        )  # fmt: skip
        saver = Checkpointer(checkpoint, identity, checkpoint_every)
    if hasattr(problem, "reseed"):  # stochastic gradients restart with the run's seed
        problem.reseed(seed if isinstance(seed, int) else None)
    stream = participant_stream(participation, seed)
    if clock is not None:
        stream = clock.stream(stream, method, ctx, seed)
    bar = None if progress is False else Progress(rounds, method.name, force=progress is True)

    saved = None if saver is None else saver.load(rounds)
    check = PlanCheck(layout, method, n) if layout.scratch else (lambda plan, r: plan)
    result = run_rounds(
        lambda r, participants, z: execute(
            check(planner.plan(r, participants), r), z, back, problem, method, ctx, rows, caps
        ),
        saved=saved, saver=saver, z=z, back=back, ctx=ctx, recorder=recorder, stream=stream,
        rounds=rounds, method=method, problem=problem, participation=participation,
        seed=seed, dtype=dtype, callback=callback, bar=bar,
        divergence_threshold=divergence_threshold, on_divergence=on_divergence,
        traffic=lambda: planner.traffic,
        segments=None if clock is not None else segmenter(
            method, problem, participation, layout, ctx, back, caps, dtype, callback,
            lambda: planner.phases,
        ),
    )  # fmt: skip
    if clock is not None and clock.deadline is not None and result.participants[1:].sum() == 0:
        warnings.warn(
            f"no client met deadline={clock.deadline!r} in any of the {rounds} rounds: the "
            "model never moved (give the clients more time)",
            RuntimeWarning,
            stacklevel=3,
        )
    return result


def _backend(backend, dtype, device, mixing, compiled):
    """The backend object of ``run``'s arguments."""
    options = {k: v for k, v in (("device", device), ("mixing", mixing)) if v is not None}
    if compiled != "auto":
        options["compiled"] = compiled
    return make_backend(backend, dtype, **options)


class Setup(NamedTuple):
    """What a single-process run is planned with (see :func:`prepare`)."""

    back: object  #: the backend
    rows: RowGradient | None  #: the compiled one-client gradient, or None
    layout: Layout
    ctx: RunContext
    planner: RoundPlanner
    expected: float  #: the expected participants of a round


def prepare(
    method, problem, participation, rounds: int, back, dtype, storage, callback, seed, warn=None,
    caps: Capabilities | None = None,
) -> Setup:  # fmt: skip
    """The set-up of a single-process run of ``rounds`` rounds, before its state exists:
    the compiled gradient (or None), the rows the state keeps (``storage``), the layout
    and context (``method.start`` called) and the round planner, whose notes warn about
    slow paths (``warn``; by default in runs of more than
    :data:`~stochmix.engine.plan.slowpath.SLOW_PATH_MIN_ROUNDS` rounds). :func:`run` and
    :func:`stochmix.explain` plan with it. ``caps``: the backend's
    :func:`~stochmix.engine.plan.capabilities.capabilities` (made here when None)."""
    caps = capabilities(back) if caps is None else caps
    n, dim = int(problem.n_clients), int(problem.dim)
    probabilities = participation.probabilities  # a copy of N numbers: taken once
    expected = n if probabilities is None else float(np.sum(probabilities))
    state_dtype = dtype if caps.dtype is None else caps.dtype
    rows = row_gradient(problem, back, state_dtype, rounds * expected * dim, expected * dim, caps)
    scratch = {}
    if storage == "compact" or (
        storage == "auto"
        and callback is None
        and (rows is not None or _full_bytes(method, n, dim, dtype) >= COMPACT_MIN_BYTES)
    ):
        if caps.local_phases:
            scratch = find_scratch(
                method, n, dim, probabilities,
                lambda phases, m, c: plan_round(phases, back, m, c, caps),
                getattr(problem, "regularizer", None),
            )  # fmt: skip
    layout = Layout(method.blocks(n), scratch, (method.client_node, n))
    ctx = make_context(method, problem, participation, layout, seed, probabilities)
    notes = SlowPaths(method.name, warn=rounds > SLOW_PATH_MIN_ROUNDS if warn is None else warn)
    planner = RoundPlanner(method, back, ctx, caps, notes=notes)
    return Setup(back, rows, layout, ctx, planner, expected)


def _full_bytes(method: Method, n: int, dim: int, dtype) -> int:
    """The bytes of ``method``'s state with every row of every block kept."""
    return Layout(method.blocks(n)).size * dim * np.dtype(dtype).itemsize


# ------------------------------------------------------------------ arguments
def _checked(
    method, problem, participation, rounds, x0, seed, backend, metrics, on_divergence,
    callback, progress, checkpoint_every, evaluate_every, divergence_threshold,
) -> tuple:  # fmt: skip
    """``run``'s arguments checked before any work, with errors naming them; returns
    those that are normalised (rounds, metrics, evaluate_every, divergence_threshold,
    checkpoint_every, seed, x0)."""
    if not isinstance(method, Method):
        raise TypeError(f"method must be a stochmix Method, got {type(method).__name__}")
    rounds = as_int(rounds, "rounds", minimum=0)
    _check_parts(problem, participation, backend, progress)
    choice(on_divergence, "on_divergence", ("warn", "raise"))
    if isinstance(metrics, str) or not hasattr(metrics, "__iter__"):
        raise TypeError(f"metrics must be a tuple of metric names among {METRICS}, got {metrics!r}")
    metrics = tuple(metrics)
    for m in metrics:
        choice(m, "metrics entry", METRICS)
    evaluate_every = check_schedule(evaluate_every)
    divergence_threshold = as_float(divergence_threshold, "divergence_threshold", positive=True)
    seed = as_seed(seed)  # the one normalisation: every later use sees the same value
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
    x0 = _check_starting_point(x0, int(problem.dim), n, method)
    checkpoint_every = as_int(checkpoint_every, "checkpoint_every", minimum=1)
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be callable as callback(r, z, ctx), got {callback!r}")
    return rounds, metrics, evaluate_every, divergence_threshold, checkpoint_every, seed, x0


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

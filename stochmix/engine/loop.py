"""The run loop: it applies the phases a method returns and records the results.

It knows nothing about any particular method; it only needs objects that behave as

* a method: :class:`~stochmix.engine.method.Method`;
* a problem: ``n_clients``, ``dim``, ``gradients(clients, points)``, optionally
  ``x_star``, ``f_star``, ``objective(x)``, ``gradient(x)``;
* a participation process: ``n_clients``, ``probabilities`` and ``masks(seed)`` yielding
  one boolean mask over the clients per round.
"""

from __future__ import annotations

import os
import time
import warnings

import numpy as np

from .._fingerprint import digest, seed_identity
from .._validate import as_float, as_int, as_real_array, as_seed, choice
from . import checkpoint as checkpoints
from .backends import make_backend
from .execute import execute, plan_round, row_gradient
from .layout import Layout
from .method import Method, RunContext
from .progress import Progress
from .recorder import METRICS, Recorder, check_schedule
from .result import Result
from .template import RoundTemplate

CACHE_SIZE = 1024  # rounds' phase lists kept for reuse (see Method.phase_key)
CACHE_MAX_PARTICIPANTS = 4096  # larger rounds are rebuilt: rarely repeated, costly to keep
CACHE_SEEN = 1 << 16  # keys remembered (as hashes) to spot the ones that come back
TEMPLATES = 256  # round templates kept (see Method.template_key)


class DivergenceWarning(RuntimeWarning):
    """A run stopped because its state held NaN or Inf."""


class CheckpointWarning(RuntimeWarning):
    """A checkpoint could not be written; the run went on."""


class DivergenceError(FloatingPointError):
    """Raised instead of the warning when ``on_divergence="raise"``."""


def _check_starting_point(x0, dim: int) -> np.ndarray:
    if x0 is None:
        return np.zeros(dim)
    x0 = as_real_array(x0, "x0", finite=False)  # refuses bool, complex, strings
    if x0.shape != (dim,):
        raise ValueError(f"x0 must have shape ({dim},), got {x0.shape}")
    if not np.isfinite(x0).all():
        raise ValueError("x0 must be finite")
    return x0


def _check_parts(problem, participation, backend, progress) -> None:
    """What ``run`` needs of its arguments, checked before any work (each is a duck type:
    see the module docstring), so that swapped or missing ones get an error naming them."""
    for attr in ("n_clients", "dim", "gradients"):
        if not hasattr(problem, attr):
            raise TypeError(
                f"problem must be a stochmix problem (with n_clients, dim and gradients), "
                f"got {type(problem).__name__}"
            )
    if not hasattr(participation, "n_clients") or not (
        hasattr(participation, "masks") or hasattr(participation, "participants")
    ):
        raise TypeError(
            "participation must be a participation process (with n_clients and masks), "
            f"got {type(participation).__name__}"
        )
    if not isinstance(backend, str) and not (
        hasattr(backend, "asarray") and hasattr(backend, "apply")
    ):
        raise TypeError(f'backend must be "numpy", "torch" or a backend object, got {backend!r}')
    if progress != "auto" and not isinstance(progress, (bool, np.bool_)):
        raise ValueError(f'progress must be "auto", True or False, got {progress!r}')


def _seed_label(seed):
    """How a run's seed is written into its Result: the integer itself (Python or NumPy),
    None, or "custom" for a SeedSequence or Generator. A bad seed is refused here, before
    any set-up."""
    seed = as_seed(seed)
    if isinstance(seed, int):
        return seed
    return None if seed is None else "custom"


def _identity(method, problem, participation, seed, back, x0, metrics, compiled) -> dict:
    """What a checkpoint must share with the run that resumes it: every input that changes
    the run's numbers, as fingerprints (see :mod:`stochmix._fingerprint`)."""
    fingerprint = getattr(problem, "fingerprint", None)
    return {
        "method": type(method).__qualname__,
        "method_parameters": method.fingerprint(),
        "problem": fingerprint() if callable(fingerprint) else digest(problem),
        "participation": digest(participation),
        "seed": seed_identity(seed),
        "backend": back.name,
        "dtype": str(getattr(back, "dtype", "")),
        "compiled": str(compiled),
        "x0": digest(x0),
        "metrics": list(metrics),
        "n_clients": int(problem.n_clients),
        "dim": int(problem.dim),
    }


def _number_or_none(value):
    """A method's step size as a plain number for the Result's config (None otherwise)."""
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        return float(value)
    return None


def run(
    method: Method,
    problem,
    participation,
    rounds: int,
    *,
    x0=None,
    seed=0,
    backend="numpy",
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
        x0: starting point, shape (dim,); zeros by default.
        seed: seeds the participation stream; the same seed gives the same masks, so every
            method in a comparison sees the same rounds.
        backend: "numpy" (SciPy sparse on the CPU), "torch" (tensors on ``device``) or a
            backend object.
        device: Torch device ("cpu", "cuda", "cuda:1", ...); torch backend only.
        mixing: "dense", "sparse" or "auto" (default): how the torch backend applies phases.
        compiled: "auto" (default), True or False: whether the NumPy backend runs
            node-local phases through Numba-compiled loops over one node at a time (needs
            the ``fast`` extra and a problem with a compiled gradient: Quadratic,
            LeastSquares, Logistic). "auto" does so when it can and the run is long enough
            to repay compiling (about rounds x expected participants x dim >= 3e8); True
            always (an error when it cannot); False never. Results agree with the NumPy
            path to rounding.
        progress: "auto" shows a progress line on a terminal for runs longer than two
            seconds; True forces it, False hides it.
        checkpoint: a file path. Every ``checkpoint_every`` rounds the run's state is saved
            there atomically; if the file exists when the run starts, the run resumes from
            it (it must have been written by the same method, problem, participation, seed
            and backend) and continues exactly as if it had never stopped.
        checkpoint_every: rounds between checkpoints.
        dtype: float64 (default) or float32.
        metrics: which per-round metrics to record, among distance (needs x_star),
            objective (the gap f(x) - f_star), gradient_norm and consensus. Distance costs
            O(d); objective and gradient_norm cost O(d^2) for problems that have them in
            closed form (Quadratic, LeastSquares) and a pass over all clients otherwise.
        evaluate_every: "auto" (default) or a positive integer k: metrics that cost a pass
            over all clients are evaluated only every k-th round (and always at round 0
            and the last round; NaN in between). "auto" picks k from the problem's size so
            that they take at most about 10% of the run (see
            :mod:`stochmix.engine.recorder`), the same k every time.
        on_divergence: "warn" (stop, warn and return the partial result marked diverged)
            or "raise".
        divergence_threshold: a run whose reported model has an entry larger in magnitude
            than this many times max(1, the largest entry of its start) is treated as
            diverged, like NaN or Inf (a finite 1e60 is as useless); checked each round in
            O(d).
        callback: called as ``callback(r, z, ctx)`` after each round.

    Returns:
        A :class:`Result`; ``result.server[r]`` is the model after round r.
    """
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
    seed_label = _seed_label(seed)
    n, dim = int(problem.n_clients), int(problem.dim)
    if int(participation.n_clients) != n:
        raise ValueError(
            f"participation covers {participation.n_clients} clients but the problem has {n}"
        )
    x0 = _check_starting_point(x0, dim)
    options = {k: v for k, v in (("device", device), ("mixing", mixing)) if v is not None}
    if compiled != "auto":
        options["compiled"] = compiled
    back = make_backend(backend, dtype, **options)
    expected = participation.probabilities
    expected = n if expected is None else float(np.sum(expected))
    rows = row_gradient(
        problem,
        back,
        getattr(back, "dtype", dtype),
        rounds * expected * dim,
        expected * dim,
        # a checkpointed run must continue on the path it started on, whatever the cache
        # holds by then: "auto" decides by the run's length alone there
        cached_ok=checkpoint is None,
    )

    layout = Layout(method.blocks(n))
    ctx = RunContext(layout, n, dim, participation.probabilities)
    method.start(ctx)
    z = back.asarray(layout.initial(x0))

    recorder = Recorder(problem, method, ctx, metrics, rounds, evaluate_every, expected)
    count = np.zeros(rounds + 1, dtype=np.int64)
    clock = np.zeros(rounds + 1)

    cache: dict = {}
    seen: set = set()
    templates: dict = {}

    def build_plan(r, participants):
        """The round's plan, reused from an earlier round with the same phase key. A
        round's plan is kept only once its key has come twice, so random participation
        (whose sets rarely repeat) costs a hash per round and no memory."""
        key = None
        if participants.size <= CACHE_MAX_PARTICIPANTS:
            key = method.phase_key(r, participants)
        if key is None:
            return plan_round(method.round_phases(r, participants, ctx), back, method, ctx)
        plan = cache.get(key)
        if plan is None:
            plan = plan_round(method.round_phases(r, participants, ctx), back, method, ctx)
            fingerprint = hash(key)
            if fingerprint not in seen:
                if len(seen) > CACHE_SEEN:
                    seen.clear()
                seen.add(fingerprint)
            elif len(cache) < CACHE_SIZE:
                cache[key] = plan
        return plan

    def round_plan(r, participants):
        """The round's plan: from its template when the method has one for the round
        (checked against a full build on the key's second round), else built."""
        key = method.template_key(r, participants)
        if key is None or participants.size < 2:
            # one participant's rows are single rows of the state: such rounds are always
            # built in full, so that a run gives the same numbers with or without templates
            return build_plan(r, participants)
        template = templates.get(key)
        if template is not None and template is not False and template.verified:
            plan = template.instantiate(participants)
            if plan is not None:
                return plan
        plan = build_plan(r, participants)
        if template is None:
            if len(templates) >= TEMPLATES:
                templates.clear()
            templates[key] = RoundTemplate.from_plan(plan, participants) or False
        elif template is not False and not template.verified:
            template.verified = template.matches(plan, participants)
            if not template.verified:
                templates[key] = False  # the method's rounds differ: never template it
        return plan

    checkpoint_every = as_int(checkpoint_every, "checkpoint_every", minimum=1)
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be callable as callback(r, z, ctx), got {callback!r}")
    saved = None
    if checkpoint is not None:
        if not isinstance(checkpoint, (str, os.PathLike)):
            raise TypeError(f"checkpoint must be a file path, got {checkpoint!r}")
        if seed is None:
            raise ValueError(
                "checkpoint needs a fixed seed (seed=None draws other masks on resume)"
            )
        identity = _identity(method, problem, participation, seed, back, x0, metrics, compiled)
        identity["evaluate_every"] = recorder.interval
        checkpoints.check_writable(checkpoint)
        saved = checkpoints.load(checkpoint)
    if hasattr(problem, "reseed"):  # stochastic gradients restart with the run's seed
        problem.reseed(seed_label if isinstance(seed_label, int) else None)
    if hasattr(participation, "participants"):  # sorted indices, no N-long mask per round
        stream = participation.participants(seed)
    else:
        stream = (np.flatnonzero(mask) for mask in participation.masks(seed))
    bar = None if progress is False else Progress(rounds, method.name, force=progress is True)
    done = 0
    if saved is not None:
        theirs = saved.get("identity") if isinstance(saved.get("identity"), dict) else {}
        diff = [k for k in identity if theirs.get(k) != identity[k]]
        if diff:
            raise ValueError(
                f"checkpoint {str(checkpoint)!r} was written by a different run "
                f"(it differs in {', '.join(diff)}); remove it or choose another path"
            )
        done = int(saved["done"])
        if done > rounds:
            raise ValueError(
                f"checkpoint {str(checkpoint)!r} is at round {done}, beyond rounds={rounds}; "
                "ask for at least as many rounds (its Result is returned at once), or remove it"
            )
        z = back.asarray(saved["z"])
        ctx.memory = checkpoints.restore_memory(ctx.memory, saved["memory"])
        recorder.restore(saved, done)
        recorder.measure(done, z, back, last=done == rounds)  # the schedule of *this* run
        count[: done + 1] = saved["count"][: done + 1]
        clock[: done + 1] = saved["clock"][: done + 1]
        if saved.get("problem_rng") is not None:
            problem.set_rng_state(saved["problem_rng"])
        for _ in range(done):
            next(stream)
    else:
        recorder.measure(0, z, back, last=rounds == 0)

    failed_save = []

    def save_checkpoint(done):
        """Save after round ``done``; a failed save warns (once), keeps the previous
        checkpoint and lets the run go on: its work is returned in the Result."""
        try:
            checkpoints.save(
                checkpoint,
                {
                    "identity": identity,
                    "done": done,
                    "z": back.to_numpy(z).copy(),
                    "memory": ctx.memory,
                    **recorder.state(done),
                    "count": count[: done + 1],
                    "clock": clock[: done + 1],
                    "problem_rng": problem.rng_state() if hasattr(problem, "rng_state") else None,
                },
            )
        except OSError as error:
            if not failed_save:
                warnings.warn(
                    f"checkpoint {str(checkpoint)!r} could not be saved after round {done} "
                    f"({error.strerror or error}); the previous checkpoint is kept and the "
                    "run goes on",
                    CheckpointWarning,
                    stacklevel=3,
                )
            failed_save.append(done)

    start = time.perf_counter() - clock[done]
    diverged_at = None
    # max |entry|, not the norm: a norm overflows long before its entries do
    too_large = divergence_threshold * max(1.0, float(np.abs(recorder.server[0]).max()))
    for r in range(done, rounds):
        participants = np.asarray(next(stream), dtype=np.int64)
        count[r + 1] = participants.size
        finite = execute(round_plan(r, participants), z, back, problem, method, ctx, rows)
        done = r + 1
        clock[done] = time.perf_counter() - start
        x = recorder.measure(done, z, back, last=not finite or done == rounds)
        if not finite or not np.isfinite(x).all() or np.abs(x).max() > too_large:
            if finite and done < rounds:  # stopped by the threshold: the last round's values
                recorder.measure(done, z, back, last=True)
            diverged_at = done
            break
        if callback is not None:
            callback(r, z, ctx)
        if bar is not None:
            bar(r)
        if checkpoint is not None and (done % checkpoint_every == 0 or done == rounds):
            save_checkpoint(done)

    if bar is not None:
        bar.close()
    result = Result(
        method=method.name,
        participants=count[: done + 1],
        wall_time=clock[: done + 1],
        **recorder.fields(done),
        diverged_at=diverged_at,
        config={
            "method": repr(method),
            "lr": _number_or_none(getattr(method, "lr", None)),
            "problem": repr(problem),
            "participation": repr(participation),
            "rounds": rounds,
            "seed": seed_label,
            "backend": back.name,
            "dtype": str(getattr(back, "dtype", np.dtype(dtype))).removeprefix("torch."),
            "evaluate_every": recorder.interval,
        },
    )
    if diverged_at is not None:
        message = (
            f"{method.name} diverged: the state holds NaN or Inf, or a model larger than "
            f"divergence_threshold={divergence_threshold:g} times its start, after round "
            f"{diverged_at}; the run stopped there (try a smaller step size)"
        )
        if on_divergence == "raise":
            raise DivergenceError(message)
        warnings.warn(message, DivergenceWarning, stacklevel=2)
    return result

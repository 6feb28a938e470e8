"""The rounds of a run, on one process or on one rank's shard: draw the participants,
apply the round, record it, stop on divergence, call back, checkpoint, and the
:class:`~stochmix.engine.runner.result.Result` at the end (:func:`stochmix.run` runs every
backend's rounds here).
"""

from __future__ import annotations

import time
import warnings
from functools import partial

import numpy as np

from ..plan.capabilities import capabilities
from .result import Result, final_node_models
from .segments import BATCH

__all__ = [
    "DivergenceError",
    "DivergenceWarning",
    "participant_stream",
    "run_rounds",
]


class DivergenceWarning(RuntimeWarning):
    """A run stopped because its state held NaN or Inf."""


class DivergenceError(FloatingPointError):
    """Raised instead of the warning when ``on_divergence="raise"``."""


def participant_stream(participation, seed):
    """The run's rounds as :class:`~stochmix.participation.Activation` records (a process
    with ``activations``) or sorted int64 participant indices (no N-long mask per round
    where the process draws indices itself)."""
    if hasattr(participation, "activations"):
        return participation.activations(seed)
    if hasattr(participation, "participants"):
        return participation.participants(seed)
    return (np.flatnonzero(mask) for mask in participation.masks(seed))


def run_rounds(
    step, *, saved, saver, z, back, ctx, recorder, stream, rounds, method, problem,
    participation, options, bar, stacklevel: int = 4, traffic=None, segments=None,
) -> Result:  # fmt: skip
    """The rounds of a run and its Result, on one process or one rank's shard: start
    from ``saved`` (a loaded checkpoint) or measure round 0, then for each round draw the
    participants, apply it (``step(r, participants, z)``: False when a written entry is not
    finite), record it, stop on divergence, call back, checkpoint. ``options``: the run's
    checked :class:`~stochmix.engine.runner.arguments.RunOptions` (its seed, dtype,
    callback and divergence settings are read here). ``stacklevel`` points
    the divergence warning at the caller of :func:`run`; ``traffic()`` gives the last
    round's (gradient evaluations, messages, floats, sample gradients), recorded when
    given (called once per round built, after it ran).
    ``segments``: a :class:`~stochmix.engine.runner.segments.Segmenter` with ``phases()`` (the
    last built round's phases), where small rounds may run in compiled batches."""
    seed, dtype, callback = options.seed, options.dtype, options.callback
    divergence_threshold, on_divergence = options.divergence_threshold, options.on_divergence
    done = 0 if saved is None else int(saved["done"])
    recorder.counted = traffic is not None
    if saved is None:
        recorder.measure(0, z, back, last=rounds == 0)
    else:
        z = saver.restore(saved, back, ctx, recorder, problem)
        saver.announce(done, rounds, bar)
        for _ in range(done):
            next(stream)
    start = time.perf_counter() - recorder.clock[done]
    diverged_at = None
    # max |entry|, not the norm: a norm overflows long before its entries do
    too_large = divergence_threshold * max(1.0, float(np.abs(recorder.server[0]).max()))
    r = done
    while r < rounds:
        if segments is not None and segments.verified and hasattr(stream, "peek"):
            limit = _batch_limit(r, rounds, recorder, saver)
            batch = segments.block(stream, r, limit)
            if batch is not None:  # records of verified keys, taken as arrays
                done, stop = _run_batch(segments, batch, z, recorder, start, back, too_large)
                if stop:
                    diverged_at = done
                    break
                _after_batch(done, rounds, bar, saver, z, back, ctx, recorder, problem, segments)
                r = done
                continue
        drawn = next(stream)
        nodes = getattr(drawn, "nodes", None)
        if nodes is None:
            participants = np.asarray(drawn, dtype=np.int64)
        else:  # an Activation: its nodes, and its edges and time for the method and record
            participants, ctx.activation = nodes, drawn
        key = None if segments is None else segments.key(r, participants, drawn)
        if key is not None:
            found = segments.program(key)
            if found is not None:  # a verified round: run it in the next batch
                pending = segments.pending
                if not pending:
                    segments.limit = _batch_limit(r, rounds, recorder, saver)
                pending.append((r, participants, found, drawn))
                r += 1
                if r < segments.limit:
                    continue
                batch = segments.take_pending()
                done, stop = _run_batch(segments, batch, z, recorder, start, back, too_large)
                if stop:
                    diverged_at = done
                    break
                _after_batch(done, rounds, bar, saver, z, back, ctx, recorder, problem, segments)
                continue
        if segments is not None and segments.pending:
            batch = segments.take_pending()
            done, stop = _run_batch(segments, batch, z, recorder, start, back, too_large)
            if stop:
                diverged_at = done
                break
        finite = step(r, participants, z)
        counted = None if traffic is None else traffic()
        if key is not None:  # (a cached plan's phases: built again, as a resumed run does)
            rebuild = partial(method.round_phases, r, participants, ctx)
            segments.learn(key, segments.phases(), participants, counted, rebuild)
        done = r + 1
        recorder.count[done] = participants.size
        if counted is not None:  # the round's (gradients, messages, floats, samples)
            recorder.traffic[done] = counted
        if nodes is not None and drawn.time is not None:
            recorder.time[done] = drawn.time
        recorder.clock[done] = time.perf_counter() - start
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
        if saver is not None and saver.due(done, rounds):
            saver.save(done, z, back, ctx, recorder, problem)
            if segments is not None:
                segments.forget()
        r += 1
    if bar is not None:
        bar.close()

    config = _config(method, problem, participation, rounds, seed, back, dtype, recorder)
    if saved is not None:
        config["resumed_from"] = int(saved["done"])
    # the nodes' models at the end (a sharded run's ranks hold part of them: None)
    models = None if capabilities(back).sharded else final_node_models(method, z, ctx, back)
    fields = {**recorder.fields(done), "node_models": models}
    result = Result(method=method.name, **fields, diverged_at=diverged_at, config=config)
    if diverged_at is not None:
        message = (
            f"{method.name} diverged: the state holds NaN or Inf, or a model larger than "
            f"divergence_threshold={divergence_threshold:g} times its start, after round "
            f"{diverged_at}; the run stopped there (try a smaller step size)"
        )
        if on_divergence == "raise":
            raise DivergenceError(message)
        warnings.warn(message, DivergenceWarning, stacklevel=stacklevel)
    return result


# ------------------------------------------------------------------ segments
def _batch_limit(first: int, rounds: int, recorder, saver) -> int:
    """The last round of a batch that starts with round ``first`` (0-based): the run's
    last round, the first one after which a scheduled metric is due or a checkpoint is
    written, or :data:`~stochmix.engine.runner.segments.BATCH` rounds on."""
    limit = min(rounds, first + BATCH)
    if recorder.scheduled:
        interval = recorder.interval
        limit = min(limit, (first // interval + 1) * interval)
    if saver is not None:
        limit = min(limit, -(-(first + 1) // saver.every) * saver.every)
    return limit


def _after_batch(done, rounds, bar, saver, z, back, ctx, recorder, problem, segments) -> None:
    """After a batch that ends with round ``done``: the progress bar, a checkpoint (after
    which the segments learn their keys again, as a run resumed from it does: so that the
    two run the same rounds in full and agree bit for bit)."""
    if bar is not None:
        bar(done - 1)
    if saver is not None and saver.due(done, rounds):
        saver.save(done, z, back, ctx, recorder, problem)
        segments.forget()


def _run_batch(segments, batch: tuple, z, recorder, start: float, back, too_large: float):
    """Run a batch of rounds (:meth:`~stochmix.engine.runner.segments.Segmenter.take_pending`'s
    arrays) and record them: ``(rounds done, stopped)``. Every round gets its model,
    ``distance``, participants, costs and wall time (the batch's, from the end of the
    round before it, in equal shares); the last one is measured in full."""
    first, nodes, programs, times, sizes = batch
    every = segments.every_node_batch(programs)
    spread = None
    if "consensus" in recorder.values and segments.spread:
        spread = np.empty(programs.size)
    ran, models, large = segments.run(z, nodes, programs, too_large, spread, every)
    now = time.perf_counter() - start
    failed = ran < programs.size and not large  # round ``ran`` wrote a value not finite
    spent = ran + failed  # the rounds whose phases were applied
    rows = slice(first + 1, first + 1 + spent)
    recorder.count[rows] = sizes[:spent]
    recorder.traffic[rows] = segments.traffic(nodes[:spent], programs[:spent])
    if times is not None:
        recorder.time[rows] = times[:spent]
    # the batch's time in equal shares (its rounds run the same programs; the loop does
    # not stop the clock between them)
    began = recorder.clock[first]
    recorder.clock[rows] = began + (now - began) * np.arange(1, spent + 1) / max(spent, 1)
    done = first + ran
    rows = slice(first + 1, done + 1)  # the rounds done: their models are kept
    recorder.server[rows] = models
    if "distance" in recorder.values and recorder.x_star is not None:
        with np.errstate(over="ignore", invalid="ignore"):
            distance = np.linalg.norm(models - recorder.x_star, axis=1)
        recorder.values["distance"][rows] = distance
    for name in recorder.model_metrics():
        with np.errstate(over="ignore", invalid="ignore"):
            # (a gossip batch of many short ticks takes the problem's rows alone: else it
            # records the metric at its end, one Python call a tick being its whole cost)
            found = recorder.evaluate_rows(name, models) if every else recorder.rows(name, models)
        if found is not None:
            recorder.values[name][rows] = found
    if spread is not None:
        recorder.values["consensus"][rows] = spread[:ran]
    done += failed
    # (scheduled metrics where they are due, as round by round: a batch may end elsewhere)
    last = failed or large or done == recorder.rounds
    x = recorder.measure(done, z, back, last=last)
    stopped = failed or large or not np.isfinite(x).all() or np.abs(x).max() > too_large
    return done, stopped


# ------------------------------------------------------------------ the result
def _config(method, problem, participation, rounds, seed, back, dtype, recorder) -> dict:
    """The run's inputs as written into its Result (``seed`` normalised: an integer, None,
    or "custom" for a SeedSequence or Generator)."""
    return {
        "method": repr(method),
        "lr": _number_or_none(getattr(method, "lr", None)),
        "problem": repr(problem),
        "participation": repr(participation),
        "rounds": rounds,
        "seed": seed if seed is None or isinstance(seed, int) else "custom",
        "backend": back.name,
        "dtype": str(_state_dtype(back, dtype)).removeprefix("torch."),
        "evaluate_every": recorder.interval,
    }


def _number_or_none(value):
    """A method's step size as a plain number for the Result's config (None otherwise)."""
    if isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool):
        return float(value)
    return None


def _state_dtype(back, dtype):
    """The dtype of ``back``'s state: its own (:class:`~stochmix.protocols.Typed`), else
    the run's ``dtype`` argument."""
    found = capabilities(back).dtype
    return np.dtype(dtype) if found is None else found

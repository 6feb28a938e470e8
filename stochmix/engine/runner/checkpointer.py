"""A run's checkpoints: when they are written, what they must match, how a run resumes.

The file format (atomic writes, verified reads) is :mod:`stochmix.engine.runner.checkpoint`;
this module is the run's side of it:

* :func:`run_identity`: what a checkpoint must share with the run that resumes it, every
  input that changes the run's numbers, as fingerprints (see :mod:`stochmix._fingerprint`);
* :class:`Checkpointer`: checks before the first round that the path can be written (and
  clears scratch files a killed run left), loads and verifies a checkpoint, restores a run
  from it, says so (:meth:`Checkpointer.announce`), and saves every ``every`` rounds; a
  failed save warns once (:class:`CheckpointWarning`), keeps the previous checkpoint and
  lets the run go on.

**What a resumed run says.** A run that resumes from a checkpoint logs one INFO message on
the logger ``stochmix.engine.runner.checkpointer`` (a child of ``stochmix``; Python shows INFO only
where logging is configured, e.g. ``logging.basicConfig(level=logging.INFO)``), writes the
same line on stderr where its progress line is on (``progress=True``, or ``"auto"`` on a
terminal; ``progress=False`` keeps it quiet), and records the round in its Result's
``config["resumed_from"]``:

* ``resumed from round 120 of 300 (checkpoint PATH)``;
* ``checkpoint PATH is already complete (300 of 300 rounds); nothing to run``: the
  checkpoint's run had finished, and its Result is returned at once.
"""

from __future__ import annotations

import logging
import os
import warnings

from ..._fingerprint import digest, seed_identity
from ..model.layout import Layout
from ..plan.capabilities import capabilities
from . import checkpoint as files

__all__ = [
    "CheckpointWarning",
    "Checkpointer",
    "run_identity",
]

#: Where a resumed run says so (INFO); see the module docstring.
_logger = logging.getLogger(__name__)


class CheckpointWarning(RuntimeWarning):
    """A checkpoint could not be written; the run went on."""


def resume_message(path, done: int, rounds: int) -> str:
    """What a run resuming from the checkpoint at ``path`` after round ``done`` of
    ``rounds`` says: ``resumed from round 120 of 300 (checkpoint PATH)``, or, for a
    finished one, ``checkpoint PATH is already complete (300 of 300 rounds); nothing to
    run``."""
    if done >= rounds:
        return (
            f"checkpoint {os.fspath(path)} is already complete ({done} of {rounds} rounds); "
            "nothing to run"
        )
    return f"resumed from round {done} of {rounds} (checkpoint {os.fspath(path)})"


def run_identity(
    method, problem, participation, seed, backend, x0, metrics, compiled, evaluate_every,
    clock=None,
) -> dict:  # fmt: skip
    """What a checkpoint must share with the run that resumes it: every input that changes
    the run's numbers, as JSON-able fingerprints (``seed`` as :func:`~stochmix._validate.
    as_seed` gives it; ``backend`` the run's backend object; ``clock`` the run's
    :class:`~stochmix.timing.Clock`, recorded only where there is one, so that checkpoints
    of runs without a clock keep their identity)."""
    fingerprint = getattr(problem, "fingerprint", None)
    dtype = capabilities(backend).dtype
    extra = {} if clock is None else {"clock": digest(clock)}
    return {
        **extra,
        "method": type(method).__qualname__,
        "method_parameters": method.fingerprint(),
        "problem": fingerprint() if callable(fingerprint) else digest(problem),
        "participation": digest(participation),
        "seed": seed_identity(seed),
        "backend": backend.name,
        "dtype": "" if dtype is None else str(dtype),
        "compiled": str(compiled),
        "x0": digest(x0),
        "metrics": list(metrics),
        "n_clients": int(problem.n_clients),
        "dim": int(problem.dim),
        "evaluate_every": evaluate_every,
    }


class Checkpointer:
    """One run's checkpoints at ``path``.

    Args:
        path: the checkpoint file (its folder is created if needed).
        identity: the run's :func:`run_identity`; a checkpoint written under another is
            refused.
        every: rounds between checkpoints (the last round is always saved).

    Raises:
        TypeError: ``path`` is not a path.
        ValueError: the run has no fixed seed (``identity["seed"]`` is None: a resumed run
            would draw other masks), or the path cannot be written.
    """

    def __init__(self, path, identity: dict, every: int = 100):
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"checkpoint must be a file path, got {path!r}")
        if identity.get("seed") is None:
            raise ValueError(
                "checkpoint needs a fixed seed (seed=None draws other masks on resume)"
            )
        self.path, self.identity, self.every = path, identity, int(every)
        self.failed: list[int] = []  # rounds whose save failed
        files.check_writable(path)

    def load(self, rounds: int) -> dict | None:
        """The checkpoint to resume from, verified (None when there is none). Raises
        ValueError naming the file when it belongs to another run or to a round beyond
        ``rounds`` (:class:`~stochmix.engine.runner.checkpoint.CheckpointError` when damaged)."""
        saved = files.load(self.path)
        if saved is None:
            return None
        theirs = saved.get("identity")
        if not isinstance(theirs, dict):
            theirs = {}
        keys = [*self.identity, *(k for k in ("clock",) if k in theirs and k not in self.identity)]
        diff = [k for k in keys if theirs.get(k) != self.identity.get(k)]
        if diff:
            raise ValueError(
                f"checkpoint {str(self.path)!r} was written by a different run "
                f"(it differs in {', '.join(diff)}); remove it or choose another path"
            )
        done = int(saved["done"])
        if done > rounds:
            raise ValueError(
                f"checkpoint {str(self.path)!r} is at round {done}, beyond rounds={rounds}; "
                "ask for at least as many rounds (its Result is returned at once), or remove it"
            )
        return saved

    def announce(self, done: int, rounds: int, bar=None) -> str:
        """Say that the run resumes after round ``done`` of ``rounds`` from this
        checkpoint (or that it was complete; :func:`resume_message`): an INFO message on
        the logger above, and a line on the progress line's stream through ``bar.note``
        (a :class:`~stochmix.engine.runner.progress.Progress`, or None) where it is shown.
        Returns the message."""
        message = resume_message(self.path, done, rounds)
        _logger.info(message)
        if bar is not None:
            bar.note(message)
        return message

    @staticmethod
    def restore(saved: dict, backend, ctx, recorder, problem):
        """Put a loaded checkpoint back into a run: the method's memory (``ctx``), the
        record (``recorder``, which measures round ``done`` again under *this* run's
        schedule) and the problem's random draws; returns the state ``z`` on ``backend``.
        The participation stream is the caller's to advance by ``saved["done"]`` rounds."""
        done = int(saved["done"])
        z = saved["z"]
        written = _parse_scratch(saved.get("scratch", ""))
        if written != ctx.layout.scratch:  # saved with other rows kept: move them over
            z = ctx.layout.moved(z, Layout(list(ctx.layout.blocks), written, ctx.layout.nodes))
        z = backend.asarray(z)
        ctx.memory = files.restore_memory(ctx.memory, saved["memory"])
        recorder.restore(saved, done)
        recorder.measure(done, z, backend, last=done == recorder.rounds)
        if saved.get("problem_rng") is not None:
            problem.set_rng_state(saved["problem_rng"])
        return z

    def due(self, done: int, rounds: int) -> bool:
        """Whether the run saves after round ``done`` of ``rounds``."""
        return done % self.every == 0 or done == rounds

    def save(self, done: int, z, backend, ctx, recorder, problem) -> None:
        """Save the run after round ``done``. A failed save warns (once per run), keeps the
        previous checkpoint and returns: the run goes on and its work is in its Result."""
        payload = {
            "identity": self.identity,
            "done": done,
            "z": backend.to_numpy(z).copy(),
            "scratch": ",".join(f"{b}:{k}" for b, k in sorted(ctx.layout.scratch.items())),
            "memory": ctx.memory,
            **recorder.state(done),
            "problem_rng": problem.rng_state() if hasattr(problem, "rng_state") else None,
        }
        try:
            files.save(self.path, payload)
        except OSError as error:
            if not self.failed:
                warnings.warn(
                    f"checkpoint {str(self.path)!r} could not be saved after round {done} "
                    f"({error.strerror or error}); the previous checkpoint is kept and the "
                    "run goes on",
                    CheckpointWarning,
                    stacklevel=5,  # the caller of run() (save, run_rounds, _run, run)
                )
            self.failed.append(done)


def _parse_scratch(text: str) -> dict:
    """The ``scratch`` of a checkpoint's layout from its text ("x:dead,y:zero")."""
    if not isinstance(text, str) or not text:
        return {}
    return dict(part.split(":", 1) for part in text.split(","))

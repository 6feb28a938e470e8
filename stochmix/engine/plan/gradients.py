"""Which gradient paths a problem allows: the compiled one-client gradient of the
row-wise loop, the unchecked and per-chunk gradients of pure formulas, and whether Numba
can be used at all.

The problem's declared flags (see :mod:`stochmix.protocols`, "The fast paths of the
gradients") are read as they are; a :class:`~stochmix.problems.Problem` subclass keeps
them true to its methods when it is defined.
"""

from __future__ import annotations

import sys
from functools import cache
from typing import NamedTuple

import numpy as np

from .capabilities import Capabilities, capabilities

__all__ = [
    "ROWWISE_MIN_ENTRIES",
    "ROWWISE_MIN_WORK",
    "RowGradient",
    "checked_samples",
    "chunk_gradients",
    "compiled_refusal",
    "gradients_at",
    "numba_available",
    "numba_unavailable",
    "pure_formula",
    "row_gradient",
    "runs_rowwise",
    "sampled_bind",
    "sampled_gradients_at",
]

# compiled="auto" takes the row-wise path for runs of phases of at least
# ROWWISE_MIN_ENTRIES node entries in runs expected to touch at least ROWWISE_MIN_WORK node
# entries in all (rounds x expected participants x d: compiling a structure costs 0.3-1 s
# once per machine, and the row-wise path saves about 3 ns an entry). The decision reads the
# run's arguments alone, never what the program cache holds.
ROWWISE_MIN_WORK = 3e8
ROWWISE_MIN_ENTRIES = 1 << 13


@cache
def numba_unavailable() -> str | None:
    """Why Numba cannot be used here, or None when it can (imports it on the first call).

    stochmix depends on Numba only on the Pythons Numba has releases for (the marker in
    pyproject.toml); elsewhere, or where it was removed, the NumPy programs run instead."""
    try:
        import numba  # noqa: F401
    except ImportError as error:
        if isinstance(error, ModuleNotFoundError) and error.name == "numba":
            python = ".".join(map(str, sys.version_info[:2]))
            return (
                "Numba is not installed (pip install numba; stochmix installs it itself only "
                f"on the Pythons Numba supports, and this is Python {python})"
            )
        return f"Numba cannot be imported ({error})"  # e.g. a NumPy too new for it
    return None


def numba_available() -> bool:
    """Whether Numba can be imported and used (see :func:`numba_unavailable`)."""
    return numba_unavailable() is None


class RowGradient(NamedTuple):
    """The problem's compiled one-client gradient for the row-wise path (see
    :meth:`stochmix.problems.Problem.row_gradient`), and its compiled sampled gradient
    (``sampled``: the ``(kernel, fetch, data)`` of
    :meth:`~stochmix.problems.Problem.sampled_row_gradient`, or None: runs that take
    ``grad(samples=...)`` then stay on the NumPy programs)."""

    kernel: object
    fetch: object
    data: tuple
    sampled: tuple | None = None


def row_gradient(
    problem,
    backend,
    dtype,
    work: float = float("inf"),
    per_round: float = float("inf"),
    caps: Capabilities | None = None,
) -> RowGradient | None:
    """The :class:`RowGradient` when the row-wise path may run this problem on
    ``backend``, per ``backend.compiled`` (read from ``caps``, the backend's
    :func:`~stochmix.engine.plan.capabilities.capabilities`; True, False or "auto": then
    compiling new
    programs only for a run of ``work`` >= :data:`ROWWISE_MIN_WORK` node entries, and
    none at all for rounds expected to touch fewer than :data:`ROWWISE_MIN_ENTRIES`
    (``per_round``): such runs never import Numba); else None. "auto" decides by these
    numbers alone, never by what a cache holds: the two paths agree to rounding, not bit
    for bit, and a run's numbers must not depend on what ran before it. Raises ValueError
    when ``compiled=True`` cannot be honoured.

    The problem's ``row_gradient`` is used where it declares ``pure_gradients`` and does
    not declare ``compiled_gradient`` false (a :class:`~stochmix.problems.Problem`
    subclass that rewrites its gradients without rewriting ``row_gradient`` has it false;
    see :attr:`~stochmix.problems.Problem.DECLARED_WITH`)."""
    mode = (capabilities(backend) if caps is None else caps).compiled
    if mode is False or (mode == "auto" and per_round < ROWWISE_MIN_ENTRIES):
        return None
    found = None
    if compiled_refusal(problem) is None:
        found = problem.row_gradient(np.dtype(dtype))
    if found is None and mode is True:
        why = numba_unavailable() or f"{type(problem).__name__} has no compiled gradient"
        raise ValueError(f"compiled=True: {why}; use compiled='auto' or False")
    if found is None or (mode == "auto" and work < ROWWISE_MIN_WORK):
        return None
    kernel, fetch, data = found
    return RowGradient(kernel, fetch, data, _sampled_kernel(problem, dtype))


def _sampled_kernel(problem, dtype) -> tuple | None:
    """The problem's compiled sampled gradient, where it has one and declares that it
    computes its ``sampled_gradients`` (``compiled_samples``)."""
    if not bool(getattr(problem, "compiled_samples", False)):
        return None
    found = getattr(problem, "sampled_row_gradient", None)
    return found(np.dtype(dtype)) if callable(found) else None


def compiled_refusal(problem) -> str | None:
    """Why ``problem``'s gradients cannot run in the compiled loop, or None when they may
    (its ``row_gradient`` may still give none for a dtype)."""
    name = type(problem).__name__
    if not numba_available():
        return numba_unavailable()
    if not callable(getattr(problem, "row_gradient", None)):
        return f"{name} has no compiled gradient (row_gradient)"
    if not bool(getattr(problem, "compiled_gradient", True)):
        return f"{name} declares compiled_gradient false (it rewrites its gradients)"
    if not pure_formula(problem):
        return f"{name}'s gradients are not declared a pure formula of its data (pure_gradients)"
    return None


def pure_formula(problem) -> bool:
    """Whether ``problem.gradients`` is a pure function of the problem's data (no random
    draws; see :attr:`stochmix.problems.Problem.pure_gradients`): such gradients may be
    split into chunks and threads."""
    return bool(getattr(problem, "pure_gradients", False))


def _unchecked(problem, member: str) -> bool:
    """Whether the engine may call ``problem.<member>`` (``gradients_unchecked`` or
    ``bind_clients``) for its gradients: pure ones, with the member, and not declared
    otherwise (``unchecked_gradients``)."""
    return (
        pure_formula(problem)
        and bool(getattr(problem, "unchecked_gradients", True))
        and callable(getattr(problem, member, None))
    )


def _compiled_gradient(problem) -> bool:
    """Whether ``problem.row_gradient`` may be asked for the row-wise path: pure
    gradients, the member, and not declared otherwise (``compiled_gradient``)."""
    return (
        pure_formula(problem)
        and bool(getattr(problem, "compiled_gradient", True))
        and callable(getattr(problem, "row_gradient", None))
    )


def chunk_gradients(problem):
    """A function ``(clients, like) -> (x -> gradients of those clients at x)`` for the
    chunks, which ask the same clients once per local step. Problems whose gradients are a
    pure formula gather the clients' data once (``bind_clients``); others are called as
    they are."""
    if _unchecked(problem, "bind_clients"):
        return problem.bind_clients
    return lambda clients, like: lambda x: problem.gradients(clients, x)


def gradients_at(problem, clients, points, consecutive: bool = False):
    """``problem.gradients(clients, points)``, without its argument checks where the
    gradients are a pure formula with an unchecked twin (the engine's indices and points
    are valid by construction). ``consecutive`` clients are given as a slice where the
    problem declares ``client_slices`` with the methods that take it (their data is then
    read in place, not gathered)."""
    if _unchecked(problem, "gradients_unchecked"):
        if consecutive and getattr(problem, "client_slices", False):
            clients = slice(int(clients[0]), int(clients[0]) + clients.size)
        return problem.gradients_unchecked(clients, points)
    return problem.gradients(clients, points)


def sampled_gradients_at(problem, clients, points, picks):
    """The sampled gradients of ``clients`` at ``points`` drawing the rows ``picks``
    ((c, b) int64; see :func:`~stochmix.engine.model.functions.grad`): the problem's
    ``sampled_gradients`` with scale m_c / b, the indices and scales moved to the points'
    device where the points are tensors."""
    clients, picks, scale = checked_samples(problem, clients, picks)
    if not isinstance(points, np.ndarray):  # a tensor (the Torch backend)
        import torch

        def moved(a):
            return torch.tensor(a, device=points.device)

        clients, picks, scale = moved(clients), moved(picks), moved(scale)
    return problem.sampled_gradients(clients, points, picks, scale)


def checked_samples(problem, clients, picks) -> tuple:
    """``(clients, picks, scale)`` for ``problem.sampled_gradients`` (and its compiled
    kernel): the clients as int64, the picks checked against each client's samples, and
    the scale m_c / b (float64). Raises ValueError for a problem without samples or a
    pick out of range."""
    counts = getattr(problem, "rows_per_client", None)
    if counts is None or not callable(getattr(problem, "sampled_gradients", None)):
        raise ValueError(
            f"grad(samples=...) needs a finite sum whose clients hold samples "
            f"(rows_per_client and sampled_gradients: LeastSquares, Logistic), got "
            f"{type(problem).__name__}"
        )
    clients = np.asarray(clients, dtype=np.int64)
    held = np.broadcast_to(np.asarray(counts, dtype=np.int64).reshape(-1), (problem.n_clients,))
    held = held[clients]
    if picks.size and (picks.min() < 0 or (picks >= held[:, None]).any()):
        k = int(np.flatnonzero(((picks < 0) | (picks >= held[:, None])).any(axis=1))[0])
        raise ValueError(
            f"grad(samples=...): client {int(clients[k])} holds {int(held[k])} samples "
            f"(0..{int(held[k]) - 1}), got samples {picks[k].tolist()}"
        )
    return clients, picks, held / picks.shape[1]


def sampled_bind(problem, clients, picks):
    """What :func:`chunk_gradients` gives, for a run that takes the sampled gradients of
    its ``clients`` drawing ``picks`` in one chunk (the chunk's clients are all of them)."""

    def bind(chunk, like):
        if len(chunk) != len(clients):
            raise AssertionError("a run of sampled gradients goes in one chunk")
        return lambda x: sampled_gradients_at(problem, clients, x, picks)

    return bind


def runs_rowwise(compiled, kernel: RowGradient | None, nodes: int, dim: int) -> bool:
    """Whether a segment of ``nodes`` nodes runs the compiled row-wise loop (given the
    run's :func:`row_gradient` and the backend's ``compiled`` capability): always with
    ``compiled=True``, else for segments of at least :data:`ROWWISE_MIN_ENTRIES` node
    entries (smaller ones run NumPy programs)."""
    return kernel is not None and (compiled is True or nodes * dim >= ROWWISE_MIN_ENTRIES)

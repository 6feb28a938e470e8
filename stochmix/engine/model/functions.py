"""The functions of the expression algebra (:mod:`stochmix.engine.model.expressions`):
:func:`grad`, the clients' gradients (full, or sampled from the rows each client draws),
and the reductions :func:`total`, :func:`mean` and :func:`dot` of a per-client expression
onto one row."""

from __future__ import annotations

import numpy as np
from jaxtyping import Float, Int

from .expressions import Expression
from .terms import EVERY, _Term, _with, client_array

__all__ = ["dot", "grad", "mean", "total"]


def grad(
    clients: int | np.integer | Int[np.ndarray, " s"] | list | None = None,
    *,
    samples: Int[np.ndarray, "..."] | None = None,
) -> Expression:
    """The gradient of every client of ``clients`` at its point: a per-client expression
    (one row for a single int client); ``grad()``: every client's gradient, for targets
    with one row per client (``y[:] = W @ y + grad() - g``).

    The rows it adds to are those of the equation's target (``x[S] -= lr * grad(S)``); in
    a reduction (``y.server += total(grad(S))``) the clients' gradients add up on one row.
    Client indices are checked against N when the equation is written.

    ``samples``: a minibatch estimate instead, on a finite sum
    (:class:`~stochmix.protocols.FiniteSumProblem`): client ``S[k]`` takes the rows
    ``samples[k]`` (positions among its m_k samples; shape ``(|S|, b)``, or ``(|S|,)``
    for b = 1) and its gradient is ``(m_k / b) sum_j grad loss_j`` plus the problem's
    ridge term: the problem's ``sampled_gradients``, one gradient evaluation and b sample
    gradients per client. With b = 1 it is the component gradient grad f_{k, j} of f_k =
    (1/m_k) sum_j f_{k, j}. A phase takes one set of gradients: full ones or one draw.
    """
    if samples is not None:
        return _sampled(grad(clients), samples)
    if clients is None:
        return Expression((_Term(None, EVERY, 1.0, over=EVERY),), EVERY)
    if isinstance(clients, (int, np.integer)) and not isinstance(clients, bool):
        one = np.array([int(clients)], dtype=np.int64)
        return Expression((_Term(None, one, 1.0),), None)
    arr = client_array(clients, "grad()")
    return Expression((_Term(None, arr, 1.0, over=arr),), arr)


def _sampled(expr: Expression, samples) -> Expression:
    """``expr`` (a gradient term) drawing ``samples`` (checked against its clients)."""
    arr = np.asarray(samples)
    if arr.dtype == np.bool_ or arr.dtype.kind not in "iu" or arr.ndim not in (1, 2):
        raise TypeError(
            f"grad(samples=...) takes an integer array of shape (clients, b) or (clients,), "
            f"got dtype {arr.dtype} and shape {arr.shape}"
        )
    (term,) = expr.terms
    arr = np.array(arr, dtype=np.int64).reshape(arr.shape[0], -1)  # (a copy, read-only)
    arr.flags.writeable = False
    if arr.size and arr.min() < 0:
        raise ValueError(f"grad(samples=...): sample {arr.min()} is negative")
    if term.rows is EVERY:
        return Expression((_with(term, samples=arr),), expr.clients)
    if arr.shape[0] != np.size(term.rows) or arr.shape[1] == 0:
        raise ValueError(
            f"grad(samples=...) needs at least one sample for each of the {np.size(term.rows)} "
            f"clients, got shape {np.shape(samples)}"
        )
    return Expression((_with(term, samples=arr),), expr.clients)


def total(expr: Expression) -> Expression:
    """``sum_{i in S} e_i``: a per-client expression summed onto one row."""
    _expect(expr, "total")
    return expr._reduce("total", False)


def mean(expr: Expression) -> Expression:
    """``(1/|S|) sum_{i in S} e_i``; a single row inside ``e`` counts as itself."""
    _expect(expr, "mean")
    return expr._reduce("mean", True)


def dot(weights: float | Float[np.ndarray, " s"], expr: Expression) -> Expression:
    """``sum_{i in S} w_i e_i`` with per-client weights ``w`` of shape ``(|S|,)``."""
    _expect(expr, "dot")
    return expr._scaled(weights, "dot() weights")._reduce("dot", False)


def _expect(expr, name: str) -> None:
    if not isinstance(expr, Expression):
        raise TypeError(f"{name}() takes an expression of block rows, got {expr!r}")

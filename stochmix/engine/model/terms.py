"""The terms of the equation layer (:mod:`stochmix.engine.model.equations`): ``num / den``
times block rows or gradients, shared with the activated lowering
(:mod:`stochmix.engine.model.activated`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...mixing.rowsparse import RowSparse
from .round_scalars import RoundScalar, scaled

__all__: list[str] = []


class _Every:
    """The clients of ``grad()``: every client, resolved against the equation's target."""

    size = -1

    def __repr__(self) -> str:
        return "every client"


EVERY = _Every()


@dataclass(frozen=True)
class _Term:
    """``num / den`` times block rows (or gradients when ``block`` is None).

    ``rows`` is one block-local row (an int) or block-local rows aligned with ``over``, the
    clients the term runs over; ``summed`` marks a reduction of such rows onto one row.
    """

    block: str | None
    rows: Any  # a row (int), rows (int array), or EVERY for grad()
    num: Any  # float or a float array aligned with the clients
    den: float = 1.0
    over: Any = None  # np.ndarray, EVERY or None
    summed: bool = False
    op: RowSparse | None = None  # a mixing operator applied to the whole block ``block``
    whole: bool = False  # every row of ``block`` (x[:]): ``rows`` and ``over`` are aranges
    view: bool = False  # rows picked by index (x.at[...]): ``rows`` are not ``over`` shifted
    samples: Any = None  # a sampled gradient's draws, (clients, b) int64 (grad(S, samples=))

    @property
    def coef(self):
        if self.den == 1.0 and not isinstance(self.den, RoundScalar):
            return self.num
        return scaled(self.num, self.den, np.true_divide)


def _term(block, rows, num, over=None, whole: bool = False, view: bool = False) -> _Term:
    """``_Term(block, rows, num, over=over, whole=whole, view=view)``, made without the
    frozen ``__init__`` (a round's equations make a few dozen terms)."""
    new = object.__new__(_Term)
    new.__dict__.update(
        block=block, rows=rows, num=num, den=1.0, over=over, summed=False, op=None,
        whole=whole, view=view, samples=None,
    )  # fmt: skip
    return new


def _with(term: _Term, **changes) -> _Term:
    """``dataclasses.replace(term, **changes)`` without its per-field ``getattr`` and
    frozen ``__init__`` (the equations of a round make a few dozen terms)."""
    new = object.__new__(_Term)
    fields = new.__dict__
    fields.update(term.__dict__)
    fields.update(changes)
    return new


def client_array(clients, what: str) -> np.ndarray:
    """``clients`` as a 1-d int64 array (indices not yet checked against N); ``what``
    names the argument in the errors (a boolean mask, another dtype or shape)."""
    arr = np.asarray(clients)
    if arr.dtype == np.bool_:
        raise TypeError(f"{what}: client indices expected, got a boolean mask: use np.flatnonzero")
    if arr.size == 0:
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu" or arr.ndim != 1:
        raise TypeError(
            f"{what}: a 1-d integer array of clients or an int expected, got dtype "
            f"{arr.dtype} and shape {arr.shape}"
        )
    return arr.astype(np.int64, copy=False)

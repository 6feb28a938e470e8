"""The ``[sweep]`` table: which keys vary, over which values, and how they combine.

A sweep maps dotted keys of a configuration (see :mod:`stochmix.studies.keys`) to values:

* a list: ``"participation.low" = [0.02, 0.05, 0.1]``;
* a range: ``"problem.dim" = { start = 5, stop = 20, num = 4 }`` (``num`` evenly spaced
  values, both ends included; integers where ``start``, ``stop`` and the spacing are);
* a log-range: ``"methods.FOCUS.lr" = { start = 1e-4, stop = 1e-2, num = 3, log = true }``
  (``num`` values evenly spaced in log scale, both ends included).

Range values are rounded to 12 significant digits, so that 0.1 + 0.2 prints as 0.3 in
the study's table and folder names. ``mode = "product"`` (the default) runs every
combination; ``mode = "zip"`` pairs the lists element by element (all of one length).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..config import ConfigError

__all__ = [
    "MODES",
    "Sweep",
    "SweepError",
    "parse_sweep",
]

#: How the swept values combine: every combination, or element by element.
MODES = ("product", "zip")

_RANGE_KEYS = {"start", "stop", "num", "log"}


class SweepError(ConfigError):
    """A study that cannot run; the message names the swept key and its value."""


@dataclass(frozen=True)
class Sweep:
    """The swept keys (in the order of the table), their values, and the mode.

    Attributes:
        values: each swept key and the values it takes.
        mode: ``"product"`` or ``"zip"``.
    """

    values: dict[str, list]
    mode: str = "product"

    @property
    def keys(self) -> list[str]:
        """The swept keys, in the order of the table."""
        return list(self.values)

    def combinations(self) -> list[dict[str, Any]]:
        """Every combination of swept values, in a fixed order (the first key slowest).

        Returns:
            One dict per combination, from swept key to value (one empty dict when
            nothing is swept).
        """
        keys = self.keys
        rows: Iterable[tuple]
        if self.mode == "zip":
            rows = zip(*(self.values[k] for k in keys), strict=True)
        else:
            rows = itertools.product(*(self.values[k] for k in keys))
        return [dict(zip(keys, row, strict=True)) for row in rows]


def _round(value: float) -> float:
    return float(f"{value:.12g}")


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _expand_range(key: str, table: dict) -> list:
    """The values of a range table ``{start, stop, num[, log]}``."""
    unknown = sorted(set(table) - _RANGE_KEYS)
    if unknown:
        raise SweepError(
            f"sweep.{key}: unknown range key {unknown[0]!r} in {table!r}; a range is "
            "{ start = .., stop = .., num = .. } (add log = true for a log-range)"
        )
    missing = [k for k in ("start", "stop", "num") if k not in table]
    if missing:
        raise SweepError(f"sweep.{key}: the range {table!r} needs {missing[0]}")
    start, stop, num = table["start"], table["stop"], table["num"]
    log = table.get("log", False)
    if not (_number(start) and _number(stop)):
        raise SweepError(f"sweep.{key}: start and stop must be numbers, got {table!r}")
    if not isinstance(num, int) or isinstance(num, bool) or num < 1:
        raise SweepError(f"sweep.{key}: an empty range, num must be >= 1, got {table!r}")
    if not isinstance(log, bool):
        raise SweepError(f"sweep.{key}: log must be true or false, got {table!r}")
    if num == 1 and start != stop:
        raise SweepError(f"sweep.{key}: num = 1 needs start = stop, got {table!r}")
    if log:
        if start <= 0 or stop <= 0:
            raise SweepError(f"sweep.{key}: a log-range needs start, stop > 0, got {table!r}")
        points = np.geomspace(start, stop, num)
        return [_round(v) for v in points.tolist()]
    points = np.linspace(start, stop, num)
    integral = all(isinstance(v, int) for v in (start, stop))
    if integral and (num == 1 or (stop - start) % (num - 1) == 0):
        return [int(round(v)) for v in points.tolist()]
    return [_round(v) for v in points.tolist()]


def _values(key: str, value) -> list:
    if isinstance(value, dict):
        return _expand_range(key, value)
    if not isinstance(value, list):
        raise SweepError(
            f"sweep.{key} must be a list of values or a range table "
            f"{{ start = .., stop = .., num = .. }}, got {value!r}"
        )
    if not value:
        raise SweepError(f"sweep.{key}: an empty list of values, got {value!r}")
    return list(value)


def parse_sweep(table: dict, mode: str | None = None) -> Sweep:
    """Read a ``[sweep]`` table (its keys unchecked against the configuration: see
    :func:`stochmix.studies.keys.check_keys`).

    Args:
        table: swept key -> list or range table, and an optional ``mode``.
        mode: ``"product"`` or ``"zip"``; overrides nothing: it must agree with the
            table's ``mode`` where both are given.

    Returns:
        The :class:`Sweep`.

    Raises:
        SweepError: an empty list or range, a bad range, an unknown mode, zipped lists
            of different lengths; the message names the key and the value.
    """
    if not isinstance(table, dict):
        raise SweepError(f"sweep must be a table of key = values, got {table!r}")
    table = dict(table)
    given = table.pop("mode", None)
    if given is not None and mode is not None and given != mode:
        raise SweepError(f"sweep.mode = {given!r} but mode = {mode!r} was asked for")
    chosen = given if given is not None else (mode or "product")
    if chosen not in MODES:
        raise SweepError(f"sweep.mode must be one of {list(MODES)}, got {chosen!r}")
    values = {}
    for key, value in table.items():
        if not isinstance(key, str) or not key:
            raise SweepError(f"sweep keys must be dotted names, got {key!r}")
        values[key] = _values(key, value)
    if chosen == "zip":
        lengths = {key: len(v) for key, v in values.items()}
        if len(set(lengths.values())) > 1:
            raise SweepError(f"sweep.mode = 'zip' needs lists of one length, got lengths {lengths}")
    return Sweep(values, chosen)

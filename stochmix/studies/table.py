"""The study's tables: ``study.csv`` (a row per cell, method and seed: the swept values,
then the per-run summary) and ``timing.csv`` (the wall times, kept apart so that the same
study gives the same ``study.csv`` bytes whatever the order or the executor).
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

from ..experiments import _write
from .cells import SUMMARY_FIELDS, Cell

__all__ = [
    "STUDY_TIMING_COLUMNS",
    "columns",
    "header",
    "study_rows",
    "timing_rows",
    "write_csv",
]

#: The columns of a study's ``timing.csv``.
STUDY_TIMING_COLUMNS = ("cell", "seed", "method", "seconds")


def header(keys: list[str]) -> list[str]:
    """The columns of ``study.csv``: the cell's folder, the swept keys (named as in the
    ``[sweep]`` table), the seed, the method, then :data:`~stochmix.studies.cells.SUMMARY_FIELDS`.

    Args:
        keys: the swept keys.

    Returns:
        The column names.
    """
    return ["cell", *keys, "seed", "method", *SUMMARY_FIELDS]


def study_rows(cells: list[Cell], outcomes: dict[int, dict]) -> list[dict[str, Any]]:
    """The rows of ``study.csv`` of the cells that finished, in the study's order.

    Args:
        cells: every cell of the study.
        outcomes: cell index -> what the cell returned (cells without rows are left out).

    Returns:
        One dict per cell, method and seed.
    """
    rows = []
    for cell in sorted(cells, key=lambda c: c.index):
        for run in outcomes.get(cell.index, {}).get("rows", []):
            # the identity columns come from the cell, never from what the cell returned
            rows.append({**run, "cell": cell.name, **cell.values, "seed": cell.seed})
    return rows


def timing_rows(cells: list[Cell], outcomes: dict[int, dict]) -> list[dict[str, Any]]:
    """The rows of the study's ``timing.csv``, in the study's order."""
    rows = []
    for cell in sorted(cells, key=lambda c: c.index):
        for run in outcomes.get(cell.index, {}).get("timing", []):
            rows.append({**run, "cell": cell.name, "seed": cell.seed})
    return rows


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    if isinstance(value, (list, dict)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def write_csv(rows: list[dict[str, Any]], names: list[str] | tuple[str, ...], path) -> Path:
    """Write ``rows`` as CSV with the columns ``names`` (floats in their shortest exact
    text, an empty cell for a missing value, lists as JSON).

    Args:
        rows: the rows.
        names: the columns, in order.
        path: the file.

    Returns:
        The file's path.
    """
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(names)
    for row in rows:
        writer.writerow([_text(row.get(name)) for name in names])
    return _write(Path(path), buffer.getvalue())


def columns(rows: list[dict[str, Any]], names: list[str]) -> dict[str, list]:
    """``rows`` as a dict of columns.

    Args:
        rows: the rows.
        names: the columns, in order.

    Returns:
        Column name -> its values (None where a row has none).
    """
    return {name: [row.get(name) for row in rows] for name in names}

"""The figure a study needs: a per-run summary against a swept value, the median over
seeds with the min-max band, a line per method."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np

from ..experiments import _geometric_band
from .cells import SUMMARY_FIELDS

__all__ = [
    "CURVE_METRICS",
    "plot_curves",
    "plot_summary",
]

#: The per-round curves :func:`plot_curves` shows by default: the first a run recorded.
CURVE_METRICS = ("relative_error", "objective_gap", "objective")

_LOG_Y = ("final_relative_error", "final_objective_gap", "final_objective")


def _number(value: Any) -> float:
    if value is None or isinstance(value, bool):
        return float("nan")
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def plot_summary(
    rows: list[dict[str, Any]],
    keys: list[str],
    *,
    y: str = "rate",
    x: str | None = None,
    ax=None,
    logx: bool | None = None,
    logy: bool | None = None,
):
    """Plot the summary column ``y`` of ``study.csv``'s rows against the swept key ``x``.

    Args:
        rows: the study's rows.
        keys: the swept keys.
        y: a summary column.
        x: a swept key (default the first).
        ax: a matplotlib Axes (default: a new figure's).
        logx: a log x axis (default: positive values spanning a factor of 20 or more).
        logy: a log y axis (default: for the final errors).

    Returns:
        The Axes.

    Raises:
        ValueError: ``x`` is not a swept key or ``y`` not a summary column.
    """
    if not keys:
        raise ValueError("the study sweeps nothing: there is no x to plot against")
    x = keys[0] if x is None else x
    if x not in keys:
        raise ValueError(f"x must be a swept key, one of {keys}, got {x!r}")
    summaries = [f for f in SUMMARY_FIELDS if f != "diverged_at"]
    if y not in summaries:
        raise ValueError(f"y must be one of {summaries}, got {y!r}")
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 4.2))
    others = [k for k in keys if k != x]
    groups: dict[tuple, dict[Any, list[float]]] = {}
    for row in rows:
        group = (row["method"], *(repr(row[k]) for k in others))
        groups.setdefault(group, {}).setdefault(row[x], []).append(_number(row.get(y)))
    xs_all: list[float] = []
    for group, by_x in groups.items():
        xs = sorted(by_x, key=_number)
        values = [np.asarray(by_x[v], dtype=float) for v in xs]
        finite = [v[np.isfinite(v)] for v in values]
        pos = [_number(v) for v in xs]
        median = [float(np.median(v)) if v.size else np.nan for v in finite]
        low = [float(v.min()) if v.size else np.nan for v in finite]
        high = [float(v.max()) if v.size else np.nan for v in finite]
        label = ", ".join(
            [group[0], *(f"{k} = {v}" for k, v in zip(others, group[1:], strict=True))]
        )
        (line,) = ax.plot(pos, median, marker="o", label=label)
        if any(len(v) > 1 for v in values):
            ax.fill_between(pos, low, high, color=line.get_color(), alpha=0.2)
        xs_all.extend(p for p in pos if np.isfinite(p))
    if logx is None:
        logx = bool(xs_all) and min(xs_all) > 0 and max(xs_all) >= 20 * min(xs_all)
    if logy is None:
        logy = y in _LOG_Y
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(x)
    ax.set_ylabel(y.replace("_", " "))
    ax.grid(True, alpha=0.3)
    ax.legend()
    return ax


def _curves(path: Path) -> dict[tuple[str, float], dict[str, list[float]]]:
    """The curves of a cell's ``metrics.csv``: (method, lr) -> column -> values by round
    (several seeds' rows, in order)."""
    out: dict[tuple[str, float], dict[str, list[float]]] = {}
    with open(path, newline="", encoding="utf-8") as handle:
        for line in csv.DictReader(handle):
            columns = out.setdefault((line["method"], float(line["lr"])), {})
            for name in CURVE_METRICS:
                if name in line:
                    columns.setdefault(name, []).append(_number(line[name] or None))
    return out


def plot_curves(
    folder,
    rows: list[dict[str, Any]],
    keys: list[str],
    *,
    by: str | None = None,
    metric: str | None = None,
    axes=None,
):
    """The per-round curves of every cell, faceted by a swept value: a panel per value of
    ``by``, a line per method (and per value of the other swept keys) at each cell's best
    step size, the geometric mean over seeds and the min-max band.

    Args:
        folder: the study folder (its ``cells/<cell>/metrics.csv`` are read).
        rows: the study's rows.
        keys: the swept keys.
        by: the swept key of the panels (default the first).
        metric: one of :data:`CURVE_METRICS` (default the first a run recorded).
        axes: a sequence of matplotlib Axes, one per value of ``by`` (default: a new
            figure's, side by side, sharing the y axis).

    Returns:
        The Axes, one per value of ``by``.

    Raises:
        ValueError: ``by`` is not a swept key, ``metric`` is not a curve, or ``axes`` has
            not one Axes per value.
    """
    if not keys:
        raise ValueError("the study sweeps nothing: there is no value to facet by")
    by = keys[0] if by is None else by
    if by not in keys:
        raise ValueError(f"by must be a swept key, one of {keys}, got {by!r}")
    if metric is not None and metric not in CURVE_METRICS:
        raise ValueError(f"metric must be one of {list(CURVE_METRICS)}, got {metric!r}")
    cells: dict[str, dict] = {}
    for row in rows:
        if row["cell"] not in cells:
            cells[row["cell"]] = _curves(Path(folder) / "cells" / row["cell"] / "metrics.csv")
    if metric is None:
        recorded = [
            name
            for name in CURVE_METRICS
            if any(
                np.isfinite(columns.get(name, [np.nan])).any()
                for curves in cells.values()
                for columns in curves.values()
            )
        ]
        metric = recorded[0] if recorded else CURVE_METRICS[0]
    values = sorted({repr(row[by]): row[by] for row in rows}.values(), key=_number)
    if axes is None:
        import matplotlib.pyplot as plt

        _, grid = plt.subplots(
            1, len(values), figsize=(3.2 * len(values) + 1, 3.6), sharey=True, squeeze=False
        )
        axes = list(grid[0])
    if len(axes) != len(values):
        raise ValueError(f"axes must hold one Axes per value of {by} ({len(values)})")
    others = [k for k in keys if k != by]
    panels: dict[str, dict[tuple, list[np.ndarray]]] = {repr(v): {} for v in values}
    for row in rows:
        columns = cells[row["cell"]].get((row["method"], float(row["lr"])), {})
        curve = np.asarray(columns.get(metric, []), dtype=float)
        group = (row["method"], *(repr(row[k]) for k in others))
        panels[repr(row[by])].setdefault(group, []).append(curve)
    for ax, value in zip(axes, values, strict=True):
        for group, curves in panels[repr(value)].items():
            curves = [c for c in curves if c.size and np.isfinite(c).any()]
            if not curves:
                continue
            rounds, mean, low, high = _geometric_band(curves)
            label = ", ".join(
                [group[0], *(f"{k} = {v}" for k, v in zip(others, group[1:], strict=True))]
            )
            (line,) = ax.semilogy(rounds, mean, label=label)
            if len(curves) > 1:
                ax.fill_between(rounds, low, high, color=line.get_color(), alpha=0.2)
        ax.set_title(f"{by} = {value}")
        ax.set_xlabel("round")
        ax.grid(True, which="major", alpha=0.3)
    axes[0].set_ylabel(metric.replace("_", " "))
    axes[0].legend()
    return axes

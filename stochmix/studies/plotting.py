"""The figure a study needs: a per-run summary against a swept value, the median over
seeds with the min-max band, a line per method; and the per-round curves of the cells.

Swept values that are numbers sit on a numeric x axis, a log one where they are positive
and either geometrically spaced (three or more values with one ratio, as a log-range
gives: ``lr = [1e-3, 1e-2, 1e-1]``) or spanning a factor of 20 or more; other values
(tables, strings, lists) sit at evenly spaced ticks labelled as the cells' folders name
them (:func:`~stochmix.studies.cells.shown_value`)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np

from ..config.output import AXIS_LABELS, PLOT_AXES
from ..experiments import _geometric_band
from .cells import SUMMARY_FIELDS, shown_value, value_key

__all__ = [
    "CURVE_METRICS",
    "log_spaced",
    "plot_curves",
    "plot_summary",
]

#: The per-round curves :func:`plot_curves` shows by default: the first a run recorded.
CURVE_METRICS = ("relative_error", "objective_gap", "objective")

_LOG_Y = ("final_relative_error", "final_objective_gap", "final_objective")

#: Summary columns that are not numbers to plot.
_NOT_PLOTTED = ("diverged_at", "lr_at_edge", "diverging")


def _number(value: Any) -> float:
    if value is None or isinstance(value, bool):
        return float("nan")
    try:
        return float(value)
    except (TypeError, ValueError):
        return float("nan")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def log_spaced(values) -> bool:
    """Whether swept values belong on a log axis: positive numbers that are geometrically
    spaced (three or more distinct values whose consecutive ratios agree to 0.1%) or that
    span a factor of 20 or more.

    Args:
        values: the swept values (numbers).

    Returns:
        True for a log axis.
    """
    points = sorted({float(v) for v in values if _is_number(v) and np.isfinite(float(v))})
    if not points or points[0] <= 0:
        return False
    if points[-1] >= 20 * points[0]:
        return True
    if len(points) < 3:
        return False
    ratios = np.asarray(points[1:]) / np.asarray(points[:-1])
    return bool(np.allclose(ratios, ratios[0], rtol=1e-3))


def _positions(values: list) -> tuple[dict[str, float], bool]:
    """value key -> x position, and whether the values are numbers (else evenly spaced
    ticks, in the order of first appearance)."""
    numeric = all(_is_number(v) for v in values)
    keyed = {value_key(v): v for v in values}
    if numeric:
        return {k: float(v) for k, v in keyed.items()}, True
    return {k: float(i) for i, k in enumerate(keyed)}, False


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
        logx: a log x axis (default: :func:`log_spaced`; never for values that are not
            numbers).
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
    summaries = [f for f in SUMMARY_FIELDS if f not in _NOT_PLOTTED]
    if y not in summaries:
        raise ValueError(f"y must be one of {summaries}, got {y!r}")
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(6.5, 4.2))
    others = [k for k in keys if k != x]
    position, numeric = _positions([row[x] for row in rows])
    groups: dict[tuple, dict[str, list[float]]] = {}
    shown: dict[tuple, list[str]] = {}
    for row in rows:
        group = (row["method"], *(value_key(row[k]) for k in others))
        shown.setdefault(group, [row["method"], *(shown_value(row[k]) for k in others)])
        groups.setdefault(group, {}).setdefault(value_key(row[x]), []).append(_number(row.get(y)))
    for group, by_x in groups.items():
        xs = sorted(by_x, key=lambda k: position[k])
        values = [np.asarray(by_x[v], dtype=float) for v in xs]
        finite = [v[np.isfinite(v)] for v in values]
        pos = [position[v] for v in xs]
        median = [float(np.median(v)) if v.size else np.nan for v in finite]
        low = [float(v.min()) if v.size else np.nan for v in finite]
        high = [float(v.max()) if v.size else np.nan for v in finite]
        names = shown[group]
        label = ", ".join(
            [names[0], *(f"{k} = {v}" for k, v in zip(others, names[1:], strict=True))]
        )
        (line,) = ax.plot(pos, median, marker="o", label=label)
        if any(len(v) > 1 for v in values):
            ax.fill_between(pos, low, high, color=line.get_color(), alpha=0.2)
    if not numeric:
        ticks = {value_key(row[x]): shown_value(row[x]) for row in rows}
        ax.set_xticks([position[k] for k in ticks], list(ticks.values()))
        logx = False
    if logx is None:
        logx = log_spaced(row[x] for row in rows)
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
    (several seeds' rows, in order): the error metrics and the x axes."""
    out: dict[tuple[str, float], dict[str, list[float]]] = {}
    with open(path, newline="", encoding="utf-8") as handle:
        for line in csv.DictReader(handle):
            columns = out.setdefault((line["method"], float(line["lr"])), {})
            for name in (*CURVE_METRICS, *PLOT_AXES[1:]):
                if name in line:
                    columns.setdefault(name, []).append(_number(line[name] or None))
    return out


def _along(columns: dict[str, list[float]], x: str, size: int) -> np.ndarray:
    """The x values of a curve's ``size`` rounds: the round, the running sum of a cost
    column, or the simulated time."""
    if x == "round":
        return np.arange(size, dtype=float)
    values = columns.get(x)
    if values is None or not np.isfinite(np.asarray(values, dtype=float)).any():
        what = "simulated time (add a [clock] table)" if x == "time" else f"{x!r} column"
        raise ValueError(f"x = {x!r}: the cells' metrics.csv have no {what}")
    along = np.asarray(values[:size], dtype=float)
    return along if x == "time" else np.cumsum(np.nan_to_num(along))


def plot_curves(
    folder,
    rows: list[dict[str, Any]],
    keys: list[str],
    *,
    by: str | None = None,
    metric: str | None = None,
    axes=None,
    x: str = "round",
):
    """The per-round curves of every cell, faceted by a swept value: a panel per value of
    ``by``, a line per method (and per value of the other swept keys) at each cell's best
    step size, the geometric mean over seeds and the min-max band, against ``x``.

    Args:
        folder: the study folder (its ``cells/<cell>/metrics.csv`` are read).
        rows: the study's rows.
        keys: the swept keys.
        by: the swept key of the panels (default the first).
        metric: one of :data:`CURVE_METRICS` (default the first a run recorded).
        axes: a sequence of matplotlib Axes, one per value of ``by`` (default: a new
            figure's, side by side, sharing the y axis).
        x: one of :data:`~stochmix.config.output.PLOT_AXES`: the round, the running sum of
            the ``gradients``, ``messages`` or ``floats`` column, or the simulated ``time``
            (for several seeds, the mean over them at each round).

    Returns:
        The Axes, one per value of ``by``.

    Raises:
        ValueError: ``by`` is not a swept key, ``metric`` is not a curve, ``x`` is not
            an axis or not in the cells' ``metrics.csv``, or ``axes`` has not one Axes
            per value.
    """
    if x not in PLOT_AXES:
        raise ValueError(f"x must be one of {list(PLOT_AXES)}, got {x!r}")
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
    position, _ = _positions([row[by] for row in rows])
    values = sorted({value_key(row[by]): row[by] for row in rows}.values(), key=_number)
    values = sorted(values, key=lambda v: position[value_key(v)])
    if axes is None:
        import matplotlib.pyplot as plt

        _, grid = plt.subplots(
            1, len(values), figsize=(3.2 * len(values) + 1, 3.6), sharey=True, squeeze=False
        )
        axes = list(grid[0])
    if len(axes) != len(values):
        raise ValueError(f"axes must hold one Axes per value of {by} ({len(values)})")
    others = [k for k in keys if k != by]
    panels: dict[str, dict[tuple, list[tuple[np.ndarray, np.ndarray]]]] = {
        value_key(v): {} for v in values
    }
    shown: dict[tuple, list[str]] = {}
    for row in rows:
        columns = cells[row["cell"]].get((row["method"], float(row["lr"])), {})
        curve = np.asarray(columns.get(metric, []), dtype=float)
        along = _along(columns, x, curve.size) if curve.size else curve
        group = (row["method"], *(value_key(row[k]) for k in others))
        shown.setdefault(group, [row["method"], *(shown_value(row[k]) for k in others)])
        panels[value_key(row[by])].setdefault(group, []).append((curve, along))
    for ax, value in zip(axes, values, strict=True):
        for group, pairs in panels[value_key(value)].items():
            pairs = [(c, a) for c, a in pairs if c.size and np.isfinite(c).any()]
            if not pairs:
                continue
            curves = [c for c, _ in pairs]
            rounds, mean, low, high = _geometric_band(curves)
            where = _mean_along([a for _, a in pairs], rounds)
            names = shown[group]
            label = ", ".join(
                [names[0], *(f"{k} = {v}" for k, v in zip(others, names[1:], strict=True))]
            )
            (line,) = ax.semilogy(where, mean, label=label)
            if len(curves) > 1:
                ax.fill_between(where, low, high, color=line.get_color(), alpha=0.2)
        ax.set_title(f"{by} = {shown_value(value)}")
        ax.set_xlabel(AXIS_LABELS[x])
        ax.grid(True, which="major", alpha=0.3)
    axes[0].set_ylabel(metric.replace("_", " "))
    axes[0].legend()
    return axes


def _mean_along(alongs: list[np.ndarray], rounds: np.ndarray) -> np.ndarray:
    """The mean over seeds of the x values at ``rounds``."""
    import warnings

    length = max(a.size for a in alongs)
    stack = np.full((len(alongs), length), np.nan)
    for i, along in enumerate(alongs):
        stack[i, : along.size] = along
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(stack, axis=0)[rounds]

"""The figure a study needs: a per-run summary against a swept value, the median over
seeds with the min-max band, a line per method."""

from __future__ import annotations

from typing import Any

import numpy as np

from .cells import SUMMARY_FIELDS

__all__ = [
    "plot_summary",
]

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

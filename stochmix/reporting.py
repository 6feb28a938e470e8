"""Summary tables of finished runs: :func:`compare` gives, from Python, the table that
``stochmix run`` prints (one row per method, medians over seeds).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from .engine.runner.result import Result

__all__ = [
    "Comparison",
    "SUMMARY_COLUMNS",
    "compare",
    "format_table",
    "summary_row",
]

#: (key, header, format) of the summary table's columns. ``final objective`` is the loss
#: f(x) itself, shown for problems whose f_star is unknown (learning problems) in place of
#: ``final obj. gap`` (a column no row has a value for is left out). The format ``"flag"``
#: prints a truth value as ``yes`` / ``no``, in a column shown only where some row says
#: yes: ``lr at edge`` (the best step is the smallest or largest of its grid:
#: :func:`stochmix.experiments.lr_at_edge`) and ``diverging``
#: (:func:`stochmix.experiments.diverging`).
SUMMARY_COLUMNS = (
    ("method", "method", "s"),
    ("lr", "lr", ".3g"),
    ("final_relative_error", "final rel. error", ".2e"),
    ("final_objective_gap", "final obj. gap", ".2e"),
    ("final_objective", "final objective", ".2e"),
    ("rounds_to_1e-8", "rounds to 1e-8", "d"),
    ("rate", "linear rate", ".4f"),
    ("seconds", "seconds", ".2f"),
    ("lr_at_edge", "lr at edge", "flag"),
    ("diverging", "diverging", "flag"),
)


def format_table(rows: list[dict], columns=SUMMARY_COLUMNS) -> str:
    """A plain-text table; ``columns`` are (key, header, format) triples. A column no row
    has a value for is left out (a ``"flag"`` column: no row true); a missing value prints
    as ``-``, a flag as ``yes`` or ``no``."""

    def shown(column) -> bool:
        key, _, fmt = column
        if fmt == "flag":
            return any(row.get(key) is True for row in rows)
        return any(row.get(key) is not None for row in rows)

    columns = [c for c in columns if shown(c)] or list(columns[:1])
    cells = [[head for _, head, _ in columns]]
    for row in rows:
        line = []
        for key, _, fmt in columns:
            value = row.get(key)
            if value is None:
                line.append("-")
            elif fmt == "flag":
                line.append("yes" if value else "no")
            else:
                line.append(format(value, fmt))
        cells.append(line)
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    text = ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    text.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(text)


def summary_row(label: str, results: list[Result], lr=None) -> dict:
    """One row of the summary table for the runs ``results`` of one method (one per seed):
    medians over them of the final relative error and objective gap (or objective, where
    f_star is unknown), the linear rate and the seconds, and the median rounds to 1e-8
    (None unless every run got there)."""
    if not results:
        raise ValueError(f"results for {label!r} must not be empty")
    sums = [res.summary() for res in results]
    if lr is None:
        lrs = {res.config.get("lr") for res in results}
        lr = lrs.pop() if len(lrs) == 1 else None
    row = {
        "method": label,
        "lr": lr,
        "seconds": float(np.median([res.wall_time[-1] for res in results])),
    }
    for key in ("final_relative_error", "rate", "final_objective_gap", "final_objective"):
        vals = [s[key] for s in sums if s.get(key) is not None]
        row[key] = float(np.median(vals)) if vals else None
    hits = [s.get("rounds_to_1e-8") for s in sums]
    reached = [h for h in hits if h is not None]
    row["rounds_to_1e-8"] = int(np.median(reached)) if hits and len(reached) == len(hits) else None
    return row


def _lr(lr) -> str:
    return "?" if lr is None else format(lr, ".3g")


@dataclass
class Comparison:
    """The summary table of several methods' runs: ``rows`` (one dict per method) prints
    as the command's table; :meth:`to_dataframe` gives it to pandas."""

    rows: list[dict]

    def __str__(self) -> str:
        return format_table(self.rows)

    def to_dataframe(self):
        """The rows as a ``pandas.DataFrame`` (pandas is optional)."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError("Comparison.to_dataframe needs pandas (pip install pandas)") from None
        return pd.DataFrame(self.rows)


def compare(results: Iterable | Mapping) -> Comparison:
    """The summary table of finished runs, as ``stochmix run`` prints it.

    ``results`` is a list of :class:`Result` (grouped by method name and step size:
    several runs of one method at one step size, e.g. over seeds, give one row of medians;
    a method run at several step sizes gets a row for each) or a mapping from a label to a
    Result or a list of them. ``print(sm.compare(results))`` shows the table.

    Raises:
        TypeError: an entry that is not a Result.
    """
    if isinstance(results, Mapping):
        groups = {str(k): (v if isinstance(v, (list, tuple)) else [v]) for k, v in results.items()}
    else:
        by_run: dict = {}
        for res in results:
            if not isinstance(res, Result):
                raise TypeError(f"results must hold stochmix Results, got {type(res).__name__}")
            by_run.setdefault((res.method, res.config.get("lr")), []).append(res)
        names = [method for method, _ in by_run]
        groups = {
            (method if names.count(method) == 1 else f"{method} (lr {_lr(lr)})"): runs
            for (method, lr), runs in by_run.items()
        }
    for label, runs in groups.items():
        for res in runs:
            if not isinstance(res, Result):
                raise TypeError(
                    f"results[{label!r}] must hold stochmix Results, got {type(res).__name__}"
                )
    return Comparison([summary_row(label, list(runs)) for label, runs in groups.items()])

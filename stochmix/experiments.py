"""Run an :class:`~stochmix.config.Experiment` and write what it found into a run folder:

* ``config.resolved.toml`` — the configuration with every default and seed written out
  (``stochmix run`` of it repeats the run);
* ``participation.csv`` — each client's participation probability p_i;
* ``metrics.csv`` — the per-round metrics of every run (:meth:`Result.csv_rows`), the same
  bytes every time the same configuration runs;
* ``timing.csv`` — the seconds since each run started, after each round;
* ``error.png`` — the error curves (geometric mean over seeds and the min-max band),
  against the round or, with ``x``, the running sum of a cost or the simulated time.

Learning-rate grids are run in full and each method is reported at its best step size;
the summary table is :mod:`stochmix.reporting`'s. Two flags warn about what a grid hides:
``lr_at_edge`` (the best step is the grid's smallest or largest: the best step may lie
outside it) and ``diverging`` (:func:`diverging`: a run whose error blew up, or grows far
above its start without reaching the divergence threshold).
"""

from __future__ import annotations

import csv
import io
import itertools
import os
import re
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ._version import __version__
from .config import Experiment, dumps
from .config.output import AXIS_LABELS
from .engine import Result, run
from .engine.runner.checkpoint import check_folder_writable
from .engine.runner.result import COLUMNS
from .reporting import summary_row

__all__ = [
    "DIVERGING_FACTOR",
    "DIVERGING_TAIL",
    "ERROR_METRICS",
    "MethodOutcome",
    "TIMING_COLUMNS",
    "choose_lr",
    "diverging",
    "lr_at_edge",
    "output_dir",
    "plot",
    "run_experiment",
    "summary_rows",
    "write_config",
    "write_metrics",
    "write_participation",
    "write_timing",
]

#: The columns of ``timing.csv``.
TIMING_COLUMNS = ("method", "lr", "seed", "round", "wall_time")

#: The error curves the plot and the choice of the best step size look at, in order of
#: preference (the first one a run recorded; ``objective``, the loss itself, for problems
#: whose f_star is unknown).
ERROR_METRICS = ("relative_error", "objective_gap", "objective", "gradient_norm", "consensus")


#: :func:`diverging`: a run whose last error is above this many times its first.
DIVERGING_FACTOR = 1e3

#: :func:`diverging`: the last part of a run (this fraction of its rounds) over which the
#: error must still grow.
DIVERGING_TAIL = 0.25


@dataclass
class MethodOutcome:
    """All runs of one method: results by lr (each a list over seeds), the best lr, and
    why it won (empty where the grid has one step)."""

    label: str
    runs: dict
    best_lr: float
    why: str = ""

    @property
    def best(self) -> list[Result]:
        """The runs (one per seed) at the best step size."""
        return self.runs[self.best_lr]

    @property
    def lr_at_edge(self) -> bool | None:
        """Whether the best step is the smallest or the largest of a grid of two steps or
        more (:func:`lr_at_edge`); None for a single step."""
        return lr_at_edge(list(self.runs), self.best_lr)


def error_metric(res: Result) -> str | None:
    """The first of :data:`ERROR_METRICS` that ``res`` recorded (None if none)."""
    for metric in ERROR_METRICS:
        field = "distance" if metric == "relative_error" else metric
        if getattr(res, field) is not None:
            return metric
    return None


def lr_at_edge(grid, best: float) -> bool | None:
    """Whether ``best`` is the smallest or the largest step of ``grid``: the best step
    may then lie outside the grid, which should be widened on that side.

    Args:
        grid: the steps tried.
        best: the step chosen.

    Returns:
        True or False for a grid of two distinct steps or more; None for a single step
        (no grid: nothing was chosen).
    """
    steps = sorted(set(float(lr) for lr in grid))
    if len(steps) < 2:
        return None
    return float(best) in (steps[0], steps[-1])


def diverging(res: Result, metric: str | None = None) -> bool:
    """Whether a run diverges: it stopped at NaN or Inf or past the divergence threshold
    (``res.diverged``), or its error metric, over the rounds that have a value, ends above
    :data:`DIVERGING_FACTOR` (1e3) times its first value and still grows over the last
    :data:`DIVERGING_TAIL` (a quarter) of the run: its last value is above its value at the
    first evaluated round at or after ``(1 - DIVERGING_TAIL) x rounds``. Such a run (say
    3e25 after 3,000 rounds, below the threshold of 1e50) never reaches a tolerance, and
    this says why.

    Args:
        res: the run.
        metric: the error curve (default: the first of :data:`ERROR_METRICS` recorded).

    Returns:
        True where the run diverges; False otherwise (a run without an error curve, or
        with fewer than 2 evaluated rounds, included).
    """
    if res.diverged:
        return True
    metric = error_metric(res) if metric is None else metric
    if metric is None:
        return False
    rounds, values = res.evaluated(metric)
    if values.size < 2 or not values[0] > 0:
        return False
    last = float(values[-1])
    if not last > DIVERGING_FACTOR * float(values[0]):
        return False
    tail = np.flatnonzero(rounds >= (1 - DIVERGING_TAIL) * rounds[-1])
    start = int(tail[0]) if tail.size else 0
    return start < values.size - 1 and last > float(values[start])


def _score(results: list[Result]) -> float:
    """Lower is better: mean over seeds of the last value of the error metric (relative
    error, else objective gap, else objective ...); a diverged run scores infinity, a run
    without a value NaN."""
    values = []
    for res in results:
        if res.diverged:
            return float("inf")
        metric = error_metric(res)
        last = res.last(metric) if metric is not None else None
        values.append(float("nan") if last is None else last)
    return float(np.mean(values))


def _rounds_to(results: list[Result], tolerance: float) -> float:
    """The median over seeds of the rounds each run takes to ``tolerance`` (on its error
    metric); infinity when a seed never gets there or diverges."""
    rounds = []
    for res in results:
        metric = error_metric(res)
        hit = None if res.diverged or metric is None else res.rounds_to(tolerance, metric)
        if hit is None:
            return float("inf")
        rounds.append(hit)
    return float(np.median(rounds))


def choose_lr(runs: dict, best_lr_by: str, tolerance: float) -> tuple[float, str]:
    """The best step of a grid and why: ``runs`` maps each lr to its runs over seeds.

    ``best_lr_by="rounds_to_tolerance"`` ranks the steps by the median rounds to
    ``tolerance`` (steps that some seed never brings there last), then by final error, then
    by the smaller step; ``"final_error"`` by final error, then the smaller step. A final
    error compares round-off once a method converges exactly, hence the default.
    """
    finals = {lr: _score(results) for lr, results in runs.items()}

    def final(lr):
        return np.nan_to_num(finals[lr], nan=np.inf)

    if best_lr_by == "final_error":
        best = min(runs, key=lambda lr: (final(lr), lr))
        grid = ", ".join(f"{lr:.3g}: {finals[lr]:.2e}" for lr in runs)
        return best, f"smallest final error ({grid}){_edge_note(runs, best)}"
    reach = {lr: _rounds_to(results, tolerance) for lr, results in runs.items()}
    best = min(runs, key=lambda lr: (reach[lr], final(lr), lr))

    def shown(lr):
        if reach[lr] != np.inf:
            return f"{lr:.3g}: {reach[lr]:g} rounds"
        if any(res.diverged for res in runs[lr]):
            return f"{lr:.3g}: never (diverged)"
        if any(diverging(res) for res in runs[lr]):
            return f"{lr:.3g}: never (diverging)"
        return f"{lr:.3g}: never"

    grid = ", ".join(shown(lr) for lr in runs)
    edge = _edge_note(runs, best)
    if reach[best] == np.inf:
        return best, (
            f"no step reaches {tolerance:g} ({grid}); smallest final error, "
            f"{finals[best]:.2e}{edge}"
        )
    return best, f"fewest rounds to {tolerance:g} ({grid}){edge}"


def _edge_note(runs: dict, best: float) -> str:
    """``"; lr at the edge of the grid ..."`` where the best step is its smallest or
    largest, else empty."""
    if not lr_at_edge(list(runs), best):
        return ""
    side = "smallest" if float(best) == min(map(float, runs)) else "largest"
    return f"; lr at the edge of the grid (the {side} step): widen the grid on that side"


def run_experiment(exp: Experiment, progress="auto", log=print) -> list[MethodOutcome]:
    """Every method at every lr of its grid and every seed; ``log`` gets one line per grid."""
    outcomes = []
    options = dict(exp.run_options)
    for spec in exp.methods:
        runs: dict[float, list[Result]] = {}
        for lr in spec.lrs:
            runs[lr] = []
            for seed in exp.seeds:
                method = spec.build(lr)
                method.name = spec.label
                res = run(
                    method,
                    exp.problem,
                    exp.participation,
                    exp.rounds,
                    seed=seed,
                    backend=exp.backend,
                    progress=progress,
                    on_divergence="warn",
                    **options,
                )
                res.config.setdefault("lr", lr)  # run() records the method's lr
                runs[lr].append(res)
        choice = exp.lr_choice
        best, why = choose_lr(runs, choice["best_lr_by"], choice["tolerance"])
        if len(spec.lrs) == 1:
            why = ""
        elif log is not None:
            log(f"{spec.label}: best lr {best:.3g}, by {why}")
        outcomes.append(MethodOutcome(spec.label, runs, best, why))
    return outcomes


def summary_rows(outcomes: list[MethodOutcome]) -> list[dict]:
    """One row per method at its best lr (:func:`stochmix.reporting.summary_row`), with
    ``lr_at_edge`` (:attr:`MethodOutcome.lr_at_edge`; None for a single step) and
    ``diverging`` (some seed's run at the best lr :func:`diverging`)."""
    rows = []
    for out in outcomes:
        row = summary_row(out.label, out.best, out.best_lr)
        row["lr_at_edge"] = out.lr_at_edge
        row["diverging"] = any(diverging(res) for res in out.best)
        rows.append(row)
    return rows


def _all_runs(outcomes: list[MethodOutcome]):
    """Every run, method by method, step size by step size, seed by seed."""
    for out in outcomes:
        for results in out.runs.values():
            yield from results


def _write(path: Path, text: str | bytes) -> Path:
    """Write ``text`` to ``path``, refusing to follow a link at ``path`` (a link planted in
    the run folder cannot redirect the write to another file)."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0)
    try:
        handle = os.open(path, flags, 0o644)
    except OSError as error:
        if os.path.islink(path):
            raise OSError(f"{path} is a link; stochmix does not write through links") from None
        raise error
    with os.fdopen(handle, "wb") as out:
        out.write(data)
    return Path(path)


def write_metrics(outcomes: list[MethodOutcome], path) -> Path:
    """``metrics.csv``: :meth:`Result.csv_rows` of every run, one header. No timing in
    it, so the same configuration gives the same bytes. The ``objective`` column
    (:data:`~stochmix.engine.runner.result.OPTIONAL_COLUMNS`) is there when some run recorded it
    (f_star unknown), for every run."""
    runs = list(_all_runs(outcomes))
    objective = any(res.objective is not None for res in runs)
    parts = [res.csv_rows(header=i == 0, objective=objective) for i, res in enumerate(runs)]
    return _write(Path(path), "".join(parts) or ",".join(COLUMNS) + "\n")


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, (float, np.floating)):
        return "" if np.isnan(value) else repr(float(value))
    return str(value)


def write_timing(outcomes: list[MethodOutcome], path) -> Path:
    """``timing.csv``: method, lr, seed, round and the seconds since the run started."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(TIMING_COLUMNS)
    for res in _all_runs(outcomes):
        columns = res.columns(wall_time=True)
        cells = (map(_cell, columns[name]) for name in TIMING_COLUMNS)
        writer.writerows(zip(*cells, strict=True))
    return _write(Path(path), buffer.getvalue())


def write_config(exp: Experiment, path) -> Path:
    """``config.resolved.toml``: :meth:`Experiment.resolved` as TOML."""
    note = (
        f"stochmix {__version__}: the configuration of this run with every default and seed\n"
        "written out; `stochmix run` of this file repeats the run (same metrics.csv)."
    )
    return _write(Path(path), dumps(exp.resolved(), comment=note))


def write_participation(process, path) -> Path:
    """``participation.csv``: client, probability (the process's p_i); where the process
    has no closed-form p_i, a comment line says so above the bare header."""
    p = process.probabilities
    if p is None:
        text = (
            f"# {process!r} has no closed-form participation probabilities p_i "
            "(process.estimate_probabilities(rounds, seed) estimates them)\n"
            "client,probability\n"
        )
    else:
        p = np.asarray(p, dtype=float)
        rows = map("{},{!r}".format, range(p.size), p.tolist())
        text = "client,probability\n" + "\n".join(rows) + "\n"
    return _write(Path(path), text)


def _geometric_band(curves: list[np.ndarray]):
    """``(rounds, mean, low, high)`` over the rounds where some curve has a finite value:
    the geometric mean over the curves that have one there, and their min and max."""
    length = max(c.size for c in curves)
    stack = np.full((len(curves), length), np.nan)
    for i, curve in enumerate(curves):  # one row per seed
        stack[i, : curve.size] = curve
    stack[~np.isfinite(stack)] = np.nan
    rounds = np.flatnonzero(np.any(~np.isnan(stack), axis=0))
    values = np.maximum(stack[:, rounds], 1e-300)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.exp(np.nanmean(np.log(values), axis=0))
    return rounds, mean, np.nanmin(values, axis=0), np.nanmax(values, axis=0)


def _along(runs: list[Result], x: str, rounds: np.ndarray) -> np.ndarray:
    """The x values of ``rounds`` for the runs of one method (one per seed): the round,
    or the mean over seeds of the running sum of a cost (``gradients``, ``messages``,
    ``floats``) or of the simulated ``time`` at each round (:meth:`Result.axis`)."""
    if x == "round":
        return rounds.astype(float)
    length = max(res.rounds + 1 for res in runs)
    stack = np.full((len(runs), length), np.nan)
    for i, res in enumerate(runs):
        stack[i, : res.rounds + 1] = res.axis(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(stack, axis=0)[rounds]


def plot(outcomes: list[MethodOutcome], path, title: str = "", x: str = "round") -> Path:
    """Error on a log scale against ``x``, each method at its best lr: the geometric mean
    over seeds and the min-max band, over the rounds that have a value (a metric evaluated
    on a schedule gets markers).

    Args:
        outcomes: what :func:`run_experiment` returned.
        path: the PNG file.
        title: the figure's title.
        x: the x axis, one of :data:`~stochmix.config.output.PLOT_AXES`: ``"round"``, the
            running sum of ``"gradients"``, ``"messages"`` or ``"floats"`` (the columns
            of ``metrics.csv``), or the simulated ``"time"``; for several seeds, the mean
            over seeds of that value at each round.

    Returns:
        ``path``.

    Raises:
        ImportError: matplotlib is not installed.
        ValueError: ``x`` is not an axis, a run did not record it (``"time"`` without a
            clock), or no run recorded an error metric.
    """
    from .config.output import PLOT_AXES

    if x not in PLOT_AXES:
        raise ValueError(f"x must be one of {list(PLOT_AXES)}, got {x!r}")
    for out in outcomes:  # a missing axis is named before any figure
        for res in out.best:
            res.axis(x)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    plotted = None
    for out in outcomes:
        metric = next((m for m in map(error_metric, out.best) if m is not None), None)
        if metric is None:
            continue
        plotted = plotted or metric
        curves = [np.asarray(res.error(metric), dtype=float) for res in out.best]
        rounds, mean, low, high = _geometric_band(curves)
        along = _along(out.best, x, rounds)
        style = {"marker": "."} if rounds.size < max(c.size for c in curves) else {}
        label = f"{out.label} (lr {out.best_lr:.3g})"
        (line,) = ax.semilogy(along, mean, label=label, **style)
        if len(curves) > 1:
            ax.fill_between(along, low, high, color=line.get_color(), alpha=0.2)
    if plotted is None:
        plt.close(fig)
        raise ValueError("nothing to plot: no run recorded an error metric")
    ax.set_xlabel(AXIS_LABELS[x])
    ax.set_ylabel(plotted.replace("_", " "))
    if title:
        ax.set_title(title)
    ax.legend()
    ax.grid(True, which="major", alpha=0.3)
    fig.tight_layout()
    image = io.BytesIO()
    fig.savefig(image, format="png", dpi=120)
    plt.close(fig)
    return _write(Path(path), image.getvalue())


def _folder_name(name: str) -> str:
    """``name`` with anything but letters, digits, '.', '_' and '-' replaced by '_'."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", name).strip(".") or "run"


def output_dir(name: str, out=None, *, root="runs", stamp: str | None = None) -> Path:
    """The run folder, created: ``out`` if given (it may exist), else a new
    ``<root>/<name>-<YYYYmmdd-HHMMSS>-<n>`` with n the first number free, so that runs
    started in the same second get folders of their own (``mkdir`` without
    ``exist_ok`` is the arbiter)."""
    if out is not None:
        path = Path(out)
        if path.exists() and not path.is_dir():
            raise ValueError(f"--out {str(path)!r} is a file, not a folder")
        check_folder_writable(path, f"--out {str(path)!r}")
        return path
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    stem = f"{_folder_name(name)}-{stamp or time.strftime('%Y%m%d-%H%M%S')}"
    for n in itertools.count(1):
        path = root / f"{stem}-{n}"
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise AssertionError("unreachable")  # pragma: no cover

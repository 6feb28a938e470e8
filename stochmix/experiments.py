"""Run an :class:`~stochmix.config.Experiment` and write what it found into a run folder:

* ``config.resolved.toml`` — the configuration with every default and seed written out
  (``stochmix run`` of it repeats the run);
* ``participation.csv`` — each client's participation probability p_i;
* ``metrics.csv`` — the per-round metrics of every run (:meth:`Result.csv_rows`), the same
  bytes every time the same configuration runs;
* ``timing.csv`` — the seconds since each run started, after each round;
* ``error.png`` — the error curves (geometric mean over seeds and the min-max band).

Learning-rate grids are run in full and each method is reported at its best step size;
the summary table is :mod:`stochmix.reporting`'s.
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
from .engine import Result, run
from .engine.runner.checkpoint import check_folder_writable
from .engine.runner.result import COLUMNS
from .reporting import summary_row

__all__ = [
    "ERROR_METRICS",
    "MethodOutcome",
    "TIMING_COLUMNS",
    "choose_lr",
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


def error_metric(res: Result) -> str | None:
    """The first of :data:`ERROR_METRICS` that ``res`` recorded (None if none)."""
    for metric in ERROR_METRICS:
        field = "distance" if metric == "relative_error" else metric
        if getattr(res, field) is not None:
            return metric
    return None


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
        return best, f"smallest final error ({grid})"
    reach = {lr: _rounds_to(results, tolerance) for lr, results in runs.items()}
    best = min(runs, key=lambda lr: (reach[lr], final(lr), lr))

    def shown(lr):
        return f"{lr:.3g}: " + ("never" if reach[lr] == np.inf else f"{reach[lr]:g} rounds")

    grid = ", ".join(shown(lr) for lr in runs)
    if reach[best] == np.inf:
        return best, (
            f"no step reaches {tolerance:g} ({grid}); smallest final error, {finals[best]:.2e}"
        )
    return best, f"fewest rounds to {tolerance:g} ({grid})"


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
    """One row per method at its best lr (:func:`stochmix.reporting.summary_row`)."""
    return [summary_row(out.label, out.best, out.best_lr) for out in outcomes]


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


def plot(outcomes: list[MethodOutcome], path, title: str = "") -> Path:
    """Error against rounds, log scale, each method at its best lr: the geometric mean over
    seeds and the min-max band, over the rounds that have a value (a metric evaluated on
    a schedule gets markers).

    Raises:
        ImportError: matplotlib is not installed.
        ValueError: no run recorded an error metric.
    """
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
        style = {"marker": "."} if rounds.size < max(c.size for c in curves) else {}
        label = f"{out.label} (lr {out.best_lr:.3g})"
        (line,) = ax.semilogy(rounds, mean, label=label, **style)
        if len(curves) > 1:
            ax.fill_between(rounds, low, high, color=line.get_color(), alpha=0.2)
    if plotted is None:
        plt.close(fig)
        raise ValueError("nothing to plot: no run recorded an error metric")
    ax.set_xlabel("round")
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

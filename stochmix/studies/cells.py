"""The cells of a study: one combination of swept values and one seed, each a fully
resolved configuration that ``stochmix run`` runs alone, and how one cell runs.

A cell's folder holds what a run folder of ``stochmix run`` holds (without the plot):
``config.resolved.toml``, ``participation.csv``, ``metrics.csv`` and ``timing.csv``, then
``summary.json`` (the rows it adds to ``study.csv``, its wall times, the hash of the cell's
resolved configuration and the SHA-256 of each of those four files) and, written last
and atomically, the marker ``done`` that holds the same hash. A study run again skips a
cell only where its files check out (:func:`check_done`): the marker and ``summary.json``
hold the cell's hash, ``summary.json`` has the expected keys and types, and the four files
are the ones it was written with; a cell whose files do not is run again, with a warning
naming it and why. The files are written and read without following links, in folders
that are this user's own (:mod:`stochmix.studies.files`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .. import experiments
from .._toml import tomllib
from ..config import ConfigError, dumps, parse
from .files import file_digest, private_folder, read_regular, remove_scratch, write_atomic
from .keys import check_keys, set_value
from .spec import Sweep, SweepError

__all__ = [
    "CELL_FILES",
    "MARKER",
    "MAX_CELLS",
    "SUMMARY_FIELDS",
    "Cell",
    "check_done",
    "check_summary",
    "is_done",
    "make_cells",
    "read_summary",
    "run_cell",
    "shown_value",
    "value_key",
]

#: The marker file of a finished cell (it holds the hash of the cell's configuration).
MARKER = "done"

#: The most cells a study may have: every cell's configuration is checked before any runs
#: (about 0.6 ms each measured on the test machine: about a minute at this limit, more on
#: larger configurations) and each gets a folder;
#: a larger sweep is refused at once, before any is checked (split it into studies).
MAX_CELLS = 100_000

#: The files of a cell's run whose SHA-256 its ``summary.json`` keeps (under ``files``).
CELL_FILES = ("config.resolved.toml", "participation.csv", "metrics.csv", "timing.csv")

#: The per-run summary of each row of ``study.csv``, after the swept values, the seed and
#: the method: the step size (the best of a grid) and whether it is at the grid's edge
#: (``lr_at_edge``: the smallest or largest step of a grid of two or more, empty for a
#: single step; :func:`stochmix.experiments.lr_at_edge`), the final errors, the linear rate,
#: the round at which a run diverged (empty where none did) and whether it diverges
#: (``diverging``: it diverged, or its error ends above 1e3 times its start and still
#: grows over the last quarter of the run; :func:`stochmix.experiments.diverging`); then
#: what the run took to reach 1e-8 (on the relative error; empty where there is none) and
#: to the configuration's ``tolerance`` (on the run's error metric, as the step-size
#: choice counts it): the rounds, the gradient evaluations, messages and floats sent (the
#: sums of those ``metrics.csv`` columns over rounds 0 to that round, both included) and,
#: with simulated time (a ``[clock]``, a clock process or an asynchronous method), the
#: simulated seconds at that round; each empty where the run never got there; last the
#: simulated seconds the whole run took (``virtual_time``, empty without simulated time).
SUMMARY_FIELDS = (
    "lr",
    "lr_at_edge",
    "final_relative_error",
    "final_objective_gap",
    "final_objective",
    "rate",
    "diverged_at",
    "diverging",
    "rounds_to_1e-8",
    "gradients_to_1e-8",
    "messages_to_1e-8",
    "floats_to_1e-8",
    "sample_gradients_to_1e-8",
    "virtual_time_to_1e-8",
    "rounds_to_tolerance",
    "gradients_to_tolerance",
    "messages_to_tolerance",
    "floats_to_tolerance",
    "sample_gradients_to_tolerance",
    "virtual_time_to_tolerance",
    "virtual_time",
)

#: The cost columns of ``metrics.csv`` whose sums to a target ``study.csv`` reports.
_COSTS = ("gradients", "messages", "floats", "sample_gradients")

_UNSAFE = re.compile(r"[^A-Za-z0-9._=+-]")


@dataclass(frozen=True)
class Cell:
    """One cell: its position in the study, its swept values and seed, and its resolved
    configuration as TOML text (``digest`` is that text's SHA-256).

    Attributes:
        index: the position in the study's order (the first swept key slowest, the seed
            fastest).
        values: swept key -> value.
        seed: the seed of the cell's one run per method.
        text: the resolved configuration (TOML, with ``seeds = [seed]``).
        digest: SHA-256 of ``text``: the cell's identity for resuming.
        name: the cell's folder name under ``cells/``.
    """

    index: int
    values: dict[str, Any]
    seed: int
    text: str
    digest: str
    name: str

    def describe(self) -> str:
        """The cell as ``key = value, ..., seed = s`` (for messages)."""
        parts = [f"{key} = {value!r}" for key, value in self.values.items()]
        return ", ".join([*parts, f"seed = {self.seed}"])


def _has_table(value: Any) -> bool:
    if isinstance(value, dict):
        return True
    return isinstance(value, list) and any(_has_table(v) for v in value)


def shown_value(value: Any) -> str:
    """A swept value as the study's folder names, plot labels and ticks show it: a table
    as its ``label`` or ``kind`` followed by its other keys, ``random_edge(rate=2.0)``
    (``{deadline=2.0}`` without either), a list of tables as ``[FedAvg(...), ...]``,
    another list as compact JSON, anything else as ``str``.

    Args:
        value: a swept value.

    Returns:
        Its text.
    """
    if isinstance(value, dict):
        head = value.get("label", value.get("kind"))
        items = ",".join(
            f"{k}={shown_value(v)}" for k, v in value.items() if k not in ("kind", "label")
        )
        if isinstance(head, str):
            return f"{head}({items})" if items else head
        return "{" + items + "}"
    if isinstance(value, list) and _has_table(value):
        return "[" + ",".join(shown_value(v) for v in value) + "]"
    if isinstance(value, list):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def value_key(value: Any) -> str:
    """A swept value as a hashable key (its JSON text, keys in order): two values share
    it only where they are equal."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _part(key: str, value: Any) -> str:
    """``key=value`` with unsafe characters as ``_`` (for a table, runs of them as one)."""
    if not _has_table(value):
        return _UNSAFE.sub("_", f"{key}={shown_value(value)}")
    shown = re.sub("_+", "_", _UNSAFE.sub("_", shown_value(value))).strip("_")
    return _UNSAFE.sub("_", f"{key}=") + shown


def _folder(values: dict[str, Any], seed: int, digest: str) -> str:
    """A readable folder name, ``key=value__...__seed=s`` (characters other than letters,
    digits and ``._=+-`` as ``_``), cut to 120 characters with the hash's start added."""
    parts = [_part(key, value) for key, value in values.items()] + [f"seed={seed}"]
    name = "__".join(parts).lstrip(".")
    if len(name) > 120:
        name = f"{name[:100]}__{digest[:12]}"
    return name


def make_cells(raw: dict, sweep: Sweep, default_name: str = "study") -> list[Cell]:
    """Every cell of a study, each configuration validated before any cell runs.

    Args:
        raw: the configuration dict without its ``[sweep]`` table.
        sweep: the swept keys and values.
        default_name: the study's name where ``raw`` has none.

    Returns:
        The cells, in the study's order.

    Raises:
        SweepError: an unknown or fixed key, more than :data:`MAX_CELLS` cells (counted
            before any is checked), or a cell whose configuration is refused (the message
            names the cell's swept values and the configuration's error).
    """
    try:
        base = parse(raw, default_name=default_name)
    except ConfigError as error:
        raise SweepError(f"the study's configuration: {error}") from None
    check_keys(sweep.values, base, raw)
    lengths = [len(values) for values in sweep.values.values()]
    combinations = (lengths[0] if lengths else 1) if sweep.mode == "zip" else math.prod(lengths)
    count = combinations * len(base.seeds)
    if count > MAX_CELLS:
        raise SweepError(
            f"the sweep has {count} cells ({combinations} combinations x {len(base.seeds)} "
            f"seeds), more than MAX_CELLS = {MAX_CELLS}: split it into smaller studies"
        )
    cells: list[Cell] = []
    names: set[str] = set()
    for values in sweep.combinations():
        config = copy.deepcopy(raw)
        config.setdefault("name", base.name)
        for key, value in values.items():
            set_value(config, key, value)
        shown = ", ".join(f"{key} = {value!r}" for key, value in values.items())
        try:
            exp = parse(config, default_name=base.name)
        except ConfigError as error:
            raise SweepError(f"sweep cell {shown}: {error}") from None
        resolved = exp.resolved()
        for seed in exp.seeds:
            resolved["seeds"] = [seed]
            text = dumps(resolved)
            digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
            name = _folder(values, seed, digest)
            if name in names:
                name = f"{name}__{digest[:12]}"
            names.add(name)
            cells.append(Cell(len(cells), dict(values), seed, text, digest, name))
    return cells


def is_done(cell: Cell, folder: Path) -> bool:
    """Whether ``folder`` holds a finished run of ``cell`` whose files check out
    (:func:`check_done`).

    Args:
        cell: the cell.
        folder: the cell's folder.

    Returns:
        True where the cell need not run again.
    """
    return check_done(cell, folder)[0] is not None


def check_done(cell: Cell, folder: Path) -> tuple[dict | None, str | None]:
    """What a finished cell's folder holds, checked: its marker and its ``summary.json``
    hold ``cell.digest``, the summary passes :func:`check_summary`, and the files of
    :data:`CELL_FILES` have the SHA-256 it keeps; no file is read through a link.

    Args:
        cell: the cell.
        folder: the cell's folder.

    Returns:
        ``(summary, None)`` where the cell need not run again; ``(None, None)`` where it
        never finished (no marker); ``(None, why)`` where its files do not check out.
    """
    try:
        marker = read_regular(folder / MARKER)
    except FileNotFoundError:
        return None, None
    except OSError as error:
        return None, f"its marker {MARKER!r} cannot be read ({error.strerror or error})"
    if marker.decode("utf-8", "replace").strip() != cell.digest:
        return None, f"its marker {MARKER!r} holds another configuration's hash"
    try:
        summary = json.loads(read_regular(folder / "summary.json").decode("utf-8"))
    except OSError as error:
        return None, f"its summary.json cannot be read ({error.strerror or error})"
    except (UnicodeDecodeError, ValueError) as error:
        return None, f"its summary.json is not JSON ({error})"
    why = check_summary(summary, cell)
    if why is not None:
        return None, f"its summary.json {why}"
    for name in CELL_FILES:
        try:
            same = file_digest(folder / name) == summary["files"][name]
        except OSError as error:
            return None, f"its {name} cannot be read ({error.strerror or error})"
        if not same:
            return None, f"its {name} is not the file its summary.json was written with"
    return summary, None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float))  # bool is an int


def check_summary(summary: Any, cell: Cell) -> str | None:
    """Why ``summary`` (a ``summary.json`` read back) is not one of ``cell``'s, or None:
    it must be an object with ``digest`` equal to ``cell.digest``; ``rows``, a list of
    objects with exactly the keys ``method`` (a string) and
    :data:`SUMMARY_FIELDS` (each a number, a boolean or null); ``timing``, a list of
    objects with exactly ``method`` (a string) and ``seconds`` (a number); ``seconds``, a
    number; ``files``, the SHA-256 of each of :data:`CELL_FILES`.

    Args:
        summary: the parsed JSON.
        cell: the cell it should belong to.

    Returns:
        The reason (a phrase), or None where it checks out.
    """
    if not isinstance(summary, dict):
        return f"is not an object, got {type(summary).__name__}"
    if "digest" not in summary:
        return "does not name a configuration hash (written by an older stochmix?)"
    if summary["digest"] != cell.digest:
        return "belongs to another configuration (its hash is not the cell's)"
    if set(summary) != {"digest", "rows", "timing", "seconds", "files"}:
        return f"has the keys {sorted(summary)}"
    row_keys = {"method", *SUMMARY_FIELDS}
    rows, timing, files = summary["rows"], summary["timing"], summary["files"]
    if not isinstance(rows, list) or not rows:
        return "has no rows"
    for row in rows:
        if not isinstance(row, dict) or set(row) != row_keys:
            return f"has a row that is not {sorted(row_keys)}: {row!r}"
        bad = [k for k in SUMMARY_FIELDS if row[k] is not None and not _is_number(row[k])]
        if not isinstance(row["method"], str) or bad:
            return f"has a row with a value of the wrong type: {row!r}"
    if not isinstance(timing, list):
        return "has timing that is not a list"
    for entry in timing:
        if not isinstance(entry, dict) or set(entry) != {"method", "seconds"}:
            return f"has a timing entry that is not {{method, seconds}}: {entry!r}"
        if not isinstance(entry["method"], str) or not _is_number(entry["seconds"]):
            return f"has a timing entry with a value of the wrong type: {entry!r}"
    if not _is_number(summary["seconds"]):
        return f"has seconds = {summary['seconds']!r}"
    if not isinstance(files, dict) or set(files) != set(CELL_FILES):
        return f"does not list the files {list(CELL_FILES)}"
    if not all(isinstance(v, str) for v in files.values()):
        return "has a file hash that is not a string"
    return None


def _number(value: Any) -> Any:
    """A summary value as JSON keeps it (an int, a float or None)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    return float(value)


def _execute(text: str, folder: Path) -> dict:
    exp = parse(tomllib.loads(text))
    private_folder(folder.parent, "study cells folder")
    private_folder(folder, "cell folder")
    (folder / MARKER).unlink(missing_ok=True)
    remove_scratch(folder, ("summary.json", MARKER))
    experiments.write_config(exp, folder / "config.resolved.toml")
    experiments.write_participation(exp.participation, folder / "participation.csv")
    start = time.perf_counter()
    outcomes = experiments.run_experiment(exp, progress=False, log=None)
    seconds = time.perf_counter() - start
    experiments.write_metrics(outcomes, folder / "metrics.csv")
    experiments.write_timing(outcomes, folder / "timing.csv")
    tolerance = float(getattr(exp, "lr_choice", {}).get("tolerance", 1e-8))
    rows, timing = [], []
    for outcome in outcomes:
        for res in outcome.best:
            summary = res.summary()
            metric = experiments.error_metric(res)
            to_8 = res.rounds_to(1e-8) if res.distance is not None else None
            to_tol = None
            if metric is not None and not res.diverged:
                to_tol = res.rounds_to(tolerance, metric)
            summary.update(_reached(res, to_8, "1e-8"))
            summary.update(_reached(res, to_tol, "tolerance"))
            summary["lr_at_edge"] = outcome.lr_at_edge
            summary["diverging"] = experiments.diverging(res, metric)
            row: dict[str, Any] = {"method": outcome.label, "lr": outcome.best_lr}
            row.update({key: _number(summary.get(key)) for key in SUMMARY_FIELDS[1:]})
            rows.append(row)
            timing.append({"method": outcome.label, "seconds": float(res.wall_time[-1])})
    return {"rows": rows, "timing": timing, "seconds": seconds}


def _reached(res, hit: int | None, target: str) -> dict[str, Any]:
    """What ``res`` took to reach ``target`` at round ``hit`` (None: never): the rounds,
    the sums of the cost columns over rounds 0..hit and the simulated time at ``hit``."""
    out: dict[str, Any] = {f"rounds_to_{target}": hit}
    for cost in _COSTS:
        values = getattr(res, cost)
        total = None if hit is None or values is None else int(np.sum(values[: hit + 1]))
        out[f"{cost}_to_{target}"] = total
    time = getattr(res, "time", None)
    out[f"virtual_time_to_{target}"] = None if hit is None or time is None else float(time[hit])
    return out


def run_cell(text: str, folder: str, digest: str) -> dict:
    """Run one cell in ``folder`` (a function of plain values, for other processes).

    Args:
        text: the cell's resolved configuration (TOML).
        folder: the cell's folder (created).
        digest: the cell's hash, written to the marker last.

    Returns:
        ``{"digest": digest, "rows": [...], "timing": [...], "seconds": s, "files":
        {name: sha256}}`` (what ``summary.json`` holds), or ``{"error": message}`` where
        the cell failed (its folder keeps what was written, without a marker), among them
        a cell folder, or its ``cells/`` folder, that is not this user's own
        (:func:`stochmix.studies.files.private_folder`).
    """
    path = Path(folder)
    try:
        outcome = _execute(text, path)
        files = {name: file_digest(path / name) for name in CELL_FILES}
        outcome = {"digest": digest, **outcome, "files": files}
        write_atomic(path / "summary.json", json.dumps(outcome, indent=1) + "\n")
        write_atomic(path / MARKER, digest + "\n")
    except Exception as error:  # noqa: BLE001 - a failed cell is reported, the others go on
        last = traceback.format_exception_only(type(error), error)[-1].strip()
        return {"error": last}
    return outcome


def read_summary(folder: Path) -> dict:
    """The ``summary.json`` of a finished cell, unchecked (:func:`check_done` checks it).

    Raises:
        ValueError: it cannot be read or is not JSON (the message names the file).
    """
    path = Path(folder) / "summary.json"
    try:
        return json.loads(read_regular(path).decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ValueError(f"{str(path)!r} cannot be read as JSON: {error}") from None

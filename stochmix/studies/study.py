"""A study: a configuration, a sweep over some of its keys, and the cells it runs.

:class:`Study` reads the configuration (a path, or a dict as read from TOML) with its
``[sweep]`` table (or ``sweep=`` in Python), checks every cell before any runs, and
:meth:`Study.run` runs the cells in a study folder::

    <folder>/study.toml         the study: configuration and sweep (ranges as lists)
    <folder>/study.csv          a row per cell, method and seed (same bytes every time)
    <folder>/timing.csv         the wall times of the same rows
    <folder>/failures.csv       cell, error: the cells that failed (only where some did)
    <folder>/cells/<cell>/...   each cell's run folder (config.resolved.toml, metrics.csv ...)
"""

from __future__ import annotations

import copy
import os
import stat
import warnings
from pathlib import Path
from typing import Any

from .. import experiments
from .._toml import tomllib
from ..config import ConfigError, dumps, parse
from ..config.output import check_axis, output_table
from ..config.settings import _slug
from .cells import Cell, check_done, make_cells
from .execution import CONNECT_TIMEOUT, check_options, connect, run_cells
from .files import private_folder, read_regular
from .plotting import plot_curves, plot_summary
from .spec import Sweep, SweepError, parse_sweep
from .table import STUDY_TIMING_COLUMNS, columns, header, study_rows, timing_rows, write_csv

__all__ = [
    "PARALLEL_WORK",
    "Study",
    "read_config",
    "sweep",
]

#: Node-rounds (rounds x clients x runs, over the cells) from which the command runs a
#: study on every core by default: about ten seconds of work, against about a second to
#: start a worker process.
PARALLEL_WORK = 2_000_000


def _cell_value(text: str):
    """A value of a ``metrics.csv`` cell: an int, a float (NaN where empty) or the text."""
    if text == "":
        return float("nan")
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def read_config(path) -> tuple[dict, str]:
    """Read a TOML configuration file as a dict (its ``[sweep]`` table included).

    Args:
        path: the file.

    Returns:
        The dict, and the name the file gives a configuration without ``name``.

    Raises:
        ConfigError: a missing file or text that is not TOML.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None
    return raw, _slug(path.stem)


class Study:
    """A configuration swept over some of its keys, times its seeds.

    Args:
        config: a TOML file's path, or a configuration dict (as ``tomllib`` reads it),
            with or without a ``sweep`` table.
        sweep: swept key -> list of values or range table, where ``config`` has no
            ``sweep`` table (see :mod:`stochmix.studies.spec` for the ranges and
            :mod:`stochmix.studies.keys` for the keys).
        mode: ``"product"`` (every combination, the default) or ``"zip"``.

    Raises:
        SweepError: ``config`` neither a path nor a dict, an unknown, fixed or empty swept
            key, ``mode = "zip"`` with nothing swept, more cells than
            :data:`~stochmix.studies.cells.MAX_CELLS`, or a cell whose configuration is
            refused; every cell is checked here, before any runs.
    """

    def __init__(self, config, sweep: dict | None = None, mode: str | None = None):
        if not isinstance(config, (dict, str, os.PathLike)):
            raise SweepError(
                f"config must be a TOML file's path or a configuration dict, got {config!r}"
            )
        if isinstance(config, dict):
            raw, default_name = copy.deepcopy(config), "study"
        else:
            raw, default_name = read_config(config)
        table = raw.pop("sweep", None)
        if table is not None and sweep is not None:
            raise SweepError("give the sweep in the configuration or as sweep=..., not both")
        given = sweep if table is None else table
        self.sweep: Sweep = parse_sweep({} if given is None else given, mode)
        if self.sweep.mode == "zip" and not self.sweep.keys:
            raise SweepError("mode = 'zip' needs swept keys, and nothing is swept (no cells)")
        self.config: dict = raw
        self.name: str = raw["name"] if isinstance(raw.get("name"), str) else default_name
        #: the ``[output]`` table (:mod:`stochmix.config.output`), left out of the cells:
        #: it says how the study is drawn, and a cell's resolved text is its identity
        self.output: dict = output_table(raw) if "output" in raw else {}
        cells_raw = {k: v for k, v in raw.items() if k != "output"}
        self.cells: list[Cell] = make_cells(cells_raw, self.sweep, default_name)
        if self.output:
            self.check_axis(self.output["x"])
        self.folder: Path | None = None
        self.failures: list[tuple[Cell, str]] = []
        self.skipped = 0
        self._rows: list[dict[str, Any]] | None = None

    def __repr__(self) -> str:
        return (
            f"Study({self.name!r}, {len(self.cells)} cells, sweep {self.sweep.keys}, "
            f"mode {self.sweep.mode!r})"
        )

    @property
    def plot_x(self) -> str:
        """The x axis of :meth:`plot_curves` by default: ``output.x``, else ``"round"``."""
        return str(self.output.get("x", "round"))

    def check_axis(self, x: str, where: str = "output.x") -> str:
        """``x`` checked as an x axis of :meth:`plot_curves` before any cell runs
        (:func:`stochmix.config.output.check_axis`: ``"time"`` needs simulated time in the
        first cell's configuration).

        Args:
            x: the axis.
            where: how the error names the setting.

        Returns:
            ``x``.

        Raises:
            ConfigError: an unknown axis, or ``"time"`` without simulated time.
        """
        return check_axis(x, parse(tomllib.loads(self.cells[0].text)), where)

    @property
    def keys(self) -> list[str]:
        """The swept keys, in the order of the sweep."""
        return self.sweep.keys

    @property
    def columns(self) -> list[str]:
        """The columns of ``study.csv``."""
        return header(self.keys)

    def table(self) -> dict:
        """The study as a configuration dict: the configuration and its ``sweep`` table
        (ranges written out as lists)."""
        swept: dict[str, Any] = dict(self.sweep.values)
        if self.sweep.mode != "product":
            swept["mode"] = self.sweep.mode
        return {**self.config, "sweep": swept}

    def work(self) -> int:
        """The study's size in node-rounds: over its cells, rounds x clients x the lrs of
        every method (what :meth:`default_jobs` weighs against starting processes)."""
        total = 0
        for cell in self.cells:
            table = tomllib.loads(cell.text)
            methods = table.get("methods", [])
            runs = sum(len(m["lr"]) if isinstance(m.get("lr"), list) else 1 for m in methods)
            total += table["rounds"] * table["problem"].get("n_clients", 1) * max(runs, 1)
        return total

    def default_jobs(self) -> int:
        """How many local processes the command uses when ``--jobs`` is not given: every
        core for a study of at least :data:`PARALLEL_WORK` node-rounds and two cells or more
        (starting a worker costs about a second: smaller studies run faster serially), else
        one. The results are the same bytes either way."""
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        if len(self.cells) < 2 or self.work() < PARALLEL_WORK:
            return 1
        return max(1, min(cores or 1, len(self.cells)))

    def run(
        self,
        folder=None,
        *,
        jobs: int = 1,
        executor: str | None = None,
        address: str | None = None,
        timeout: float = CONNECT_TIMEOUT,
        progress: bool | str = "auto",
        root="runs",
    ) -> Study:
        """Run the cells not already done in ``folder`` and write the study's tables.

        Args:
            folder: the study folder (it may exist: finished cells are skipped); default
                a new ``<root>/<name>-<time>-<n>``.
            jobs: local processes (``executor="process"``, the default where jobs > 1).
            executor: ``"serial"``, ``"process"`` or ``"dask"`` (the default where
                ``address`` is given).
            address: the Dask scheduler (``executor="dask"`` only), e.g.
                ``"tcp://host:8786"``; a malformed one is refused at once.
            timeout: seconds to wait for the Dask scheduler to answer (a positive number).
            progress: a progress line over cells: ``"auto"`` (on a terminal), True or
                False.
            root: where the default folder goes.

        Returns:
            The study itself; :attr:`failures` lists the cells that failed (the others'
            rows are in ``study.csv``), :attr:`folder` is the study folder.

        Raises:
            SweepError: a bad ``executor``, ``jobs``, ``address``, ``timeout`` or
                ``progress`` (before any work), ``address`` with another executor than
                Dask, a Dask scheduler that does not answer, a study folder (or a folder
                in it) that is a link, another user's or writable by others
                (:mod:`stochmix.studies.files`).
        """
        executor = check_options(executor, jobs, address, timeout, progress)
        client = connect(address, timeout) if executor == "dask" else None
        try:
            return self._run(folder, root, jobs, executor, client, progress)
        finally:
            if client is not None:
                client.close()

    def _run(self, folder, root, jobs: int, executor: str, client, progress) -> Study:
        # absolute before any cell is sent: a worker (a Dask one above all) may run in
        # another working directory
        out = self._study_folder(folder, root)
        cells_dir = private_folder(out / "cells", "study cells folder")
        folders = {cell.index: cells_dir / cell.name for cell in self.cells}
        outcomes: dict[int, dict] = {}
        again: list[str] = []
        for cell in self.cells:  # every cell folder there is checked before any work
            path = folders[cell.index]
            if not os.path.lexists(path):
                continue
            private_folder(path, "cell folder")
            summary, why = check_done(cell, path)
            if summary is not None:
                outcomes[cell.index] = summary
            elif why is not None:
                again.append(f"{cell.name!r}: {why}")
        if again:
            more = f"; and {len(again) - 5} more" if len(again) > 5 else ""
            warnings.warn(
                f"study: running {len(again)} cell(s) again whose files do not check out: "
                + "; ".join(again[:5])
                + more,
                RuntimeWarning,
                stacklevel=4,
            )
        experiments._write(
            out / "study.toml", dumps(self.table(), comment="a study: `stochmix run` of it")
        )
        todo = [cell for cell in self.cells if cell.index not in outcomes]
        self.skipped = len(self.cells) - len(todo)
        outcomes.update(
            run_cells(
                todo,
                folders,
                executor=executor,
                jobs=jobs,
                progress=progress,
                client=client,
            )
        )
        self.failures = [
            (cell, outcomes[cell.index]["error"])
            for cell in self.cells
            if "error" in outcomes.get(cell.index, {})
        ]
        self._rows = study_rows(self.cells, outcomes)
        write_csv(self._rows, self.columns, out / "study.csv")
        write_csv(timing_rows(self.cells, outcomes), STUDY_TIMING_COLUMNS, out / "timing.csv")
        failed = out / "failures.csv"
        if self.failures:
            rows = [{"cell": cell.name, "error": error} for cell, error in self.failures]
            write_csv(rows, ["cell", "error"], failed)
        elif failed.is_file():
            failed.unlink()
        self.folder = out
        return self

    def _study_folder(self, folder, root) -> Path:
        """The study folder, absolute, created (mode 0755) and checked to be this user's
        own (:func:`~stochmix.studies.files.private_folder`)."""
        if folder is not None:
            path = Path(folder)
            if os.path.lexists(path) and not path.is_dir():
                raise SweepError(f"folder {str(path)!r} is a file, not a folder")
            path.parent.mkdir(parents=True, exist_ok=True)
            return private_folder(path.resolve(), "study folder")
        out = experiments.output_dir(self.name, None, root=root).resolve()
        # a new folder, made here: its mode is the umask's, and ours to set
        os.chmod(out, stat.S_IMODE(os.lstat(out).st_mode) & ~0o022)
        return private_folder(out, "study folder")

    @property
    def csv(self) -> Path:
        """The study's ``study.csv`` (after :meth:`run`)."""
        return self._folder() / "study.csv"

    def _folder(self) -> Path:
        if self.folder is None:
            raise RuntimeError("the study has not run yet: call study.run() first")
        return self.folder

    def results(self, frame: bool | None = None):
        """The rows of ``study.csv``, with their values' types.

        Args:
            frame: True: a pandas DataFrame; False: a dict of columns; None (default): a
                DataFrame where pandas is installed, else a dict of columns.

        Returns:
            The table: a column per name of :attr:`columns`.

        Raises:
            RuntimeError: the study has not run.
            ImportError: ``frame=True`` without pandas.
        """
        self._folder()
        table = columns(self._rows or [], self.columns)
        if frame is False:
            return table
        try:
            import pandas as pd
        except ImportError:
            if frame:
                raise ImportError("Study.results(frame=True) needs pandas") from None
            return table
        return pd.DataFrame(table, columns=self.columns)

    def rounds(self, frame: bool | None = None):
        """The per-round table of the whole study: every row of every cell's
        ``metrics.csv`` (every method, step size and round), with the cell's name and its
        swept values as columns before them, in the study's order.

        Args:
            frame: as in :meth:`results`.

        Returns:
            The table: ``cell``, a column per swept key, then the columns of
            ``metrics.csv`` (``method``, ``lr``, ``seed``, ``round``, the metrics ...).

        Raises:
            RuntimeError: the study has not run.
            ImportError: ``frame=True`` without pandas.
        """
        import csv
        import io

        folder = self._folder()
        names: list[str] = ["cell", *self.keys]
        rows: list[dict[str, Any]] = []
        failed = {cell.index for cell, _ in self.failures}
        for cell in self.cells:
            if cell.index in failed:
                continue
            path = folder / "cells" / cell.name / "metrics.csv"
            text = read_regular(path).decode("utf-8")  # never through a link
            with io.StringIO(text, newline="") as handle:
                for row in csv.DictReader(handle):
                    names += [name for name in row if name not in names]
                    parsed = {k: _cell_value(v) for k, v in row.items()}
                    # the cell's identity comes from the cell, never from the file
                    rows.append({**parsed, "cell": cell.name, **cell.values, "seed": cell.seed})
        table = {name: [row.get(name) for row in rows] for name in names}
        if frame is False:
            return table
        try:
            import pandas as pd
        except ImportError:
            if frame:
                raise ImportError("Study.rounds(frame=True) needs pandas") from None
            return table
        return pd.DataFrame(table, columns=names)

    def plot(
        self,
        y: str = "rate",
        x: str | None = None,
        *,
        ax=None,
        logx: bool | None = None,
        logy: bool | None = None,
    ):
        """A summary column against a swept value: the median over seeds and the min-max
        band, a line per method (and per value of the other swept keys).

        Args:
            y: a summary column of ``study.csv`` (``rate``, ``final_relative_error``,
                ``rounds_to_1e-8`` ...).
            x: a swept key (default: the first).
            ax: a matplotlib Axes to draw on (default: a new figure's).
            logx: a log x axis (default: where the values are positive and span a
                factor of 20 or more).
            logy: a log y axis (default: for the final errors).

        Returns:
            The matplotlib Axes.

        Raises:
            ValueError: ``x`` is not swept or ``y`` is not a summary column.
            RuntimeError: the study has not run.
        """
        self._folder()
        return plot_summary(self._rows or [], self.keys, y=y, x=x, ax=ax, logx=logx, logy=logy)

    def plot_curves(
        self,
        by: str | None = None,
        metric: str | None = None,
        *,
        axes=None,
        x: str | None = None,
    ):
        """The per-round curves of every cell, a panel per value of the swept key ``by``:
        a line per method at each cell's best step size, the geometric mean over seeds
        and the min-max band (read from the cells' ``metrics.csv``), against ``x``.

        Args:
            by: the swept key of the panels (default: the first).
            metric: ``relative_error``, ``objective_gap`` or ``objective`` (default: the
                first a run recorded).
            axes: one matplotlib Axes per value of ``by`` (default: a new figure's).
            x: the x axis, one of :data:`~stochmix.config.output.PLOT_AXES`: ``"round"``,
                the running sum of the ``gradients``, ``messages`` or ``floats`` column,
                or the simulated ``time`` (the mean over seeds at each round); default
                :attr:`plot_x` (``[output] x``, else ``"round"``).

        Returns:
            The Axes, one per value of ``by``.

        Raises:
            ValueError: ``by`` is not swept, ``metric`` is not a curve, or ``x`` is not
                an axis or not recorded (``"time"`` without a clock).
            RuntimeError: the study has not run.
        """
        folder = self._folder()
        x = self.plot_x if x is None else x
        return plot_curves(
            folder, self._rows or [], self.keys, by=by, metric=metric, axes=axes, x=x
        )


def sweep(
    config,
    values: dict | None = None,
    *,
    mode: str | None = None,
    folder=None,
    jobs: int = 1,
    executor: str | None = None,
    address: str | None = None,
    progress: bool | str = "auto",
) -> Study:
    """Build a :class:`Study` and run it: ``sweep(config, {"participation.low": [...]})``.

    Args:
        config: a TOML file's path or a configuration dict.
        values: the sweep (where ``config`` has no ``sweep`` table).
        mode: ``"product"`` or ``"zip"``.
        folder: the study folder (see :meth:`Study.run`).
        jobs: local processes.
        executor: ``"serial"``, ``"process"`` or ``"dask"``.
        address: the Dask scheduler.
        progress: a progress line over cells.

    Returns:
        The study, run.

    Raises:
        SweepError: as :class:`Study` and :meth:`Study.run`.
    """
    study = Study(config, values, mode)
    return study.run(folder, jobs=jobs, executor=executor, address=address, progress=progress)

"""Studies: a configuration swept over some of its keys, times its seeds, run cell by cell
(serially, on local processes or on a Dask cluster) into one table.

In a configuration, a ``[sweep]`` table names the keys that vary::

    [sweep]                                # every combination, times `seeds`
    "participation.low" = [0.02, 0.05, 0.1]
    "methods.FOCUS.local_steps" = { start = 1, stop = 5, num = 3 }
    # mode = "zip"                         # pair the lists element by element instead

and ``stochmix run study.toml --jobs 2`` runs it. In Python::

    study = Study("study.toml").run("my-study", jobs=2)
    study.results()                        # study.csv as a DataFrame
    study.plot(y="rate", x="participation.low")

Modules: :mod:`~stochmix.studies.spec` (the ``[sweep]`` table), :mod:`~stochmix.studies.keys`
(what a swept key names), :mod:`~stochmix.studies.cells` (a cell and how it runs),
:mod:`~stochmix.studies.execution` (where cells run), :mod:`~stochmix.studies.files`
(the study's files, never through links, in folders only this user writes),
:mod:`~stochmix.studies.table`
(``study.csv``), :mod:`~stochmix.studies.plotting` and :mod:`~stochmix.studies.study`.
"""

from __future__ import annotations

from .cells import Cell
from .execution import EXECUTORS
from .spec import MODES, Sweep, SweepError
from .study import Study, read_config, sweep

__all__ = [
    "EXECUTORS",
    "MODES",
    "Cell",
    "Study",
    "Sweep",
    "SweepError",
    "read_config",
    "sweep",
]

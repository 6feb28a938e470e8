"""Where the cells of a study run: in this process, on local processes
(:class:`concurrent.futures.ProcessPoolExecutor`) or on a Dask ``distributed`` cluster.

Each cell runs :func:`stochmix.studies.cells.run_cell`, a function of plain values that
writes the cell's folder and returns its rows (or its error), so that every executor gives
the same files; the study orders the rows itself, whatever order the cells finish in.
"""

from __future__ import annotations

import math
import multiprocessing
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from ..engine.runner.progress import Progress
from .cells import Cell, run_cell
from .spec import SweepError

__all__ = [
    "CONNECT_TIMEOUT",
    "EXECUTORS",
    "check_address",
    "check_options",
    "connect",
    "run_cells",
]

#: Where cells run: ``"serial"`` (this process), ``"process"`` (local processes, ``jobs``
#: of them) and ``"dask"`` (a ``distributed`` cluster at ``address``).
EXECUTORS = ("serial", "process", "dask")

#: Seconds to wait for a Dask scheduler to answer.
CONNECT_TIMEOUT = 10.0

Outcome = tuple[Cell, dict]


def _serial(cells: list[Cell], folders: dict[int, Path]) -> Iterator[Outcome]:
    for cell in cells:
        yield cell, run_cell(cell.text, str(folders[cell.index]), cell.digest)


def _processes(cells: list[Cell], folders: dict[int, Path], jobs: int) -> Iterator[Outcome]:
    # spawn: a fresh interpreter per worker, whatever threads this process has started
    context = multiprocessing.get_context("spawn")
    pool = ProcessPoolExecutor(max_workers=min(jobs, len(cells)), mp_context=context)
    try:
        futures = {
            pool.submit(run_cell, cell.text, str(folders[cell.index]), cell.digest): cell
            for cell in cells
        }
        for future in as_completed(futures):
            yield futures[future], _result(future)
    finally:  # an interrupted study stops here: the cells not started are dropped
        pool.shutdown(wait=True, cancel_futures=True)


def _result(future) -> dict:
    """A finished future's outcome; a worker that died (or a cell that could not be sent)
    is the cell's error."""
    try:
        return future.result()
    except BrokenProcessPool as error:
        return {
            "error": f"BrokenProcessPool: {error} (each worker process imports the script "
            'that started the study: start it under `if __name__ == "__main__":`)'
        }
    except Exception as error:  # noqa: BLE001 - reported as the cell's failure
        return {"error": f"{type(error).__name__}: {error}"}


def check_options(
    executor: str | None = None,
    jobs: int = 1,
    address: str | None = None,
    timeout: float = CONNECT_TIMEOUT,
    progress: bool | str = "auto",
) -> str:
    """Check how a study is asked to run, before any work, and choose its executor.

    Args:
        executor: one of :data:`EXECUTORS`, or None: ``"dask"`` where ``address`` is
            given, else ``"process"`` where ``jobs`` > 1, else ``"serial"``.
        jobs: local processes, a positive integer.
        address: the Dask scheduler (:func:`check_address`); only with
            ``executor="dask"`` (which :func:`connect` refuses without one).
        timeout: seconds to wait for the scheduler, a positive finite number.
        progress: True, False or ``"auto"``.

    Returns:
        The executor.

    Raises:
        SweepError: one of them is bad (the message names it and its value).
    """
    if progress not in (True, False, "auto") or not isinstance(progress, (bool, str)):
        raise SweepError(f"progress must be True, False or 'auto', got {progress!r}")
    if isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1:
        raise SweepError(f"jobs must be a positive integer, got {jobs!r}")
    if executor is None:
        executor = "dask" if address is not None else "process" if jobs > 1 else "serial"
    if executor not in EXECUTORS:
        raise SweepError(f"executor must be one of {list(EXECUTORS)}, got {executor!r}")
    if address is not None and executor != "dask":
        raise SweepError(
            f"address = {address!r} applies to executor='dask', not executor={executor!r}"
        )
    if address is not None:  # a missing one is refused by connect()
        check_address(address)
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not math.isfinite(timeout)
        or timeout <= 0
    ):
        raise SweepError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return executor


def check_address(address, name: str = "address") -> str:
    """``address`` checked as a Dask scheduler address (``tcp://host:port``, ``host:port``,
    another ``distributed`` protocol such as ``tls://host:port``, or ``inproc://...``)
    without connecting: a malformed one is refused at once, not after a timeout.

    Args:
        address: the address.
        name: how the error names it (``"address"``, ``"--address"``).

    Returns:
        ``address``.

    Raises:
        SweepError: no address, or a malformed one (the message names it and why).
    """
    if address is None:
        raise SweepError('executor="dask" needs address="tcp://host:port" (a scheduler)')
    if not isinstance(address, str) or not address.strip():
        raise SweepError(
            f"{name} must be a Dask scheduler address like 'tcp://host:8786', got {address!r}"
        )
    scheme, _, rest = address.rpartition("://")
    scheme = scheme or "tcp"
    why = None
    if scheme not in ("tcp", "tls", "ws", "wss", "ucx", "inproc"):
        why = f"unknown protocol {scheme!r}"
    elif scheme != "inproc":
        host, colon, port = rest.rpartition(":")
        if not colon or not host.strip("[]"):
            why = "it needs host:port"
        elif not port.isdigit() or not 0 < int(port) < 65536:
            why = f"the port {port!r} is not a number from 1 to 65535"
    elif not rest:
        why = "it needs a name after inproc://"
    if why is not None:
        raise SweepError(
            f"{name} = {address!r} is not a Dask scheduler address ({why}); "
            "give e.g. 'tcp://host:8786'"
        )
    return address


def connect(address: str | None, timeout: float = CONNECT_TIMEOUT):
    """A Dask ``distributed`` client of the scheduler at ``address``.

    Args:
        address: the scheduler, e.g. ``"tcp://host:8786"`` (checked first:
            :func:`check_address`).
        timeout: seconds to wait for it to answer.

    Returns:
        The ``distributed.Client`` (not made the default client).

    Raises:
        ImportError: Dask distributed is not installed.
        SweepError: no address or a malformed one (at once), or no scheduler answered
            within ``timeout`` seconds.
    """
    check_address(address)
    try:
        from distributed import Client
    except ImportError:
        raise ImportError(
            'executor="dask" needs Dask distributed: pip install "stochmix[cluster]"'
        ) from None
    try:
        return Client(address, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError) as error:  # refused, timed out
        why = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise SweepError(
            f"address = {address!r}: no Dask scheduler answered within {timeout:g} s "
            f"({type(error).__name__}: {why})"
        ) from None
    except Exception as error:  # noqa: BLE001 - e.g. not a Dask scheduler at the other end
        why = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise SweepError(
            f"address = {address!r}: could not connect to a Dask scheduler "
            f"({type(error).__name__}: {why})"
        ) from None


def _dask(cells: list[Cell], folders: dict[int, Path], client) -> Iterator[Outcome]:
    from distributed import as_completed as dask_completed

    with client.as_current():
        futures = {
            client.submit(
                run_cell, cell.text, str(folders[cell.index]), cell.digest, pure=False
            ): cell
            for cell in cells
        }
        for future in dask_completed(list(futures)):
            yield futures[future], _result(future)


def run_cells(
    cells: list[Cell],
    folders: dict[int, Path],
    *,
    executor: str = "serial",
    jobs: int = 1,
    address: str | None = None,
    timeout: float = CONNECT_TIMEOUT,
    progress: bool | str = "auto",
    on_done: Callable[[Cell, dict], None] | None = None,
    client=None,
) -> dict[int, dict]:
    """Run ``cells``, each in its folder, and gather what each returned.

    Args:
        cells: the cells to run.
        folders: cell index -> its folder.
        executor: one of :data:`EXECUTORS`.
        jobs: the local processes of ``executor="process"``.
        address: the Dask scheduler of ``executor="dask"``.
        timeout: seconds to wait for the Dask scheduler.
        progress: a progress line over cells on a terminal (``"auto"``), always (True)
            or never (False).
        on_done: called with each cell and its outcome as it finishes.
        client: a Dask client (:func:`connect`) for ``executor="dask"``; default one
            made here from ``address`` and closed at the end.

    Returns:
        cell index -> ``run_cell``'s outcome (rows, or ``{"error": ...}``).

    Raises:
        SweepError: a bad option (:func:`check_options`), a Dask scheduler that does not
            answer within ``timeout`` seconds.
        ImportError: ``executor="dask"`` without Dask distributed installed.
    """
    if executor not in EXECUTORS:
        raise SweepError(f"executor must be one of {list(EXECUTORS)}, got {executor!r}")
    check_options(executor, jobs, address, timeout, progress)
    if not cells:
        return {}
    own = None
    if executor == "dask":
        if client is None:
            client = own = connect(address, timeout)
        stream: Iterator[Outcome] = _dask(cells, folders, client)
    elif executor == "process" and jobs > 1 and len(cells) > 1:
        stream = _processes(cells, folders, jobs)
    else:
        stream = _serial(cells, folders)
    bar = Progress(len(cells), "study", force=progress is True, unit="cells")
    bar.enabled = bar.enabled and progress is not False
    outcomes: dict[int, dict] = {}
    try:
        for done, (cell, outcome) in enumerate(stream):
            outcomes[cell.index] = outcome
            if on_done is not None:
                on_done(cell, outcome)
            if "error" in outcome:
                bar.note(f"cell {cell.name} failed: {outcome['error']}")
            bar(done)
    finally:
        bar.close()
        if own is not None:
            own.close()
    return outcomes

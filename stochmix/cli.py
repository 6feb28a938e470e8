"""The ``stochmix`` command.

``stochmix run`` runs the embedded default experiment (least squares over 20 clients with
heterogeneous Bernoulli participation, FedAvg against FOCUS); ``stochmix run FILE.toml``
runs a configuration (see :mod:`stochmix.config`). Both print a summary table and fill a
new run folder ``./runs/<name>-<time>-<n>/`` (or ``--out DIR``; see
:mod:`stochmix.experiments` for its files). ``stochmix spectrum`` prints the spectral
summary of mixing matrices: of a configuration's graphs (``stochmix spectrum FILE.toml``), of
a graph named by flags, or of the expected federated matrices. ``stochmix certify FILE.toml``
prints the certified worst-case rate of each method and step of a configuration (see
:mod:`stochmix.analysis.certificates`).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import textwrap
import warnings

from . import config as configs
from . import experiments
from ._certify_command import add_certify_parser
from ._names import RenamedWarning
from ._spectrum_command import GRAPH_NODES_LIMIT, add_spectrum_parser
from .config.output import PLOT_AXES, check_axis
from .config.registry import ACTIVATIONS
from .reporting import format_table

__all__ = [
    "GRAPH_NODES_LIMIT",
    "build_parser",
    "main",
]


def _attempt(what: str, step, folder) -> int:
    """Run ``step()``; if it fails, say so in one line on stderr (the run's files stay in
    ``folder``) and return 1, else 0. A plot without matplotlib is a note, not a failure."""
    try:
        step()
    except ImportError as error:
        if what != "plot" or "matplotlib" not in str(error):
            raise
        print(
            'stochmix: note: no plot: matplotlib is not installed (pip install "stochmix[plot]")',
            file=sys.stderr,
        )
    except Exception as error:  # noqa: BLE001 - finished work is on disk; report and go on
        message = str(error).strip().splitlines()[0] if str(error).strip() else ""
        print(
            f"stochmix: error: the {what} failed ({type(error).__name__}: {message}); "
            f"the run's files are in {folder}",
            file=sys.stderr,
        )
        return 1
    return 0


def _launched_by_torchrun() -> bool:
    """Whether this process is one rank of a job started by ``torchrun`` (which sets
    RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT for every process it starts)."""
    return all(k in os.environ for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"))


def _join_group() -> tuple[int, bool]:
    """Join torchrun's process group (gloo: the state lives on the CPU) unless this
    process is in one already; returns (rank, whether it was joined here)."""
    try:
        import torch.distributed as dist
    except ImportError:
        raise ValueError('torchrun needs PyTorch: pip install "stochmix[torch]"') from None
    if dist.is_initialized():
        return dist.get_rank(), False
    dist.init_process_group("gloo")
    return dist.get_rank(), True


def command_run(args: argparse.Namespace) -> int:
    """``stochmix run``: run the configuration and fill its run folder.

    The resolved configuration and participation.csv are written before the runs, and
    metrics.csv and timing.csv before the summary table and the plot: a summary or plot
    that fails is reported in one line and gives exit status 1, the files stay.

    Under ``torchrun --nproc-per-node R -m stochmix run ...`` every process joins
    torchrun's gloo group and runs on ``backend="distributed"`` (client rows sharded over
    the R ranks, the same numbers for any R); rank 0 alone prints and writes the folder.
    """
    if args.config and _is_study(args.config):
        if args.save_models:
            raise configs.ConfigError(
                "--save-models applies to one configuration, not to a study (a [sweep] table)"
            )
        return _run_study(args)
    if args.jobs is not None or args.address is not None:
        option = "--jobs" if args.jobs is not None else "--address"
        raise configs.ConfigError(
            f"{option} applies to a study (a configuration with a [sweep] table)"
        )
    exp = configs.load(args.config) if args.config else configs.default()
    if args.rounds is not None:
        if args.rounds < 0:
            raise configs.ConfigError(f"--rounds must be >= 0, got {args.rounds}")
        exp.rounds = args.rounds
    if args.seed is not None:
        if args.seed < 0:
            raise configs.ConfigError(f"--seed must be >= 0, got {args.seed}")
        exp.seeds = [args.seed]
    if args.x is not None:  # before any run: --x time needs a clock
        check_axis(args.x, exp, "--x")
    save = _save_models(args, exp)
    joined = False
    lead = True
    if _launched_by_torchrun():
        rank, joined = _join_group()
        lead = rank == 0
    try:
        return _run_and_write(exp, args, lead, distributed=_launched_by_torchrun(), save=save)
    finally:
        if joined:
            import torch.distributed as dist

            dist.destroy_process_group()


def _save_models(args: argparse.Namespace, exp) -> bool:
    """Whether the run writes ``models.npz`` (``--save-models``, which is written into the
    resolved configuration's ``[output]``, or ``[output] save_models``), checked before
    any run: its runs must keep every node row (``storage = "compact"`` is refused) on
    one process (not under torchrun, whose ranks hold part of the nodes)."""
    if args.save_models:
        exp.output = {"x": exp.plot_x, **exp.output, "save_models": True}
    if not exp.output.get("save_models", False):
        return False
    where = "--save-models" if args.save_models else "output.save_models = true"
    if exp.settings.get("storage", "auto") == "compact":
        raise configs.ConfigError(
            f'{where} needs every node row of the state, which storage = "compact" leaves '
            'out: use storage = "auto" or "full"'
        )
    if _launched_by_torchrun():
        raise configs.ConfigError(
            f"{where} is not supported under torchrun: each rank holds part of the nodes"
        )
    return True


def _write_models(outcomes, path):
    """``models.npz``: every run's :attr:`~stochmix.Result.node_models`, one array (n, dim)
    per run, named ``"<method label>, lr=<lr>, seed=<seed>"``."""
    import numpy as np

    arrays = {
        f"{outcome.label}, lr={lr!r}, seed={res.config.get('seed')}": res.node_models
        for outcome in outcomes
        for lr, results in outcome.runs.items()
        for res in results
        if res.node_models is not None
    }
    np.savez(path, **arrays)
    return path


def _is_study(path) -> bool:
    """Whether the configuration file at ``path`` has a ``[sweep]`` table (a file that
    cannot be read is left to :func:`stochmix.config.load` to report)."""
    from .studies import read_config

    try:
        raw, _ = read_config(path)
    except configs.ConfigError:
        return False
    return "sweep" in raw


def _run_study(args: argparse.Namespace) -> int:
    """``stochmix run study.toml``: every cell of the study (:mod:`stochmix.studies`) in
    ``<study folder>/cells/``, then ``study.csv``; exit status 1 where a cell failed."""
    from .studies import Study, read_config
    from .studies.execution import check_address

    raw, name = read_config(args.config)
    raw.setdefault("name", name)
    if args.rounds is not None:
        if args.rounds < 0:
            raise configs.ConfigError(f"--rounds must be >= 0, got {args.rounds}")
        raw["rounds"] = args.rounds
    if args.seed is not None:
        if args.seed < 0:
            raise configs.ConfigError(f"--seed must be >= 0, got {args.seed}")
        raw.pop("seed", None)
        raw["seeds"] = [args.seed]
    if args.jobs is not None and args.jobs < 1:
        raise configs.ConfigError(f"--jobs must be a positive integer, got {args.jobs}")
    if args.address is not None:  # at once, not after a timeout; '' is refused too
        check_address(args.address, "--address")
    study = Study(raw)
    if args.x is not None:  # before any cell runs: --x time needs a clock
        study.check_axis(args.x, "--x")
    axis = args.x or study.plot_x
    jobs = study.default_jobs() if args.jobs is None else args.jobs
    dask = args.address is not None  # --address '' is refused, not run locally
    where = f"on the Dask cluster at {args.address}" if dask else f"{jobs} job(s)"
    print(
        f"{study.name}: {len(study.cells)} cells (sweep {study.keys}, {study.sweep.mode}), {where}"
    )
    try:
        folder = study.run(
            args.out,
            jobs=jobs,
            executor="dask" if dask else None,
            address=args.address,
            progress=False if args.quiet else "auto",
        ).csv.parent
    except ImportError as error:
        raise ValueError(str(error)) from None
    if study.skipped:
        print(f"{study.skipped} cell(s) already done in {folder} were skipped")
    status = 0
    for cell, message in study.failures:
        print(f"stochmix: error: cell {cell.describe()} failed: {message}", file=sys.stderr)
    if study.failures:
        print(
            f"stochmix: error: {len(study.failures)} of {len(study.cells)} cells failed "
            f"(listed in {folder / 'failures.csv'}); run the study again with --out "
            f"{folder} to retry them",
            file=sys.stderr,
        )
        status = 1
    if not args.no_plot and study.keys:
        status |= _attempt("plot", lambda: _study_plot(study, folder, axis), folder)
    print(f"study table: {study.csv}")
    return status


def _study_plot(study, folder, x: str = "round") -> None:
    """``rate.png``: the linear rate against the first swept key; ``curves.png``: the
    per-round curves against ``x`` (the round, a cost's running sum or the simulated time),
    a panel per value of the first swept key."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ax = study.plot(y="rate")
    ax.figure.tight_layout()
    path = folder / "rate.png"
    ax.figure.savefig(path, dpi=120)
    plt.close(ax.figure)
    print(f"plot: {path}")
    figure = study.plot_curves(x=x)[0].figure
    figure.tight_layout()
    path = folder / "curves.png"
    figure.savefig(path, dpi=120)
    plt.close(figure)
    print(f"plot: {path}")


def _run_and_write(
    exp, args: argparse.Namespace, lead: bool, distributed: bool, save: bool = False
) -> int:
    say = print if lead else _silent
    say(
        f"{exp.name}: {exp.problem!r}; {exp.participation!r}; {exp.rounds} rounds, "
        f"seeds {exp.seeds}"
    )
    out = resolved = None
    if lead:
        out = experiments.output_dir(exp.name, args.out)
        resolved = experiments.write_config(exp, out / "config.resolved.toml")
        experiments.write_participation(exp.participation, out / "participation.csv")
    if distributed:  # after the resolved config, which repeats the run on one process
        exp.backend = "distributed"
    if save:  # every node row kept (the same numbers: storage changes no run)
        exp.settings["storage"] = "full"
    progress = False if args.quiet else "auto"
    outcomes = experiments.run_experiment(exp, progress=progress, log=say if lead else None)
    if out is None:  # not the lead process: it writes nothing
        return 0
    metrics = experiments.write_metrics(outcomes, out / "metrics.csv")
    experiments.write_timing(outcomes, out / "timing.csv")
    status = _attempt(
        "summary", lambda: print(format_table(experiments.summary_rows(outcomes))), out
    )
    print(f"per-round metrics: {metrics}")
    if save:
        print(f"final node models: {_write_models(outcomes, out / 'models.npz')}")
    if not args.no_plot:
        axis = args.x or exp.plot_x
        status |= _attempt(
            "plot",
            lambda: print(
                f"plot: {experiments.plot(outcomes, out / 'error.png', exp.name, x=axis)}"
            ),
            out,
        )
    print(f"repeat: stochmix run {resolved}")
    return status


def _silent(*args, **kwargs) -> None:
    """print() for ranks other than 0."""


#: Width of the help texts the command wraps itself (those with lists of kinds).
_HELP_WIDTH = 79


def _wrapped(text: str, indent: str = "") -> str:
    """``text`` wrapped to :data:`_HELP_WIDTH` columns, names never broken; lines after
    the first of an indented item hang two columns further in."""
    return textwrap.fill(
        text,
        _HELP_WIDTH,
        initial_indent=indent,
        subsequent_indent=indent + "  " if indent else "",
        break_long_words=False,
        break_on_hyphens=False,
    )


def kinds_help() -> str:
    """The ``kind`` values a configuration takes, read from the registry
    (:mod:`stochmix.config.registry`) so the list cannot go stale: the epilog of
    ``stochmix run --help``."""
    lists = (
        ("problems ([problem])", configs.PROBLEMS),
        ("federated methods ([[methods]])", configs.FEDERATED),
        (
            "decentralized methods ([[methods]], with a [graphs] table; every node in every"
            " round, or an [activation] table: edge gossip, or node activation where the"
            " method's mixing allows it)",
            configs.DECENTRALIZED,
        ),
        ("participation ([participation])", configs.PROCESSES),
        ("activation ([activation]; decentralized methods, or a participation kind)", ACTIVATIONS),
        ("graphs ([graphs])", configs.GRAPHS),
    )
    lines = ["configuration kinds (the kind = ... of each table; see stochmix.config):"]
    lines += [_wrapped(f"{what}: {', '.join(kinds)}", "  ") for what, kinds in lists]
    lines.append(
        _wrapped(
            "and the methods, problems and processes that installed packages declare under the"
            " entry points stochmix.methods, stochmix.problems and stochmix.participation",
            "  ",
        )
    )
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="stochmix",
        description="Federated and decentralized optimization as matrix recursions.",
    )
    parser.add_argument("--version", action="version", version=f"stochmix {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p_run = sub.add_parser(
        "run",
        help="run the embedded default experiment or a TOML config",
        description=_wrapped(
            "Run a configuration (default: the embedded FedAvg-against-FOCUS experiment) and"
            " write config.resolved.toml, participation.csv, metrics.csv, timing.csv and"
            " error.png into a new run folder. A configuration with a [sweep] table is a"
            " study: each cell gets such a folder under cells/, and study.csv a row per"
            " cell, method and seed (see stochmix.studies)."
        ),
        epilog=kinds_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p_run.add_argument("config", nargs="?", help="experiment.toml (default: embedded)")
    p_run.add_argument(
        "--out",
        metavar="DIR",
        help="output folder (default ./runs/<name>-<time>-<n>); a study run again into its"
        " folder skips the cells already done",
    )
    p_run.add_argument("--rounds", type=int, help="override the number of rounds (>= 0)")
    p_run.add_argument("--seed", type=int, help="run this one seed")
    p_run.add_argument(
        "--jobs",
        type=int,
        metavar="N",
        help="a study (a config with a [sweep] table): run its cells on N local processes"
        " (default: every core for studies of 2e6 node-rounds or more, else 1)",
    )
    p_run.add_argument(
        "--address",
        metavar="ADDR",
        help="a study: run its cells on the Dask cluster whose scheduler is at ADDR, e.g."
        ' tcp://host:8786 (pip install "stochmix[cluster]")',
    )
    p_run.add_argument(
        "--x",
        choices=PLOT_AXES,
        help="the x axis of error.png (a study: of curves.png): round (the default), the"
        " running sum of the gradients, messages or floats columns of metrics.csv, or the"
        " simulated time (needs a clock: a [clock] table); overrides [output] x",
    )
    p_run.add_argument(
        "--save-models",
        action="store_true",
        help="also write models.npz: every run's final node models (Result.node_models,"
        " one (n, dim) array per run, one row per client or peer); sets [output]"
        " save_models",
    )
    p_run.add_argument("--no-plot", action="store_true", help="skip the PNG")
    p_run.add_argument("--quiet", action="store_true", help="no progress line")
    p_run.set_defaults(func=command_run)

    add_spectrum_parser(sub)
    add_certify_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    with warnings.catch_warnings():
        # an old spelling's warning is one line on stderr, once per place it is given
        warnings.simplefilter("default", RenamedWarning)
        shown = warnings.showwarning
        warnings.showwarning = functools.partial(_warning_line, shown)
        args = parser.parse_args(argv)
        try:
            return args.func(args)
        except (ValueError, TypeError, OSError) as error:
            message = str(error).splitlines()[0] if str(error) else type(error).__name__
            print(f"stochmix: error: {message}", file=sys.stderr)
            return 2


def _warning_line(shown, message, category, filename, lineno, file=None, line=None) -> None:
    """Show an old spelling's warning as one line ``stochmix: warning: ...`` on stderr,
    any other warning as ``shown`` (the usual way) does."""
    if issubclass(category, RenamedWarning):
        print(f"stochmix: warning: {message}", file=sys.stderr)
    else:
        shown(message, category, filename, lineno, file, line)


if __name__ == "__main__":
    sys.exit(main())

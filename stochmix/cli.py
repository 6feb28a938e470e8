"""The ``stochmix`` command.

``stochmix run`` runs the embedded default experiment (least squares over 20 clients with
heterogeneous Bernoulli participation, FedAvg against FOCUS); ``stochmix run FILE.toml``
runs a configuration (see :mod:`stochmix.config`). Both print a summary table and fill a
new run folder ``./runs/<name>-<time>-<n>/`` (or ``--out DIR``; see
:mod:`stochmix.experiments` for its files). ``stochmix spectrum`` prints the spectral
summary of mixing matrices.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap

from . import config as configs
from . import experiments
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
    joined = False
    lead = True
    if _launched_by_torchrun():
        rank, joined = _join_group()
        lead = rank == 0
    try:
        return _run_and_write(exp, args, lead, distributed=_launched_by_torchrun())
    finally:
        if joined:
            import torch.distributed as dist

            dist.destroy_process_group()


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
    jobs = 1 if args.jobs is None else args.jobs
    if jobs < 1:
        raise configs.ConfigError(f"--jobs must be a positive integer, got {jobs}")
    study = Study(raw)
    where = f"on the Dask cluster at {args.address}" if args.address else f"{jobs} job(s)"
    print(
        f"{study.name}: {len(study.cells)} cells (sweep {study.keys}, {study.sweep.mode}), {where}"
    )
    try:
        folder = study.run(
            args.out,
            jobs=jobs,
            executor="dask" if args.address else None,
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
        status |= _attempt("plot", lambda: _study_plot(study, folder), folder)
    print(f"study table: {study.csv}")
    return status


def _study_plot(study, folder) -> None:
    """``rate.png``: the linear rate against the first swept key; ``curves.png``: the
    per-round curves, a panel per value of the first swept key."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ax = study.plot(y="rate")
    ax.figure.tight_layout()
    path = folder / "rate.png"
    ax.figure.savefig(path, dpi=120)
    plt.close(ax.figure)
    print(f"plot: {path}")
    figure = study.plot_curves()[0].figure
    figure.tight_layout()
    path = folder / "curves.png"
    figure.savefig(path, dpi=120)
    plt.close(figure)
    print(f"plot: {path}")


def _run_and_write(exp, args: argparse.Namespace, lead: bool, distributed: bool) -> int:
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
    if not args.no_plot:
        status |= _attempt(
            "plot",
            lambda: print(f"plot: {experiments.plot(outcomes, out / 'error.png', exp.name)}"),
            out,
        )
    print(f"repeat: stochmix run {resolved}")
    return status


def _silent(*args, **kwargs) -> None:
    """print() for ranks other than 0."""


_GRAPHS = ("one-peer-exponential", "ring", "erdos-renyi", "random-directed")
#: Largest ``--nodes`` of ``stochmix spectrum --graph``. The product of a period or of a
#: window of steps of a connected sequence is a dense n x n matrix (80 GB at n = 10^5), and
#: its summary costs O(n^3) (Dobrushin's coefficient compares every pair of rows; the
#: eigen-solves of rings, whose eigenvalues cluster near 1, fall back to dense LAPACK, and
#: above n = 4000 ARPACK alone does not converge).
GRAPH_NODES_LIMIT = 1000
_RANDOM_GRAPHS = ("erdos-renyi", "random-directed")
_GRAPH_ONLY = ("rules", "steps", "window")
_FEDERATED_ONLY = ("low", "high", "samples")


def _given(args: argparse.Namespace, names: tuple[str, ...]) -> list[str]:
    """The options among ``names`` that were given on the command line (not defaulted)."""
    return [name for name in names if getattr(args, name) is not None]


def _show_option(args: argparse.Namespace, name: str) -> str:
    """``--name value`` as the user typed it, for an error message."""
    value = getattr(args, name)
    shown = " ".join(map(str, value)) if isinstance(value, list) else value
    return f"--{name} {shown}"


def _refuse_given(args: argparse.Namespace, names: tuple[str, ...], why: str) -> None:
    """Refuse the first option among ``names`` given on the command line, saying ``why``."""
    given = _given(args, names)
    if given:
        raise ValueError(f"--{given[0]} {why}, got {_show_option(args, given[0])}")


def _positive(value: int, option: str) -> None:
    """Refuse an option value below 1, naming the option."""
    if value < 1:
        raise ValueError(f"{option} must be a positive integer, got {value}")


def _check_spectrum_graph_options(args: argparse.Namespace) -> None:
    """Validate the options of ``stochmix spectrum --graph ...``; fill in defaults."""
    from .mixing import RULES

    if args.nodes > GRAPH_NODES_LIMIT:
        dense = 8 * args.nodes**2 / 1e9
        raise ValueError(
            f"--nodes must be <= {GRAPH_NODES_LIMIT} with --graph, got {args.nodes}: a product"
            f" of steps is a dense n x n matrix ({dense:.3g} GB here) whose summary costs O(n^3)"
        )
    _refuse_given(
        args,
        _FEDERATED_ONLY,
        f"applies without --graph (federated participation) and is not used with --graph "
        f"{args.graph}",
    )
    args.rules = list(dict.fromkeys(args.rules or ["row", "column"]))
    for rule in args.rules:
        if rule not in RULES:
            raise ValueError(f"--rules: unknown rule {rule!r}; choose from {', '.join(RULES)}")
    if args.steps is not None:
        if args.graph not in _RANDOM_GRAPHS:
            raise ValueError(
                f"--steps applies to random graphs ({', '.join(_RANDOM_GRAPHS)}); --graph"
                f" {args.graph} is periodic and every step of its period is shown, got"
                f" --steps {args.steps}"
            )
        _positive(args.steps, "--steps")
    if args.window is not None:
        _positive(args.window, "--window")
        if args.graph in _RANDOM_GRAPHS:
            from .mixing.spectral_sequences import STEPS

            steps = STEPS if args.steps is None else args.steps
            if args.window > steps:
                raise ValueError(f"--window must be <= --steps ({steps}), got {args.window}")


def _check_spectrum_federated_options(args: argparse.Namespace) -> None:
    """Validate the options of ``stochmix spectrum`` without ``--graph``; fill in defaults."""
    _refuse_given(
        args,
        _GRAPH_ONLY,
        "applies with --graph only (without it the federated expected matrices are shown)",
    )
    args.low = 0.1 if args.low is None else args.low
    args.high = 0.9 if args.high is None else args.high
    args.samples = 2000 if args.samples is None else args.samples
    for option, value in (("--low", args.low), ("--high", args.high)):
        if not 0 < value <= 1:
            raise ValueError(f"{option} must lie in (0, 1], got {value}")
    if args.high < args.low:
        raise ValueError(f"--high must be >= --low ({args.low}), got {args.high}")
    _positive(args.samples, "--samples")


def _graph_sequence(graph: str, nodes: int, seed: int):
    """The graph sequence that ``--graph`` names, over ``nodes`` nodes."""
    from . import mixing

    if graph == "one-peer-exponential":
        return mixing.OnePeerExponential(nodes)
    if graph == "ring":
        return mixing.DirectedRingSequence(nodes)
    kind = "erdos_renyi" if graph == "erdos-renyi" else "directed_ring_with_random_edges"
    return mixing.RandomSequence(nodes, kind, seed=seed)


def _spectrum_of_graph(args: argparse.Namespace) -> None:
    """Print every step of a period (or min / median / max over sampled steps) and the
    products, for each rule; refuse a rule whose matrices break its promise."""
    from .mixing.spectral_sequences import describe, sequence_spectrum, sequence_table

    sequence = _graph_sequence(args.graph, args.nodes, args.seed)
    spectra = []
    for rule in args.rules:
        try:
            spectrum = sequence_spectrum(sequence, rule, steps=args.steps, window=args.window)
        except ValueError as error:
            raise ValueError(f"--graph {args.graph} --rules {rule}: {error}") from None
        spectra.append(spectrum)
    heading = f"{args.graph}, {args.nodes} nodes"
    if sequence.period is None:
        heading += f", seed {args.seed}"
    note = ""
    if sequence.period is None and args.window is None:
        note = " (--window; default min(ceil(log2 nodes), steps))"
    print(f"{heading}, {describe(spectra[0])}{note}")
    print(sequence_table(spectra))


def _spectrum_of_federated(args: argparse.Namespace) -> None:
    """Print the expected federated matrices under heterogeneous Bernoulli participation."""
    import numpy as np

    from . import mixing
    from .mixing.spectral import summary_table
    from .participation import Bernoulli

    process = Bernoulli.heterogeneous(args.nodes, args.low, args.high, seed=args.seed)
    p = process.probabilities
    matrices = {
        "E[A_S] (assign)": mixing.expected_assign(p),
        "E[C_S] (collect)": mixing.expected_collect(p),
    }

    def all_pull_round(mask):
        # the server averages the participants (weights 1/|S|), then every client pulls
        q = np.full(mask.size, 1.0 / max(int(mask.sum()), 1))
        return mixing.assign(np.ones(mask.size, dtype=bool)) @ mixing.average(mask, q)

    avg = mixing.expected_matrix(all_pull_round, process, rounds=args.samples, seed=args.seed)
    matrices["E[A_all average(S)]"] = avg
    pi = mixing.perron_vector(avg, side="left")
    print("expected aggregation weights E[q_i] (left Perron vector, clients):")
    print("  " + " ".join(f"{v:.3f}" for v in pi[1:]))
    print("  p_i / sum p: " + " ".join(f"{v:.3f}" for v in p / p.sum()))
    print(summary_table(matrices))


def command_spectrum(args: argparse.Namespace) -> int:
    """``stochmix spectrum``: validate every option first, then print the summaries.

    With ``--graph``: every step of a periodic sequence and its period product, or min /
    median / max over ``--steps`` sampled steps of a random one and over its window
    products (:func:`stochmix.mixing.spectral_sequences.sequence_spectrum`). Without:
    the expected federated matrices. Any mistake raises ``ValueError`` naming the option.
    """
    if args.nodes < 1:
        raise ValueError(f"--nodes must be a positive integer, got {args.nodes}")
    if args.seed < 0:
        raise ValueError(f"--seed must be >= 0, got {args.seed}")
    if args.graph:
        _check_spectrum_graph_options(args)
        _spectrum_of_graph(args)
    else:
        _check_spectrum_federated_options(args)
        _spectrum_of_federated(args)
    return 0


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
            "decentralized methods ([[methods]], with a [graphs] table and full participation)",
            configs.DECENTRALIZED,
        ),
        ("participation ([participation])", configs.PROCESSES),
        ("graphs ([graphs])", configs.GRAPHS),
    )
    lines = ["configuration kinds (the kind = ... of each table; see stochmix.config):"]
    lines += [_wrapped(f"{what}: {', '.join(kinds)}", "  ") for what, kinds in lists]
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
        "--out", metavar="DIR", help="output folder (default ./runs/<name>-<time>-<n>)"
    )
    p_run.add_argument("--rounds", type=int, help="override the number of rounds (>= 0)")
    p_run.add_argument("--seed", type=int, help="run this one seed")
    p_run.add_argument(
        "--jobs",
        type=int,
        metavar="N",
        help="a study (a config with a [sweep] table): run its cells on N local processes"
        " (default 1)",
    )
    p_run.add_argument(
        "--address",
        metavar="ADDR",
        help="a study: run its cells on the Dask cluster whose scheduler is at ADDR, e.g."
        ' tcp://host:8786 (pip install "stochmix[cluster]")',
    )
    p_run.add_argument("--no-plot", action="store_true", help="skip the PNG")
    p_run.add_argument("--quiet", action="store_true", help="no progress line")
    p_run.set_defaults(func=command_run)

    p_spec = sub.add_parser(
        "spectrum",
        help="spectral summary of mixing matrices",
        description=(
            "With --graph: figures for every step of a periodic sequence and its period"
            " product, or min / median / max over sampled steps of a random sequence and"
            " over products of windows of steps. Without: the expected federated matrices"
            " under heterogeneous Bernoulli participation."
        ),
    )
    p_spec.add_argument(
        "--graph",
        choices=list(_GRAPHS),
        help="a graph sequence (default: federated expected matrices)",
    )
    p_spec.add_argument(
        "--nodes",
        type=int,
        default=16,
        help=f"nodes or clients (default 16; at most {GRAPH_NODES_LIMIT} with --graph)",
    )
    p_spec.add_argument(
        "--rules",
        nargs="+",
        help="with --graph, weight rules: natural, metropolis, row, column (default: row column)",
    )
    p_spec.add_argument(
        "--steps", type=int, help="with a random --graph, sampled steps (default 100)"
    )
    p_spec.add_argument(
        "--window",
        type=int,
        help="with --graph, steps per product (default: the period; ceil(log2 nodes) if random)",
    )
    p_spec.add_argument("--low", type=float, help="lowest participation p_i (default 0.1)")
    p_spec.add_argument("--high", type=float, help="highest participation p_i (default 0.9)")
    p_spec.add_argument("--samples", type=int, help="Monte Carlo rounds (default 2000)")
    p_spec.add_argument("--seed", type=int, default=0, help="seed of p_i, masks or graphs")
    p_spec.set_defaults(func=command_spectrum)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, TypeError, OSError) as error:
        message = str(error).splitlines()[0] if str(error) else type(error).__name__
        print(f"stochmix: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

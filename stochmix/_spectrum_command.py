"""``stochmix spectrum``: spectral summaries of a configuration's graphs, of a graph named
by flags, or of the expected federated matrices.

A graph, from ``--graph KIND`` or from a configuration's ``[graphs]`` table, is built by
:func:`stochmix.config.sections.graph_sequence`, the function ``stochmix run`` builds its
graphs with, so both commands describe the same matrices (message drops included).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ._names import GRAPH_ALIASES, renamed

__all__ = [
    "GRAPH_NODES_LIMIT",
    "command_spectrum",
    "graph_kind",
    "methods_rules",
    "spectrum_sequence",
]

#: Largest number of nodes of a graph that ``stochmix spectrum`` summarizes. The product of
#: a period or of a window of steps of a connected sequence is a dense n x n matrix (80 GB
#: at n = 10^5), and its summary costs O(n^3) (Dobrushin's coefficient compares every pair
#: of rows; the eigen-solves of rings, whose eigenvalues cluster near 1, fall back to dense
#: LAPACK, and above n = 4000 ARPACK alone does not converge).
GRAPH_NODES_LIMIT = 1000
_GRAPH_ONLY = ("rules", "steps", "window", "power", "chebyshev", "fastmix")
#: the options that ask for polynomials of W (stochmix.mixing.polynomial), in print order
_POLYNOMIALS = ("power", "chebyshev", "fastmix")
_FLAGS_ONLY = ("graph", "nodes", "p", "drops", "seed")
_FEDERATED_ONLY = ("low", "high", "samples")


def graph_kind(value: str) -> str:
    """``--graph``'s argparse type: the graph kind, an old spelling mapped to its name
    with a DeprecationWarning."""
    return renamed(value, "--graph", GRAPH_ALIASES, stacklevel=2)


def _given(args: argparse.Namespace, names: tuple[str, ...]) -> list[str]:
    """The options among ``names`` that were given on the command line (not defaulted)."""
    return [name for name in names if getattr(args, name, None) is not None]


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


def _random_kinds() -> tuple[str, ...]:
    """The graph kinds that take an edge probability ``p`` (drawn afresh every step)."""
    from .config import GRAPHS
    from .config.parsing import _parameters

    return tuple(kind for kind, factory in GRAPHS.items() if "p" in _parameters(factory))


def _flag_table(args: argparse.Namespace) -> dict:
    """The ``[graphs]`` table that ``--graph``, ``--nodes``, ``--p``, ``--drops`` and
    ``--seed`` describe."""
    from .config import GRAPHS
    from .config.parsing import _parameters

    if args.p is not None and args.graph not in _random_kinds():
        raise ValueError(
            f"--p applies to random graphs ({', '.join(_random_kinds())}), not --graph "
            f"{args.graph}, got --p {args.p}"
        )
    table: dict = {"kind": args.graph, "nodes": args.nodes}
    if args.p is not None:
        table["p"] = args.p
    if "seed" in _parameters(GRAPHS[args.graph]):
        table["seed"] = args.seed
    if args.drops is not None:
        table["drops"] = args.drops
        table["drop_seed"] = args.seed
    return table


def _config_table(path: str) -> tuple[dict, int]:
    """A configuration's ``[graphs]`` table and its number of nodes."""
    from .config import ConfigError
    from .config.reader import read

    raw = read(Path(path))
    graphs = raw.get("graphs")
    if not isinstance(graphs, dict):
        raise ConfigError(
            f"{path}: no [graphs] table; stochmix spectrum CONFIG summarizes the graphs of a "
            "configuration with decentralized methods (without one, use the flags)"
        )
    problem = raw.get("problem")
    nodes = problem.get("n_clients") if isinstance(problem, dict) else None
    if nodes is None:
        nodes = graphs.get("nodes")
    if isinstance(nodes, bool) or not isinstance(nodes, int) or nodes < 1:
        raise ConfigError(f"problem.n_clients must be a positive integer, got {nodes!r}")
    return graphs, nodes


def methods_rules(path: str) -> list[str]:
    """The weight rules the decentralized methods of the configuration at ``path`` mix
    with, as ``stochmix run`` resolves them (every rule argument of each method, in order,
    without repeats).

    Raises:
        ConfigError: a configuration that ``stochmix run`` refuses.
    """
    from .config import parse, plugins
    from .config.reader import read

    rules: list[str] = []
    for spec in parse(read(Path(path))).methods:
        if plugins.decentralized(spec.kind):
            rules += [spec.options[name] for name in plugins.method_needs(spec.kind)]
    return list(dict.fromkeys(rules))


def spectrum_sequence(args: argparse.Namespace) -> tuple:
    """The graph sequence ``stochmix spectrum`` summarizes, its resolved ``[graphs]`` table
    and the rule the table sets (None if none), from a configuration or from the flags.

    Raises:
        ValueError: one line naming the option or key and the bad value.
    """
    from .config import ConfigError
    from .config.sections import graph_sequence

    if args.config:
        table, nodes = _config_table(args.config)
        where = "graphs.nodes" if "nodes" in table else "problem.n_clients"
    else:
        table, nodes, where = _flag_table(args), args.nodes, "--nodes"
    if nodes > GRAPH_NODES_LIMIT:
        dense = 8 * nodes**2 / 1e9
        raise ValueError(
            f"{where} must be <= {GRAPH_NODES_LIMIT} with --graph, got {nodes}: a product"
            f" of steps is a dense n x n matrix ({dense:.3g} GB here) whose summary costs O(n^3)"
        )
    try:
        return graph_sequence(table, nodes)
    except ConfigError as error:
        if args.config:
            raise
        message = str(error).replace("graphs.drop_seed", "--seed")
        message = message.replace("graphs.", "--").replace("graphs:", f"--graph {args.graph}:")
        raise ValueError(message) from None


def _check_graph_options(args: argparse.Namespace, sequence, rule) -> None:
    """Validate the options that apply to a graph sequence; fill in the rules."""
    from .mixing import RULES

    if not args.rules and args.config:
        args.rules = methods_rules(args.config)
    args.rules = list(dict.fromkeys(args.rules or ([rule] if rule else ["row", "column"])))
    for name in args.rules:
        if name not in RULES:
            raise ValueError(f"--rules: unknown rule {name!r}; choose from {', '.join(RULES)}")
    what = f"--graph {args.graph}" if args.graph else f"the graphs of {args.config}"
    if args.steps is not None:
        if sequence.period is not None:
            raise ValueError(
                f"--steps applies to sequences without a period (random graphs, message "
                f"drops); {what} is periodic and every step of its period is shown, got"
                f" --steps {args.steps}"
            )
        _positive(args.steps, "--steps")
    for name in _POLYNOMIALS:
        degree = getattr(args, name, None)
        if degree is None:
            continue
        _positive(degree, f"--{name}")
        if sequence.period != 1:
            raise ValueError(
                f"--{name} applies to a static graph (a polynomial of one W); {what} changes "
                f"from step to step, got --{name} {degree}"
            )
    if args.window is not None:
        _positive(args.window, "--window")
        if sequence.period is None:
            from .mixing.spectral_sequences import STEPS

            steps = STEPS if args.steps is None else args.steps
            if args.window > steps:
                raise ValueError(f"--window must be <= --steps ({steps}), got {args.window}")


def _heading(args: argparse.Namespace, sequence, resolved: dict) -> str:
    """The first line's description of the graph sequence."""
    source = f"{args.config}: " if args.config else ""
    heading = f"{source}{resolved['kind']}, {resolved['nodes']} nodes"
    if "p" in resolved:
        heading += f", p {resolved['p']:.4g}"
    if "seed" in resolved:
        heading += f", seed {resolved['seed']}"
    if "drop_model" in resolved:
        rate = resolved.get("drops")
        heading += f", drops {rate:g}" if rate is not None else f", {resolved['drop_model']} drops"
    return heading


def _spectrum_of_graph(args: argparse.Namespace) -> None:
    """Print every step of a period (or min / median / max over sampled steps) and the
    products, for each rule; refuse a rule whose matrices break its promise."""
    from .mixing.spectral_sequences import describe, sequence_spectrum, sequence_table

    sequence, resolved, rule = spectrum_sequence(args)
    _check_graph_options(args, sequence, rule)
    spectra = []
    for name in args.rules:
        try:
            spectrum = sequence_spectrum(sequence, name, steps=args.steps, window=args.window)
        except ValueError as error:
            shown = f"--graph {args.graph}" if args.graph else args.config
            raise ValueError(f"{shown} --rules {name}: {error}") from None
        spectra.append(spectrum)
    polynomials = _polynomials(args, sequence)
    note = ""
    if sequence.period is None and args.window is None:
        note = " (--window; default min(ceil(log2 nodes), steps))"
    print(f"{_heading(args, sequence, resolved)}, {describe(spectra[0])}{note}")
    print(sequence_table(spectra))
    if polynomials:
        from .mixing.spectral import polynomial_table

        print(
            "polynomials p(W) of the graph's W: eigenvalues p(lambda_i) of W's lambda_i, "
            "K rounds of W's messages each (gap/round = 1 - SLEM^(1/K)):"
        )
        print(polynomial_table(polynomials))
    if args.config:
        _spectrum_of_activation(args, sequence)


def _polynomials(args: argparse.Namespace, sequence) -> dict:
    """The spectral figures of W and of each polynomial the options ask for (``--power``,
    ``--chebyshev``, ``--fastmix``), for every rule: label -> summary dict; an operator
    that cannot be built (a non-symmetric W for Chebyshev's default bounds) is one
    ValueError naming the option and the rule."""
    from .mixing import polynomial
    from .mixing.spectral import polynomial_summary

    asked = [(name, getattr(args, name)) for name in _POLYNOMIALS if getattr(args, name, None)]
    if not asked:
        return {}
    builders = {
        "power": polynomial.power,
        "chebyshev": polynomial.chebyshev,
        "fastmix": polynomial.fastmix,
    }
    labels = {"power": "W^{K}", "chebyshev": "chebyshev K={K}", "fastmix": "fastmix K={K}"}
    found = {}
    for rule in args.rules:
        W = sequence.matrix(0, rule)
        found[f"W ({rule})"] = polynomial_summary(W)
        for name, degree in asked:
            try:
                op = builders[name](W, degree)
            except ValueError as error:
                raise ValueError(f"--{name} {degree} --rules {rule}: {error}") from None
            found[f"{labels[name].format(K=degree)} ({rule})"] = polynomial_summary(op)
    return found


def _spectrum_of_activation(args: argparse.Namespace, sequence) -> None:
    """The expected activated matrices of step 0 under the configuration's activation
    (nothing when every node is active): ``E[D W + I - D]`` (pull) and ``E[W D + I - D]``
    (push) for every rule, or the gossip matrices' mean for an edge process."""
    import warnings

    import numpy as np

    from .config import parse
    from .config.reader import read
    from .mixing.activation import expected_activated_matrix
    from .mixing.spectral import summary_table

    raw = read(Path(args.config))
    table = raw.get("activation", raw.get("participation", {}))
    if not isinstance(table, dict) or table.get("kind", "full") == "full":
        return  # every node in every iteration: nothing is activated
    with warnings.catch_warnings():  # the configuration's warnings were shown once already
        warnings.simplefilter("ignore")
        process = parse(raw).participation
    p = process.probabilities
    if getattr(process, "activates", "nodes") != "edges" and p is not None and np.all(p == 1):
        return
    matrices = {}
    for name in args.rules:
        W = sequence.matrix(0, name)
        for direction in ("pull", "push"):
            label = "D W + I - D" if direction == "pull" else "W D + I - D"
            if getattr(process, "activates", "nodes") == "edges":
                label = "W_E (activated edges)"
            matrices[f"E[{label}] {name}"] = expected_activated_matrix(
                W, process, direction, rounds=args.samples or 2000, seed=args.seed or 0
            )
            if getattr(process, "activates", "nodes") == "edges":
                break
    step = "step 0 of the sequence" if sequence.period != 1 else "the graph"
    print(f"expected activated matrices under {process!r} ({step}):")
    print(summary_table(matrices))


def _check_federated_options(args: argparse.Namespace) -> None:
    """Validate the options of ``stochmix spectrum`` without a graph; fill in defaults."""
    _refuse_given(
        args,
        _GRAPH_ONLY,
        "applies with --graph or a configuration only (without them the federated expected "
        "matrices are shown)",
    )
    _refuse_given(args, ("p", "drops"), "applies with --graph only")
    args.low = 0.1 if args.low is None else args.low
    args.high = 0.9 if args.high is None else args.high
    args.samples = 2000 if args.samples is None else args.samples
    for option, value in (("--low", args.low), ("--high", args.high)):
        if not 0 < value <= 1:
            raise ValueError(f"{option} must lie in (0, 1], got {value}")
    if args.high < args.low:
        raise ValueError(f"--high must be >= --low ({args.low}), got {args.high}")
    _positive(args.samples, "--samples")


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

    With a configuration or ``--graph``: every step of a periodic sequence and its period
    product, or min / median / max over ``--steps`` sampled steps of a random one and over
    its window products (:func:`stochmix.mixing.spectral_sequences.sequence_spectrum`).
    Without: the expected federated matrices. Any mistake raises ``ValueError`` naming
    the option or key.
    """
    if args.config:
        _refuse_given(
            args, _FLAGS_ONLY + _FEDERATED_ONLY, f"is set by the configuration {args.config}"
        )
        _spectrum_of_graph(args)
        return 0
    args.nodes = 16 if args.nodes is None else args.nodes
    args.seed = 0 if args.seed is None else args.seed
    if args.nodes < 1:
        raise ValueError(f"--nodes must be a positive integer, got {args.nodes}")
    if args.seed < 0:
        raise ValueError(f"--seed must be >= 0, got {args.seed}")
    if args.graph:
        _refuse_given(
            args,
            _FEDERATED_ONLY,
            f"applies without --graph (federated participation) and is not used with --graph "
            f"{args.graph}",
        )
        _spectrum_of_graph(args)
    else:
        _check_federated_options(args)
        _spectrum_of_federated(args)
    return 0


def add_spectrum_parser(sub) -> None:
    """Add ``stochmix spectrum`` and its options to the subparsers ``sub``."""
    from .config import GRAPHS

    p_spec = sub.add_parser(
        "spectrum",
        help="spectral summary of mixing matrices",
        description=(
            "With a configuration (its [graphs] table, message drops included) or --graph:"
            " figures for every step of a periodic sequence and its period product, or min /"
            " median / max over sampled steps of a random sequence and over products of"
            " windows of steps. Without: the expected federated matrices under heterogeneous"
            " Bernoulli participation."
        ),
    )
    p_spec.add_argument(
        "config", nargs="?", help="experiment.toml whose [graphs] to summarize (optional)"
    )
    p_spec.add_argument(
        "--graph",
        type=graph_kind,
        choices=list(GRAPHS),
        metavar="KIND",
        help=f"a graph sequence, named as graphs.kind: {', '.join(GRAPHS)} (default: the"
        " federated expected matrices)",
    )
    p_spec.add_argument(
        "--nodes",
        type=int,
        help=f"nodes or clients (default 16; at most {GRAPH_NODES_LIMIT} with --graph)",
    )
    p_spec.add_argument(
        "--p", type=float, help="with a random --graph, the edge probability (graphs.p)"
    )
    p_spec.add_argument(
        "--drops", type=float, help="with --graph, the probability that a message is dropped"
    )
    p_spec.add_argument(
        "--rules",
        "--rule",
        nargs="+",
        help="weight rules: natural, metropolis, row, column, fastest, fdla (fastest and fdla"
        " solve an SDP, with stochmix[analysis]; default: graphs.rule, or row column)",
    )
    p_spec.add_argument("--steps", type=int, help="without a period, sampled steps (default 100)")
    p_spec.add_argument(
        "--window",
        type=int,
        help="steps per product (default: the period; ceil(log2 nodes) without one)",
    )
    for name, what in (
        ("power", "W^K (multi-consensus)"),
        ("chebyshev", "the normalised Chebyshev polynomial of degree K"),
        ("fastmix", "FastMix's polynomial of K rounds (Mudag)"),
    ):
        p_spec.add_argument(
            f"--{name}",
            type=int,
            metavar="K",
            help=f"with a static --graph, also the spectrum of {what} of each rule's W"
            " (stochmix.mixing.polynomial): lambda_2, SLEM, gap and gap per round",
        )
    p_spec.add_argument("--low", type=float, help="lowest participation p_i (default 0.1)")
    p_spec.add_argument("--high", type=float, help="highest participation p_i (default 0.9)")
    p_spec.add_argument("--samples", type=int, help="Monte Carlo rounds (default 2000)")
    p_spec.add_argument("--seed", type=int, help="seed of p_i, masks, graphs and drops (default 0)")
    p_spec.set_defaults(func=command_spectrum)

"""``stochmix certify``: the certified worst-case rate of each method of a configuration
(:func:`stochmix.analysis.certificates.certify`), one row per method and step, and with
``--tune`` the step that minimises it."""

from __future__ import annotations

import argparse

import numpy as np

from .analysis.certificates.certify import MAX_CLIENTS
from .reporting import format_table

__all__ = ["add_certify_parser", "class_of_problem", "command_certify", "sigma_of_graphs"]

COLUMNS = (
    ("method", "method", "s"),
    ("lr", "lr", ".4g"),
    ("analysis", "analysis", "s"),
    ("rate", "rate", ".6f"),
    ("iterations", "rounds to 1e-6", ".0f"),
    ("status", "status", "s"),
    ("seconds", "seconds", ".2f"),
)
_FEDERATED_CLIENTS = 4
#: period x nodes up to which a periodic sequence is certified over its own matrices (the
#: whole-network SDP: about a minute at 32); beyond, over sigma = max_k ||W_k - 11^T/n||
_WHOLE_PERIOD_LIMIT = 32


def add_certify_parser(sub) -> None:
    """Add ``stochmix certify`` and its options to the subparsers ``sub``."""
    p = sub.add_parser(
        "certify",
        help="certified worst-case rates of a configuration's methods",
        description=(
            "For each method and step of a configuration: the worst-case linear rate over"
            " every objective whose parts are L-smooth and mu-strongly convex (L and mu read"
            " off the configuration's problem unless given), certified by a semidefinite"
            " program (needs cvxpy: pip install 'stochmix[analysis]'). Decentralized"
            " methods: over the configuration's own graphs when they have a period, else"
            " over every W with ||W - 11^T/n|| <= sigma (sigma the largest over sampled"
            " steps, or --sigma). Federated methods: under full participation, with"
            f" --clients heterogeneous clients (default {_FEDERATED_CLIENTS})."
            " A configuration with [activation] (random node or edge activation) is refused:"
            " the certificates are of the synchronous recursion."
        ),
    )
    p.add_argument("config", help="experiment.toml")
    p.add_argument("--L", dest="smoothness", type=float, help="smoothness L of every part")
    p.add_argument("--mu", type=float, help="strong convexity mu of every part")
    p.add_argument(
        "--sigma",
        type=float,
        help=(
            "certify decentralized methods over every W with ||W - 11^T/n|| <= sigma;"
            " decentralized methods only"
        ),
    )
    p.add_argument(
        "--clients",
        type=int,
        help=(
            f"clients of the federated certificates (default {_FEDERATED_CLIENTS}, at most "
            f"{MAX_CLIENTS}); federated methods only"
        ),
    )
    p.add_argument("--tune", action="store_true", help="also the step that minimises the rate")
    p.set_defaults(func=command_certify)


def class_of_problem(problem) -> tuple[float, float]:
    """``(L, mu)`` of the class the problem's parts lie in: the extreme eigenvalues of the
    parts' Hessians where they are known (quadratics, least squares), else the problem's
    ``smoothness`` and ``strong_convexity``."""
    try:
        from .analysis.linear.gradients import affine_gradients

        h = affine_gradients(problem).hessians
    except TypeError:
        big, small = problem.smoothness, problem.strong_convexity
        if big is None or small is None:
            raise ValueError(
                f"the problem ({type(problem).__name__}) does not know its L and mu: give "
                "--L and --mu"
            ) from None
        return float(big), float(small)
    eig = h if h.ndim == 2 else np.linalg.eigvalsh(h)
    return float(eig.max()), float(eig.min())


def sigma_of_graphs(graphs, rule: str, steps: int = 100) -> float:
    """The largest ``||W_k - 11^T/n||_2`` over one period, or over ``steps`` sampled steps."""
    count = graphs.period or steps
    n = graphs.n_nodes
    worst = 0.0
    for k in range(count):
        w = graphs.matrix(k, rule)
        w = w.toarray() if hasattr(w, "toarray") else np.asarray(w)
        worst = max(worst, float(np.linalg.norm(w - 1.0 / n, 2)))
    return worst


def command_certify(args: argparse.Namespace) -> int:
    """``stochmix certify``: every option checked first, then one table."""
    from . import config as configs
    from .algorithms import DecentralizedMethod
    from .analysis.certificates import certify, tune
    from .analysis.certificates.lmi import require_cvxpy

    if args.sigma is not None and not 0 <= args.sigma < 1:
        raise ValueError(f"--sigma must be in [0, 1), got {args.sigma}")
    if args.clients is not None and not 1 <= args.clients <= MAX_CLIENTS:
        raise ValueError(
            f"--clients must be an integer in [1, {MAX_CLIENTS}] (the whole-round certificate "
            f"grows with the clients: SCAFFOLD takes about two minutes at 16), got {args.clients}"
        )
    experiment = configs.load(args.config)
    _check_applies(experiment, args, DecentralizedMethod)
    if args.smoothness is None or args.mu is None:
        big, small = class_of_problem(experiment.problem)
    big = big if args.smoothness is None else args.smoothness
    small = small if args.mu is None else args.mu
    if not 0 < small <= big:
        raise ValueError(
            f"mu must be in (0, L], got L={big:g}, mu={small:g} (a part that is not strongly"
            " convex: give --mu)"
        )
    require_cvxpy()
    clients = _FEDERATED_CLIENTS if args.clients is None else args.clients
    rows = []
    print(f"class: L = {big:.6g}, mu = {small:.6g} (kappa = {big / small:.4g})")
    notes = []
    for spec in experiment.methods:
        try:
            options, analysis = _options(
                spec.build(spec.lrs[0]), args, clients, DecentralizedMethod
            )
        except _Skipped as skipped:
            notes.append(str(skipped))
            rows.append({"method": spec.label, "status": "skipped (see below)"})
            continue
        for lr in spec.lrs:
            found = certify(spec.build(lr), L=big, mu=small, **options)
            rows.append(_row(spec.label, lr, analysis, found))
        if args.tune and rows[-1]["status"] != "inexact":
            best = tune(spec.build, L=big, mu=small, **options)  # the method built anew
            rows.append(_row(spec.label, best.value, analysis + ", tuned", best.certificate))
    print(format_table(rows, COLUMNS))
    for note in notes:
        print(f"note: {note}")
    return 0


def _check_applies(experiment, args, decentralized_type) -> None:
    """Refuse, naming it, what the certificates would otherwise ignore: an ``[activation]``
    (or a partial ``[participation]``) of decentralized methods, ``--sigma`` without a
    decentralized method, ``--clients`` without a federated one."""
    kinds = [isinstance(spec.build(spec.lrs[0]), decentralized_type) for spec in experiment.methods]
    table = experiment.tables.get("participation", {})
    kind = table.get("kind", "full")
    if any(kinds) and kind != "full":
        name = "activation" if "activation" in _raw(args.config) else "participation"
        raise ValueError(
            f"[{name}] (kind = {kind!r}): the certificates are of the synchronous recursion, "
            "every node active in every iteration, and a random activation has no fixed "
            "pattern to certify (certify takes fixed patterns only), so the table would be "
            f"ignored; remove [{name}] to certify the synchronous methods"
        )
    if args.sigma is not None and not any(kinds):
        raise ValueError(
            "--sigma applies to decentralized methods (the class of their mixing matrices); "
            "this configuration's methods are all federated"
        )
    if args.clients is not None and all(kinds):
        raise ValueError(
            "--clients applies to federated methods; this configuration's methods are all "
            "decentralized (their nodes are those of [graphs])"
        )


def _raw(path) -> dict:
    from .config.reader import read

    return read(path)


class _Skipped(Exception):
    """A method the command cannot certify with the configuration's graphs as they are."""


def _options(method, args, clients: int, decentralized_type) -> tuple[dict, str]:
    if not isinstance(method, decentralized_type):
        return {"n_clients": clients}, f"full participation, {clients} clients"
    if args.sigma is not None:
        return {"mixing": args.sigma}, f"sigma = {args.sigma:g}"
    graphs = method.graphs
    sigma = sigma_of_graphs(graphs, _rule(method))
    if graphs.period == 1:  # one matrix: split by its eigenvalues when symmetric
        return {}, f"own graph (sigma {sigma:.4g})"
    if graphs.period is not None and graphs.period * graphs.n_nodes <= _WHOLE_PERIOD_LIMIT:
        return {}, f"own graphs, period {graphs.period} (sigma {sigma:.4g})"
    if sigma >= 1:
        raise _Skipped(
            f"{method.name}: a step of its graphs has ||W_k - 11^T/n|| = {sigma:.4g} >= 1 (one "
            "peer per step, or a disconnected step) and its period is too long for the "
            f"whole-network certificate (period x nodes > {_WHOLE_PERIOD_LIMIT}): give --sigma"
        )
    where = "sampled" if graphs.period is None else f"max over the period of {graphs.period}"
    return {"mixing": sigma}, f"sigma = {sigma:.4g} ({where})"


def _rule(method) -> str:
    for attribute in type(method).needs:
        return getattr(method, attribute)
    return "metropolis"


def _row(label: str, lr: float, analysis: str, found) -> dict:
    return {
        "method": label,
        "lr": lr,
        "analysis": analysis,
        "rate": found.rate,
        "iterations": found.iterations() if found.certified else None,
        "status": found.status,
        "seconds": found.seconds,
    }

"""A configuration read: :func:`parse` of a dict, :func:`load` of a TOML file, and the
embedded experiment of ``stochmix run`` (:func:`default`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._toml import tomllib
from ..engine.runner.arguments import checked_clock
from ..problems import LeastSquares
from . import plugins
from .clock import clock_table
from .experiment import Experiment
from .output import check_axis, output_table
from .parsing import DEFAULT_SEED, ConfigError
from .registry import EVERY_CLIENT
from .sections import _graphs, _method, _method_tables, _participation, _problem
from .settings import TOP_LEVEL, _lr_choice, _run_shape, _settings, _slug

__all__ = [
    "default",
    "default_table",
    "load",
    "parse",
    "read",
]


def parse(raw: dict, default_name: str = "experiment") -> Experiment:
    """Build an :class:`Experiment` from a configuration dict (see :mod:`stochmix.config`).

    Raises:
        ConfigError: one line naming the key and the bad value.
    """
    if not isinstance(raw, dict):
        raise ConfigError("the configuration must be a table")
    unknown = sorted(set(raw) - TOP_LEVEL)
    if unknown:
        raise ConfigError(
            f"unknown top-level key {unknown[0]!r}; allowed keys: {sorted(TOP_LEVEL)}"
        )
    name, rounds, seeds, backend = _run_shape({"name": default_name, **raw})
    settings = _settings(raw, backend)
    lr_choice = _lr_choice(raw)
    output = output_table(raw) if "output" in raw else {}
    problem, problem_table = _problem(raw)
    methods_raw = _method_tables(raw)
    kinds = [t.get("kind") for t in methods_raw if isinstance(t, dict)]
    decentralized = [k for k in kinds if isinstance(k, str) and plugins.decentralized(k)]
    everyone = [k for k in kinds if isinstance(k, str) and k in EVERY_CLIENT]
    graphs, graphs_table, graph_rule = _graphs(raw, problem.n_clients, decentralized)
    process, participation_table = _participation(
        raw, problem.n_clients, everyone, decentralized, graphs
    )
    graph_kind = graphs_table.get("kind")
    methods = [
        _method(i, table, graphs, graph_kind, graph_rule) for i, table in enumerate(methods_raw)
    ]
    for spec in methods:
        spec.channel_noise = float(graphs_table.get("channel_noise", 0.0))
    for index, spec in enumerate(methods):  # what a method refuses to run under, now
        try:
            spec.build(spec.lrs[0]).check_problem(problem)
        except ValueError as error:
            raise ConfigError(f"methods[{index}] ({spec.label}): {error}") from None
        try:
            spec.build(spec.lrs[0]).check_participation(process)
        except ValueError as error:
            if spec.kind not in decentralized:
                raise ConfigError(f"methods[{index}] ({spec.label}): {error}") from None
            table = "activation" if "activation" in raw else "participation"
            raise ConfigError(
                f"{table}.kind = {participation_table.get('kind')!r} cannot drive "
                f"{spec.label}: {str(error).removeprefix('participation: ')}"
            ) from None
    labels = [m.label for m in methods]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"methods need distinct labels (add label = ...), got {labels}")
    tables = {"problem": problem_table, "participation": participation_table}
    if graphs is not None:
        tables["graphs"] = graphs_table
    clock, clock_resolved = clock_table(raw)
    if clock is not None:
        tables["clock"] = clock_resolved
        for index, spec in enumerate(methods):  # what the clock cannot drive, now
            try:
                checked_clock(clock, spec.build(spec.lrs[0]), process)
            except (TypeError, ValueError) as error:
                hint = _clock_hint(spec, clock)
                raise ConfigError(
                    f"clock: methods[{index}] ({spec.label}): {error}{hint}"
                ) from None
    exp = Experiment(
        name, problem, process, methods, rounds, seeds, backend, settings, tables, lr_choice,
        clock, output,
    )  # fmt: skip
    if output:
        check_axis(output["x"], exp)
    return exp


def _clock_hint(spec, clock) -> str:
    """How to compare an asynchronous method with the deadline-based ones, where a
    ``[clock]`` with a deadline (or availability) refuses it: one clock per configuration,
    so a study that sweeps the whole ``clock`` and ``methods`` tables together."""
    if not getattr(spec.build(spec.lrs[0]), "asynchronous", False):
        return ""
    if clock.deadline is None and clock.availability is None:
        return ""
    return (
        "; a configuration has one [clock]: to compare an asynchronous method with "
        'deadline-based ones, run a study with mode = "zip" that sweeps the whole tables '
        "clock and methods together (a cell with a deadline and its methods, a cell "
        "without one and the asynchronous ones; see the studies guide)"
    )


def load(path) -> Experiment:
    """Read and parse a TOML configuration file (named after the file unless it says
    ``name = ...``)."""
    path = Path(path)
    return parse(read(path), default_name=_slug(path.stem))


def read(path) -> dict:
    """A TOML configuration file as a dict, not yet parsed (see :func:`load`).

    Raises:
        ConfigError: the file is missing, unreadable, not UTF-8 or not TOML.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {error.start} is {error.object[error.start]:#04x})"
        ) from None
    except OSError as error:
        raise ConfigError(f"{path}: cannot be read ({error.strerror or error})") from None
    return raw


def default_table() -> dict:
    """The embedded experiment of ``stochmix run`` as a configuration dict: least squares
    over 20 clients with Bernoulli participation between 0.1 and 0.9, FedAvg against FOCUS.

    FOCUS's server step follows the *sum* of the clients' gradients, so its step is
    0.5 / (N L); FedAvg, whose server averages, takes N times that.
    """
    n = 20
    problem: dict[str, Any] = {
        "kind": "least_squares",
        "n_clients": n,
        "dim": 10,
        "rows_per_client": 20,
        "heterogeneity": 2.0,
        "seed": DEFAULT_SEED,
    }
    smoothness = LeastSquares.random(**{k: v for k, v in problem.items() if k != "kind"})
    lr = 0.5 / (n * smoothness.smoothness)
    return {
        "name": "default",
        "rounds": 800,
        "seeds": [DEFAULT_SEED],
        "problem": problem,
        "participation": {"kind": "bernoulli", "low": 0.1, "high": 0.9, "seed": DEFAULT_SEED},
        "methods": [
            {"kind": "fedavg", "label": "FedAvg", "lr": n * lr, "local_steps": 5},
            {"kind": "focus", "label": "FOCUS", "lr": lr, "local_steps": 5},
        ],
    }


def default() -> Experiment:
    """The embedded experiment of ``stochmix run`` (see :func:`default_table`)."""
    return parse(default_table(), default_name="default")

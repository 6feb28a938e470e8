"""Experiment configurations: a TOML file (or a dict) turned into problems, processes and
methods, with errors that name the key and the allowed values.

A configuration::

    name = "focus-vs-fedavg"
    rounds = 500
    seeds = [0, 1, 2]            # or seed = 0
    backend = "numpy"            # or "torch" (with device = "cuda" ...)
    compiled = "auto"            # numpy backend: true | false | "auto" (see stochmix.run)

    [problem]
    kind = "least_squares"       # quadratic | least_squares | logistic
    n_clients = 20
    dim = 10
    seed = 0                     # other keys go to the problem's random(...) generator

    [participation]
    kind = "bernoulli"           # full | uniform | weighted | bernoulli | regularized |
    low = 0.1                    #   periodic | markov
    high = 0.9

    [[methods]]
    kind = "fedavg"
    lr = 0.01                    # a list is a grid: every value runs, the best is reported
    local_steps = 5

    [[methods]]
    kind = "focus"
    lr = [1e-4, 3e-4, 1e-3]
    local_steps = 5
"""

from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass, field
from pathlib import Path

from . import algorithms, participation, problems

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class ConfigError(ValueError):
    """A configuration that cannot be run; the message names the key."""


PROBLEMS = {
    "quadratic": problems.Quadratic.random,
    "least_squares": problems.LeastSquares.random,
    "logistic": problems.Logistic.random,
}

METHODS = {
    "fedavg": algorithms.FedAvg,
    "fedau": lambda **kw: algorithms.FedAvg(weights="fedau", **kw),
    "amplified_fedavg": algorithms.AmplifiedFedAvg,
    "fedstale": algorithms.FedStale,
    "fedvarp": algorithms.FedVARP,
    "mifa": algorithms.MIFA,
    "scaffold": algorithms.SCAFFOLD,
    "focus": algorithms.FOCUS,
}


def _bernoulli(n_clients, p=None, low=None, high=None, seed=None):
    if p is not None:
        return participation.Bernoulli(p, n_clients=n_clients)
    if low is None or high is None:
        raise ConfigError("participation: bernoulli needs p, or low and high")
    return participation.Bernoulli.heterogeneous(n_clients, low, high, seed=seed)


PROCESSES = {
    "full": participation.Full,
    "uniform": participation.UniformSample,
    "weighted": lambda n_clients, **kw: participation.WeightedSample(**kw),
    "bernoulli": _bernoulli,
    "regularized": participation.Regularized,
    "periodic": lambda n_clients, **kw: participation.Periodic(n_clients=n_clients, **kw),
    "markov": lambda n_clients, **kw: participation.Markov(n_clients=n_clients, **kw),
}


@dataclass
class MethodSpec:
    """One method of a configuration: its kind, fixed options and its lr grid."""

    kind: str
    options: dict
    lrs: list[float]
    label: str

    def build(self, lr: float):
        return METHODS[self.kind](lr=lr, **self.options)


@dataclass
class Experiment:
    """A parsed configuration."""

    name: str
    problem: object
    participation: object
    methods: list[MethodSpec]
    rounds: int
    seeds: list[int]
    backend: str = "numpy"
    run_options: dict = field(default_factory=dict)


def _section(raw: dict, key: str) -> dict:
    if key not in raw:
        raise ConfigError(f"missing [{key}] section")
    value = raw[key]
    if not isinstance(value, dict):
        raise ConfigError(f"{key} must be a table, got {type(value).__name__}")
    return dict(value)


def _kind(table: dict, where: str, allowed) -> str:
    kind = table.pop("kind", None)
    if kind not in allowed:
        raise ConfigError(f"{where}.kind must be one of {sorted(allowed)}, got {kind!r}")
    return kind


def _call(factory, where: str, **kwargs):
    """Call a constructor, turning unknown keys and bad values into errors naming them."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        params = {}
    if params and not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        unknown = sorted(set(kwargs) - set(params))
        if unknown:
            allowed = sorted(k for k in params if k not in ("n_clients", "lr"))
            raise ConfigError(f"{where}: unknown key {unknown[0]!r}; allowed keys: {allowed}")
    missing = [
        k
        for k, p in params.items()
        if p.default is p.empty
        and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        and k not in kwargs
    ]
    if missing:
        raise ConfigError(f"{where}.{missing[0]} is required")
    try:
        return factory(**kwargs)
    except ConfigError:
        raise
    except (TypeError, ValueError) as error:
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
        raise ConfigError(f"{where}: {first_line}") from None


TOP_LEVEL = {
    "name",
    "rounds",
    "seed",
    "seeds",
    "backend",
    "device",
    "compiled",
    "problem",
    "participation",
    "methods",
    "metrics",
}


def parse(raw: dict, default_name: str = "experiment") -> Experiment:
    """Build an :class:`Experiment` from a configuration dict (see the module docstring)."""
    if not isinstance(raw, dict):
        raise ConfigError("the configuration must be a table")
    unknown = sorted(set(raw) - TOP_LEVEL)
    if unknown:
        raise ConfigError(
            f"unknown top-level key {unknown[0]!r}; allowed keys: {sorted(TOP_LEVEL)}"
        )
    name = str(raw.get("name", default_name))
    rounds = raw.get("rounds", 300)
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1:
        raise ConfigError(f"rounds must be a positive integer, got {rounds!r}")
    if "seeds" in raw and "seed" in raw:
        raise ConfigError("give seed or seeds, not both")
    seeds = raw.get("seeds", [raw.get("seed", 0)])
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) for s in seeds):
        raise ConfigError(f"seeds must be a non-empty list of integers, got {seeds!r}")
    backend = raw.get("backend", "numpy")
    if backend not in ("numpy", "torch"):
        raise ConfigError(f"backend must be one of ['numpy', 'torch'], got {backend!r}")
    run_options = {}
    if "device" in raw:
        run_options["device"] = str(raw["device"])
    if "metrics" in raw:
        run_options["metrics"] = tuple(raw["metrics"])
    if "compiled" in raw:
        compiled = raw["compiled"]
        if compiled not in (True, False, "auto"):
            raise ConfigError(f'compiled must be true, false or "auto", got {compiled!r}')
        if compiled is True and backend != "numpy":
            raise ConfigError('compiled = true needs backend = "numpy"')
        run_options["compiled"] = compiled

    ptable = _section(raw, "problem")
    pkind = _kind(ptable, "problem", PROBLEMS)
    problem = _call(PROBLEMS[pkind], "problem", **ptable)

    qtable = _section(raw, "participation")
    qkind = _kind(qtable, "participation", PROCESSES)
    process = _call(PROCESSES[qkind], "participation", n_clients=problem.n_clients, **qtable)

    methods_raw = raw.get("methods")
    if not isinstance(methods_raw, list) or not methods_raw:
        raise ConfigError("methods must be a non-empty list of [[methods]] tables")
    methods = []
    for i, table in enumerate(methods_raw):
        where = f"methods[{i}]"
        if not isinstance(table, dict):
            raise ConfigError(f"{where} must be a table")
        table = dict(table)
        kind = _kind(table, where, METHODS)
        label = str(table.pop("label", kind))
        if "lr" not in table:
            raise ConfigError(f"{where}.lr is required (a number or a list of numbers)")
        lrs = table.pop("lr")
        lrs = lrs if isinstance(lrs, list) else [lrs]
        if not lrs or not all(isinstance(v, (int, float)) and v > 0 for v in lrs):
            raise ConfigError(
                f"{where}.lr must be a positive number or a list of them, got {lrs!r}"
            )
        spec = MethodSpec(kind, table, [float(v) for v in lrs], label)
        _call(spec.build, where, lr=spec.lrs[0])  # fail now, not mid-run
        methods.append(spec)
    labels = [m.label for m in methods]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"methods need distinct labels (add label = ...), got {labels}")
    return Experiment(name, problem, process, methods, rounds, seeds, backend, run_options)


def load(path) -> Experiment:
    """Read and parse a TOML configuration file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML: {error}") from None
    return parse(raw, default_name=path.stem)


def default() -> Experiment:
    """The embedded experiment of ``stochmix run``: least squares over 20 clients with
    Bernoulli participation between 0.1 and 0.9, FedAvg against FOCUS.

    FOCUS's server step follows the *sum* of the clients' gradients, so its step is
    0.5 / (N L); FedAvg, whose server averages, takes N times that.
    """
    n = 20
    problem = problems.LeastSquares.random(n, 10, rows_per_client=20, heterogeneity=2.0, seed=0)
    process = participation.Bernoulli.heterogeneous(n, 0.1, 0.9, seed=0)
    lr = 0.5 / (n * problem.smoothness)
    methods = [
        MethodSpec("fedavg", {"local_steps": 5}, [n * lr], "FedAvg"),
        MethodSpec("focus", {"local_steps": 5}, [lr], "FOCUS"),
    ]
    return Experiment("default", problem, process, methods, 800, [0])

"""Experiment configurations: a TOML file (or a dict) turned into problems, processes, graph
sequences and methods, with errors that name the key and the bad value.

A configuration::

    name = "focus-vs-fedavg"
    rounds = 500                 # >= 0 (0 records the starting point only)
    seeds = [0, 1, 2]            # or seed = 0; default [0]: the run seeds (participation)
    backend = "numpy"            # or "torch" (with device = "cuda" ...)
    compiled = "auto"            # numpy backend: true | false | "auto" (see stochmix.run)
    dtype = "float64"            # or "float32"
    metrics = ["distance", "objective", "gradient_norm", "consensus"]
    evaluate_every = "auto"      # or k: metrics that cost a pass over all clients every k rounds
    storage = "auto"             # or "full" | "compact": node rows nothing reads left out

    [problem]
    kind = "least_squares"       # quadratic | least_squares | logistic
    n_clients = 20
    dim = 10
    seed = 0                     # other keys go to the problem's random(...) generator

    [participation]              # optional: full participation by default
    kind = "bernoulli"           # full | uniform | weighted | bernoulli | regularized |
    low = 0.1                    #   periodic | markov
    high = 0.9
    seed = 0                     # draws the p_i between low and high
    draws = "fast"               # uniform, bernoulli: or "legacy" (stochmix 0.1.0 streams)

    [[methods]]
    kind = "fedavg"              # see METHODS
    lr = 0.01                    # a list is a grid: every value runs, the best is reported
    local_steps = 5

    [[methods]]
    kind = "focus"
    lr = [1e-4, 3e-4, 1e-3]
    local_steps = 5

Decentralized methods (``dgd``, ``gradient_tracking``, ``push_pull``, ``push_sum``,
``extra``, ``nids``, ``exact_diffusion``, ``d2``, ``push_diging``, ``kgt``, ``choco``;
``form`` picks a
method's variant where it has several) mix over
the graph sequence of a ``[graphs]`` table and run every node in every iteration, so their
participation is ``full`` (the default; another kind is refused)::

    [graphs]
    kind = "erdos_renyi"         # one_peer_exponential | directed_ring | erdos_renyi |
                                 #   random_directed | cycle | complete (see GRAPHS)
    nodes = 16                   # default: problem.n_clients (must equal it)
    rule = "metropolis"          # optional: the weight rule of dgd / gradient_tracking /
                                 #   extra / nids / exact_diffusion / d2 / push_sum /
                                 #   push_diging (push_pull: row_rule, column_rule)
    p = 0.3                      # erdos_renyi and random_directed: edge probability,
    seed = 0                     #   the graphs' seed, static = true (one graph throughout)
    drops = 0.1                  # optional: message drops (stochmix.mixing.MessageDrops),
    drop_symmetric = true        #   a link's two directions together; drop_model =
    drop_seed = 0                #   "gilbert-elliott" takes drop_p_good_to_bad,
                                 #   drop_p_bad_to_good, drop_in_good, drop_in_bad instead
                                 #   of drops; drop_lost_weight = "receiver" | "sender"
    channel_noise = 0.01         # optional: N(0, 0.01^2) added to every message a
                                 #   method's mixing sends (algorithms.ChannelNoise)

By default dgd, gradient_tracking, extra, nids, exact_diffusion, d2, choco and kgt
(:data:`AVERAGING`)
take the graph's doubly stochastic weights
(:data:`DOUBLY_STOCHASTIC_RULE`), the others their own default rules; a rule whose matrices
are not what the method needs (:data:`RULE_NEEDS`) is refused.

**Every random choice has a seed, 0 by default** (:data:`DEFAULT_SEED`): the problem's
generator (``problem.seed``), heterogeneous Bernoulli probabilities
(``participation.seed``), random graph sequences (``graphs.seed``) and the participation
stream of each run (``seeds``; a periodic process without ``offset`` draws it from there).
:meth:`Experiment.resolved` writes the configuration back with every default and seed
filled in, and :func:`dumps` gives it as TOML that :func:`load` reads back to the same runs.
"""

from __future__ import annotations

import inspect
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import networkx as nx
import numpy as np

from . import algorithms, mixing, participation, problems
from .engine.result import METRICS

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class ConfigError(ValueError):
    """A configuration that cannot be run; the message names the key."""


#: The seed of every random choice a configuration leaves unset.
DEFAULT_SEED = 0

PROBLEMS = {
    "quadratic": problems.Quadratic.random,
    "least_squares": problems.LeastSquares.random,
    "logistic": problems.Logistic.random,
}

#: Federated methods: kind -> (constructor, arguments the kind fixes).
FEDERATED = {
    "fedavg": (algorithms.FedAvg, {}),
    "fedau": (algorithms.FedAvg, {"weights": "fedau"}),
    "amplified_fedavg": (algorithms.AmplifiedFedAvg, {}),
    "fedstale": (algorithms.FedStale, {}),
    "fedvarp": (algorithms.FedVARP, {}),
    "mifa": (algorithms.MIFA, {}),
    "scaffold": (algorithms.SCAFFOLD, {}),
    "focus": (algorithms.FOCUS, {}),
    "fedavgm": (algorithms.FedAvgM, {}),
    "feddyn": (algorithms.FedDyn, {}),
    "scaffnew": (algorithms.Scaffnew, {}),
    "fedadam": (algorithms.FedAdam, {}),
    "fedyogi": (algorithms.FedYogi, {}),
    "fedadagrad": (algorithms.FedAdagrad, {}),
    "fedprox": (algorithms.FedProx, {}),
}

#: Federated methods whose papers run every client in every round: like the decentralized
#: ones they take ``full`` participation only.
EVERY_CLIENT = ("scaffnew",)

#: Decentralized methods (they take the [graphs] sequence): kind -> (constructor, fixed).
DECENTRALIZED = {
    "dgd": (algorithms.DGD, {}),
    "gradient_tracking": (algorithms.GradientTracking, {}),
    "push_pull": (algorithms.PushPull, {}),
    "push_sum": (algorithms.PushSum, {}),
    "extra": (algorithms.EXTRA, {}),
    "nids": (algorithms.NIDS, {}),
    "exact_diffusion": (algorithms.ExactDiffusion, {}),
    "d2": (algorithms.D2, {}),
    "push_diging": (algorithms.PushDIGing, {}),
    "choco": (algorithms.CHOCO, {}),
    "kgt": (algorithms.KGT, {}),
}

METHODS = {**FEDERATED, **DECENTRALIZED}

#: The weight-rule arguments of each decentralized method and the stochasticity their
#: matrices need, as the methods state it (``DecentralizedMethod.needs``): gradient
#: tracking averages (doubly stochastic), DGD needs row-stochastic weights, push-pull pulls
#: with a row- and pushes with a column-stochastic matrix, push-sum pushes.
RULE_NEEDS = {kind: dict(cls.needs) for kind, (cls, _) in DECENTRALIZED.items()}

#: Methods whose default rule is the graph's doubly stochastic one: they reach the
#: minimiser of the plain average of the clients' objectives only with it.
AVERAGING = (
    "dgd", "gradient_tracking", "extra", "nids", "exact_diffusion", "d2", "choco", "kgt"
)  # fmt: skip

_STOCHASTIC = {
    "doubly": mixing.is_doubly_stochastic,
    "row": mixing.is_row_stochastic,
    "column": mixing.is_column_stochastic,
}


# --------------------------------------------------------------------------- participation
def _bernoulli(n_clients, p=None, low=None, high=None, seed=DEFAULT_SEED, draws="fast"):
    """Bernoulli participation: ``p`` (one number or one per client), or each p_i drawn
    uniformly in ``[low, high]`` from ``seed``; ``draws`` as in :class:`Bernoulli`."""
    if p is not None:
        if low is not None or high is not None:
            raise ConfigError("participation.p: give p, or low and high, not both")
        return participation.Bernoulli(p, n_clients=n_clients, draws=draws)
    if low is None or high is None:
        raise ConfigError("participation: bernoulli needs p, or low and high")
    return participation.Bernoulli.heterogeneous(n_clients, low, high, seed=seed, draws=draws)


def _weighted(n_clients, weights, size):
    """``size`` clients a round drawn with probability proportional to ``weights``."""
    if not isinstance(weights, list) or len(weights) != n_clients:
        shown = len(weights) if isinstance(weights, list) else repr(weights)
        raise ConfigError(
            f"participation.weights must be a list of n_clients = {n_clients} numbers, got {shown}"
        )
    return participation.WeightedSample(weights, size)


PROCESSES = {
    "full": participation.Full,
    "uniform": participation.UniformSample,
    "weighted": _weighted,
    "bernoulli": _bernoulli,
    "regularized": participation.Regularized,
    "periodic": participation.Periodic,
    "markov": participation.Markov,
}


# ----------------------------------------------------------------------------------- graphs
def _random_graphs(nodes, kind, p, seed, connected, static):
    sequence = mixing.RandomSequence(nodes, kind, p=p, seed=seed, connected=connected)
    return mixing.StaticSequence(sequence.graph(0), nodes) if static else sequence


def _one_peer_exponential(nodes):
    """Ying et al.'s one-peer exponential graph: time-varying, period ceil(log2 n)."""
    return mixing.OnePeerExponential(nodes)


def _directed_ring(nodes, shifts=(1,)):
    """Each node sends to ``i + shifts[k mod len]``: a directed ring by default."""
    return mixing.DirectedRingSequence(nodes, shifts)


def _erdos_renyi(nodes, p=None, seed=DEFAULT_SEED, connected=True, static=False):
    """A fresh undirected G(n, p) every step (the first one throughout if ``static``)."""
    return _random_graphs(nodes, "erdos_renyi", p, seed, connected, static)


def _random_directed(nodes, p=None, seed=DEFAULT_SEED, static=False):
    """A directed ring plus random directed edges, fresh every step (or ``static``)."""
    return _random_graphs(nodes, "directed_ring_with_random_edges", p, seed, True, static)


def _cycle(nodes):
    """The static undirected ring."""
    return mixing.StaticSequence(nx.cycle_graph(nodes), nodes)


def _complete(nodes):
    """The static complete graph."""
    return mixing.StaticSequence(nx.complete_graph(nodes), nodes)


GRAPHS = {
    "one_peer_exponential": _one_peer_exponential,
    "directed_ring": _directed_ring,
    "erdos_renyi": _erdos_renyi,
    "random_directed": _random_directed,
    "cycle": _cycle,
    "complete": _complete,
}

#: The doubly stochastic rule of each graph kind (the default of the :data:`AVERAGING` kinds);
#: random directed graphs have none.
DOUBLY_STOCHASTIC_RULE = {
    "one_peer_exponential": "natural",
    "directed_ring": "natural",
    "erdos_renyi": "metropolis",
    "cycle": "metropolis",
    "complete": "metropolis",
}


#: The optional message-drop keys of ``[graphs]`` -> the argument of
#: :class:`~stochmix.mixing.MessageDrops` each one sets.
DROP_KEYS = {
    "drops": "probability",
    "drop_model": "model",
    "drop_p_good_to_bad": "p_good_to_bad",
    "drop_p_bad_to_good": "p_bad_to_good",
    "drop_in_good": "drop_in_good",
    "drop_in_bad": "drop_in_bad",
    "drop_symmetric": "symmetric",
    "drop_lost_weight": "lost_weight",
    "drop_seed": "seed",
}


def _message_drops(table: dict, sequence) -> tuple:
    """The sequence wrapped in :class:`~stochmix.mixing.MessageDrops` when ``table`` has
    drop keys (taken out of it), and their resolved values (empty without drops)."""
    given = {key: table.pop(key) for key in list(table) if key in DROP_KEYS}
    if not given:
        return sequence, {}
    given.setdefault("drop_seed", DEFAULT_SEED)
    try:
        drops = mixing.MessageDrops(sequence, **{DROP_KEYS[k]: v for k, v in given.items()})
    except (TypeError, ValueError) as error:
        message = _first_line(error)
        keys = {argument: key for key, argument in DROP_KEYS.items()}
        first, _, rest = message.partition(" ")
        if first in keys:
            raise ConfigError(f"graphs.{keys[first]} {rest}") from None
        raise ConfigError(f"graphs: {message}") from None
    resolved = {"drop_model": drops.model}
    if drops.model == "independent":
        resolved["drops"] = drops.probability
    else:
        resolved["drop_p_good_to_bad"] = drops.p_good_to_bad
        resolved["drop_p_bad_to_good"] = drops.p_bad_to_good
        resolved["drop_in_good"] = drops.drop_in_good
        resolved["drop_in_bad"] = drops.drop_in_bad
    resolved.update(
        drop_symmetric=drops.symmetric, drop_lost_weight=drops.lost_weight, drop_seed=drops.seed
    )
    return drops, resolved


# ------------------------------------------------------------------------------ experiment
@dataclass
class MethodSpec:
    """One method of a configuration: its kind, its options (every default written out),
    its lr grid, its label and, for a decentralized method, the graph sequence."""

    kind: str
    options: dict
    lrs: list[float]
    label: str
    graphs: object = None
    channel_noise: float = 0.0  # [graphs] channel_noise: algorithms.ChannelNoise

    def build(self, lr: float):
        """The method at step size ``lr``."""
        factory, fixed = METHODS[self.kind]
        extra = {"graphs": self.graphs} if self.kind in DECENTRALIZED else {}
        method = factory(lr=lr, **fixed, **extra, **self.options)
        if self.channel_noise and self.kind in DECENTRALIZED:
            method = algorithms.ChannelNoise(method, self.channel_noise)
        return method

    def table(self) -> dict:
        """The ``[[methods]]`` table that gives this method back."""
        lr = self.lrs if len(self.lrs) > 1 else self.lrs[0]
        return {"kind": self.kind, "label": self.label, "lr": lr, **self.options}


@dataclass
class Experiment:
    """A parsed configuration. ``tables`` holds the resolved ``[problem]``,
    ``[participation]`` and ``[graphs]`` tables and ``settings`` the resolved top-level
    run settings (both as TOML values); :meth:`resolved` puts everything back together."""

    name: str
    problem: object
    participation: object
    methods: list[MethodSpec]
    rounds: int
    seeds: list[int]
    backend: str = "numpy"
    settings: dict = field(default_factory=dict)
    tables: dict = field(default_factory=dict)

    @property
    def run_options(self) -> dict:
        """Keyword arguments for :func:`stochmix.run` beyond the seed and the backend."""
        options = dict(self.settings)
        if "dtype" in options:
            options["dtype"] = np.dtype(options["dtype"]).type
        if "metrics" in options:
            options["metrics"] = tuple(options["metrics"])
        return options

    def resolved(self) -> dict:
        """The configuration with every default and seed written out: :func:`parse` of it
        (or :func:`load` of :func:`dumps` of it) gives the same runs."""
        top = {
            "name": self.name,
            "rounds": self.rounds,
            "seeds": list(self.seeds),
            "backend": self.backend,
        }
        return {
            **top,
            **self.settings,
            **self.tables,
            "methods": [m.table() for m in self.methods],
        }


# --------------------------------------------------------------------------------- helpers
def _section(raw: dict, key: str, default: dict | None = None) -> dict:
    if key not in raw:
        if default is not None:
            return dict(default)
        raise ConfigError(f"missing [{key}] section")
    value = raw[key]
    if not isinstance(value, dict):
        raise ConfigError(f"{key} must be a table, got {type(value).__name__}")
    return dict(value)


def _kind(table: dict, where: str, allowed) -> str:
    kind = table.pop("kind", None)
    if not isinstance(kind, str) or kind not in allowed:
        raise ConfigError(f"{where}.kind must be one of {sorted(allowed)}, got {kind!r}")
    return kind


def _parameters(factory) -> dict:
    try:
        return dict(inspect.signature(factory).parameters)
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        return {}


def _first_line(error: Exception) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _call(factory, where: str, given: dict, supplied: dict | None = None, also=("kind",)):
    """``factory(**supplied, **given)``, where ``given`` comes from the table ``where`` and
    ``supplied`` from the code; unknown keys, missing keys and bad values become
    :class:`ConfigError` naming the key (``also``: the table's other keys, to list)."""
    supplied = supplied or {}
    params = _parameters(factory)
    if params and not any(p.kind == p.VAR_KEYWORD for p in params.values()):
        allowed = [k for k in params if k not in supplied]
        unknown = [k for k in given if k not in allowed]
        if unknown:
            listed = sorted({*allowed, *also})
            raise ConfigError(f"{where}: unknown key {unknown[0]!r}; allowed keys: {listed}")
    missing = [
        k
        for k, p in params.items()
        if p.default is p.empty
        and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        and k not in given
        and k not in supplied
    ]
    if missing:
        raise ConfigError(f"{where}.{missing[0]} is required")
    try:
        return factory(**supplied, **given)
    except ConfigError:
        raise
    except (TypeError, ValueError) as error:
        message = _first_line(error)
        if message.split(" ", 1)[0] in given:  # "size must be <= ..." names the key
            raise ConfigError(f"{where}.{message}") from None
        raise ConfigError(f"{where}: {message}") from None


def _toml_value(value) -> bool:
    """Whether ``value`` is something a TOML file holds (None is not)."""
    if isinstance(value, (bool, int, float, str)):
        return True
    if isinstance(value, (list, tuple)):
        return all(_toml_value(v) for v in value)
    return False


def _with_defaults(kind: str, factory, given: dict, skip=()) -> dict:
    """``{"kind": kind, **given}`` plus every default of ``factory`` that TOML can hold,
    in the order of its signature (parameters in ``skip`` are the code's)."""
    table = {"kind": kind}
    for name, param in _parameters(factory).items():
        if name in skip or param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
            continue
        if name in given:
            table[name] = given[name]
        elif param.default is not param.empty and _toml_value(param.default):
            value = param.default
            table[name] = list(value) if isinstance(value, tuple) else value
    table.update({k: v for k, v in given.items() if k not in table})
    return table


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# ------------------------------------------------------------------------------ top level
TOP_LEVEL = {
    "name",
    "rounds",
    "seed",
    "seeds",
    "backend",
    "device",
    "compiled",
    "dtype",
    "metrics",
    "evaluate_every",
    "storage",
    "problem",
    "participation",
    "graphs",
    "methods",
}


def _settings(raw: dict, backend: str) -> dict:
    """The run settings of the top level, checked, with their defaults."""
    settings = {}
    if "device" in raw:
        if not isinstance(raw["device"], str):
            raise ConfigError(f"device must be a string, got {raw['device']!r}")
        if backend != "torch":
            raise ConfigError(f'device = {raw["device"]!r} needs backend = "torch"')
        settings["device"] = raw["device"]
    compiled = raw.get("compiled", "auto")
    if not isinstance(compiled, (bool, str)) or compiled not in (True, False, "auto"):
        raise ConfigError(f'compiled must be true, false or "auto", got {compiled!r}')
    if compiled is True and backend != "numpy":
        raise ConfigError('compiled = true needs backend = "numpy"')
    settings["compiled"] = compiled
    dtype = raw.get("dtype", "float64")
    if dtype not in ("float64", "float32"):
        raise ConfigError(f"dtype must be one of ['float32', 'float64'], got {dtype!r}")
    settings["dtype"] = dtype
    metrics = raw.get("metrics", list(METRICS))
    if not isinstance(metrics, list) or not all(m in METRICS for m in metrics):
        raise ConfigError(f"metrics must be a list of names among {list(METRICS)}, got {metrics!r}")
    settings["metrics"] = list(metrics)
    every = raw.get("evaluate_every", "auto")
    if every != "auto" and not (_integer(every) and every >= 1):
        raise ConfigError(f'evaluate_every must be "auto" or a positive integer, got {every!r}')
    settings["evaluate_every"] = every
    storage = raw.get("storage", "auto")
    if storage not in ("auto", "full", "compact"):
        raise ConfigError(f'storage must be "auto", "full" or "compact", got {storage!r}')
    settings["storage"] = storage
    return settings


_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def _slug(stem: str) -> str:
    """A file's stem made a safe run name (the default name of a configuration file)."""
    slug = re.sub(r"[^A-Za-z0-9._-]", "_", stem).lstrip("._-")[:64]
    return slug or "experiment"


def _run_shape(raw: dict) -> tuple[str, int, list[int], str]:
    """name, rounds, seeds and backend, checked."""
    name = raw.get("name", None)
    if not isinstance(name, str) or not _SAFE_NAME.fullmatch(name):
        raise ConfigError(
            "name must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or "
            f"digit (it names the run folder), got {name!r}"
        )
    rounds = raw.get("rounds", 300)
    if not _integer(rounds) or rounds < 0:
        raise ConfigError(f"rounds must be a nonnegative integer, got {rounds!r}")
    if "seeds" in raw and "seed" in raw:
        raise ConfigError("give seed or seeds, not both")
    key = "seeds" if "seeds" in raw else "seed"
    seeds = raw.get("seeds", [raw.get("seed", DEFAULT_SEED)])
    if not isinstance(seeds, list) or not seeds or not all(_integer(s) and s >= 0 for s in seeds):
        shown = seeds if key == "seeds" else raw.get("seed")
        raise ConfigError(f"{key} must be a nonnegative integer (or a list of them), got {shown!r}")
    backend = raw.get("backend", "numpy")
    if backend not in ("numpy", "torch"):
        raise ConfigError(f"backend must be one of ['numpy', 'torch'], got {backend!r}")
    return name, rounds, seeds, backend


# -------------------------------------------------------------------------------- sections
def _problem(raw: dict) -> tuple[object, dict]:
    """The problem and its resolved table."""
    table = _section(raw, "problem")
    kind = _kind(table, "problem", PROBLEMS)
    table.setdefault("seed", DEFAULT_SEED)
    given = dict(table)
    if isinstance(given.get("rows_per_client"), list):  # a TOML pair (low, high)
        given["rows_per_client"] = tuple(given["rows_per_client"])
    problem = _call(PROBLEMS[kind], "problem", given)
    return problem, _with_defaults(kind, PROBLEMS[kind], table)


def _participation(raw: dict, n_clients: int, everyone: list[str]) -> tuple[object, dict]:
    """The participation process and its resolved table (full participation by default;
    the only kind that decentralized methods and :data:`EVERY_CLIENT` accept)."""
    table = _section(raw, "participation", default={"kind": "full"})
    kind = _kind(table, "participation", PROCESSES)
    if everyone and kind != "full":
        what = (
            "decentralized methods run every node in every iteration"
            if everyone[0] in DECENTRALIZED
            else f"{everyone[0]} runs every client in every round, as in its paper"
        )
        raise ConfigError(
            f"participation.kind = {kind!r} cannot drive {everyone[0]}: {what}; "
            'use kind = "full" or leave [participation] out'
        )
    factory = PROCESSES[kind]
    process = _call(factory, "participation", table, {"n_clients": n_clients})
    resolved = _with_defaults(kind, factory, table, skip=("n_clients",))
    if kind == "bernoulli" and "p" in table:
        resolved.pop("seed", None)  # the seed draws p_i between low and high only
    return process, resolved


def _graphs(raw: dict, n_clients: int, decentralized: list[str]) -> tuple:
    """The graph sequence, its resolved table and its default rule (None without one)."""
    if "graphs" not in raw:
        if decentralized:
            raise ConfigError(
                f"{decentralized[0]} is decentralized and needs a [graphs] table; "
                f"graphs.kind is one of {sorted(GRAPHS)}"
            )
        return None, {}, None
    if not decentralized:
        raise ConfigError(
            "graphs: no method uses a graph; [graphs] is for the decentralized methods "
            f"{sorted(DECENTRALIZED)}"
        )
    table = _section(raw, "graphs")
    kind = _kind(table, "graphs", GRAPHS)
    nodes = table.pop("nodes", n_clients)
    if nodes != n_clients or not _integer(nodes):
        raise ConfigError(f"graphs.nodes must equal problem.n_clients = {n_clients}, got {nodes!r}")
    rule = table.pop("rule", None)
    if rule is not None and rule not in mixing.RULES:
        raise ConfigError(f"graphs.rule must be one of {list(mixing.RULES)}, got {rule!r}")
    factory = GRAPHS[kind]
    if "p" in _parameters(factory) and table.get("p") is None:  # write the default p out
        internal = "erdos_renyi" if kind == "erdos_renyi" else "directed_ring_with_random_edges"
        table["p"] = mixing.RandomSequence(nodes, internal, seed=0).p
    drop_table = {key: table.pop(key) for key in list(table) if key in DROP_KEYS}
    noise = table.pop("channel_noise", 0.0)
    if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not noise >= 0:
        raise ConfigError(f"graphs.channel_noise must be a number >= 0, got {noise!r}")
    also = ("kind", "nodes", "rule", "channel_noise", *DROP_KEYS)
    sequence = _call(factory, "graphs", table, {"nodes": nodes}, also)
    sequence, drops = _message_drops(drop_table, sequence)
    resolved = _with_defaults(kind, factory, table, skip=("nodes",))
    resolved = {"kind": kind, "nodes": nodes, **{k: v for k, v in resolved.items() if k != "kind"}}
    if rule is not None:
        resolved["rule"] = rule
    resolved.update(drops)
    if noise:
        resolved["channel_noise"] = float(noise)
    return sequence, resolved, rule


def _rule_source(where: str, table: dict, name: str, graph_rule) -> tuple:
    """Where a decentralized method's rule ``name`` comes from, and its value (None: the
    method's own default)."""
    if name in table:
        return f"{where}.{name}", table[name]
    if name == "rule" and graph_rule is not None:
        return "graphs.rule", graph_rule
    return f"{where}.{name}", None


def _default_rule(where: str, kind: str, name: str, graph_kind: str):
    """The rule ``name`` of a decentralized method that the configuration leaves unset:
    the graph's doubly stochastic weights for dgd and gradient tracking, else None (the
    method's own default)."""
    if kind not in AVERAGING or name != "rule":
        return None
    rule = DOUBLY_STOCHASTIC_RULE.get(graph_kind)
    if rule is None:
        advice = 'set rule = "row" (a weighted average\'s minimiser) or ' if kind == "dgd" else ""
        raise ConfigError(
            f"{where}.rule: {kind} needs doubly stochastic mixing to reach the average's "
            f"minimiser and graphs.kind = {graph_kind!r} has none; {advice}use push_pull "
            "or push_sum"
        )
    return rule


def _check_rule(source: str, rule, need: str, kind: str, graphs, graph_kind: str) -> None:
    """``rule`` must be a weight rule that gives, on the graph sequence (its step 0), the
    stochasticity ``need`` of the method ``kind``."""
    if not isinstance(rule, str) or rule not in mixing.RULES:
        raise ConfigError(f"{source} must be one of {list(mixing.RULES)}, got {rule!r}")
    try:
        matrix = graphs.matrix(0, rule)
    except ValueError as error:
        raise ConfigError(
            f"{source} = {rule!r} does not apply to graphs.kind = {graph_kind!r}: "
            f"{_first_line(error)}"
        ) from None
    if not _STOCHASTIC[need](matrix, atol=1e-10):
        raise ConfigError(
            f"{source} = {rule!r} gives matrices that are not {need} stochastic on "
            f"graphs.kind = {graph_kind!r}, and {kind} needs {need} stochastic ones"
        )


def _check_rules(where: str, kind: str, table: dict, graphs, graph_kind: str, graph_rule):
    """Fill in and check the weight rules of a decentralized method (not checked where
    the table says ``check_mixing = false``)."""
    params = _parameters(METHODS[kind][0])
    for name, need in RULE_NEEDS[kind].items():
        source, rule = _rule_source(where, table, name, graph_rule)
        if rule is None:
            rule = _default_rule(where, kind, name, graph_kind) or params[name].default
        if table.get("check_mixing", True) is not False:
            _check_rule(source, rule, need, kind, graphs, graph_kind)
        table[name] = rule


def _method(index: int, raw_table, graphs, graph_kind, graph_rule) -> MethodSpec:
    """One ``[[methods]]`` table, checked (it builds once, so a bad option fails now)."""
    where = f"methods[{index}]"
    if not isinstance(raw_table, dict):
        raise ConfigError(f"{where} must be a table")
    table = dict(raw_table)
    kind = _kind(table, where, METHODS)
    label = table.pop("label", kind)
    if not isinstance(label, str) or not label:
        raise ConfigError(f"{where}.label must be a non-empty string, got {label!r}")
    if "lr" not in table:
        raise ConfigError(f"{where}.lr is required (a number or a list of numbers)")
    lrs = table.pop("lr")
    lrs = lrs if isinstance(lrs, list) else [lrs]
    if not lrs or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
        for v in lrs
    ):
        raise ConfigError(f"{where}.lr must be a positive number or a list of them, got {lrs!r}")
    lrs = [float(v) for v in lrs]
    if len(set(lrs)) != len(lrs):
        raise ConfigError(f"{where}.lr lists a step size twice: {lrs!r}")
    factory, fixed = METHODS[kind]
    supplied = {"lr": lrs[0], **fixed}
    if kind in DECENTRALIZED:
        _check_rules(where, kind, table, graphs, graph_kind, graph_rule)
        supplied["graphs"] = graphs
    _call(factory, where, table, supplied, ("kind", "label", "lr"))  # fail now, not mid-run
    options = _with_defaults(kind, factory, table, skip=supplied)
    del options["kind"]
    return MethodSpec(kind, options, lrs, label, supplied.get("graphs"))


def _method_tables(raw: dict) -> list:
    methods = raw.get("methods")
    if not isinstance(methods, list) or not methods:
        raise ConfigError("methods must be a non-empty list of [[methods]] tables")
    return methods


def parse(raw: dict, default_name: str = "experiment") -> Experiment:
    """Build an :class:`Experiment` from a configuration dict (see the module docstring).

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
    problem, problem_table = _problem(raw)
    methods_raw = _method_tables(raw)
    kinds = [t.get("kind") for t in methods_raw if isinstance(t, dict)]
    decentralized = [k for k in kinds if isinstance(k, str) and k in DECENTRALIZED]
    everyone = [k for k in kinds if isinstance(k, str) and k in (*DECENTRALIZED, *EVERY_CLIENT)]
    process, participation_table = _participation(raw, problem.n_clients, everyone)
    graphs, graphs_table, graph_rule = _graphs(raw, problem.n_clients, decentralized)
    graph_kind = graphs_table.get("kind")
    methods = [
        _method(i, table, graphs, graph_kind, graph_rule) for i, table in enumerate(methods_raw)
    ]
    for spec in methods:
        spec.channel_noise = float(graphs_table.get("channel_noise", 0.0))
    labels = [m.label for m in methods]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"methods need distinct labels (add label = ...), got {labels}")
    tables = {"problem": problem_table, "participation": participation_table}
    if graphs is not None:
        tables["graphs"] = graphs_table
    return Experiment(name, problem, process, methods, rounds, seeds, backend, settings, tables)


def load(path) -> Experiment:
    """Read and parse a TOML configuration file (named after the file unless it says
    ``name = ...``)."""
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
    return parse(raw, default_name=_slug(path.stem))


def default_table() -> dict:
    """The embedded experiment of ``stochmix run`` as a configuration dict: least squares
    over 20 clients with Bernoulli participation between 0.1 and 0.9, FedAvg against FOCUS.

    FOCUS's server step follows the *sum* of the clients' gradients, so its step is
    0.5 / (N L); FedAvg, whose server averages, takes N times that.
    """
    n = 20
    problem = {
        "kind": "least_squares",
        "n_clients": n,
        "dim": 10,
        "rows_per_client": 20,
        "heterogeneity": 2.0,
        "seed": DEFAULT_SEED,
    }
    smoothness = PROBLEMS["least_squares"](**{k: v for k, v in problem.items() if k != "kind"})
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


# ----------------------------------------------------------------------------- TOML writer
_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(key) -> str:
    if not isinstance(key, str):
        raise TypeError(f"TOML keys must be strings, got {key!r}")
    return key if _BARE_KEY.match(key) else _string(key)


def _string(text: str) -> str:
    # JSON's escapes (\" \\ \n \t \uXXXX ...) are TOML's; DEL must be escaped in TOML too
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007f")


def _value(value, where: str) -> str:
    """One TOML value: str, int, float (shortest exact text), bool, list or inline table."""
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        number = float(value)
        if math.isnan(number):
            return "nan"
        if math.isinf(number):
            return "inf" if number > 0 else "-inf"
        return repr(number)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_value(v, f"{where}[{i}]") for i, v in enumerate(value)) + "]"
    if isinstance(value, dict):
        items = (f"{_key(k)} = {_value(v, f'{where}.{k}')}" for k, v in value.items())
        return "{" + ", ".join(items) + "}"
    raise TypeError(f"{where}: TOML cannot hold {type(value).__name__} {value!r}")


def _is_table_array(value) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _emit(table: dict, path: list[str], lines: list[str]) -> None:
    """Append ``table``'s plain keys, then its sub-tables and arrays of tables."""
    nested = {k: v for k, v in table.items() if isinstance(v, dict) or _is_table_array(v)}
    for key, value in table.items():
        if key not in nested:
            lines.append(f"{_key(key)} = {_value(value, '.'.join([*path, key]))}")
    for key, value in nested.items():
        name = ".".join(_key(k) for k in [*path, key])
        for item in [value] if isinstance(value, dict) else value:
            lines.extend(["", f"[{name}]" if isinstance(value, dict) else f"[[{name}]]"])
            _emit(item, [*path, key], lines)


def dumps(table: dict, comment: str = "") -> str:
    """``table`` as TOML text that ``tomllib.loads`` reads back equal: strings, integers,
    floats (their shortest exact text), booleans, lists, tables and arrays of tables.
    ``comment`` lines go first, each prefixed with ``#``.

    Raises:
        TypeError: a value TOML cannot hold (None, an object), naming its key.
    """
    lines = [f"# {line}".rstrip() for line in comment.splitlines()]
    _emit(table, [], lines)
    return "\n".join(lines).lstrip("\n") + "\n"

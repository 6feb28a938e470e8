"""The parsers of a configuration's tables: ``[problem]``, ``[participation]``, ``[graphs]``
(with its message drops) and each ``[[methods]]`` table (with its weight rules)."""

from __future__ import annotations

import math
from typing import Any

from .. import mixing
from .._names import DROP_MODEL_ALIASES, PROCESS_ALIASES, renamed
from ..engine import Method
from ..participation import ParticipationProcess
from ..problems import REGULARIZERS, Composite, Problem, regularizer
from . import plugins
from .experiment import MethodSpec
from .parsing import (
    DEFAULT_SEED,
    ConfigError,
    _call,
    _first_line,
    _integer,
    _kind,
    _parameters,
    _section,
    _with_defaults,
)
from .registry import (
    _STOCHASTIC,
    ACTIVATIONS,
    AVERAGING,
    DECENTRALIZED,
    DOUBLY_STOCHASTIC_RULE,
    DROP_KEYS,
    GRAPHS,
    METHODS,
    PROBLEMS,
    PROCESSES,
)

__all__ = [
    "graph_sequence",
]


def _problem(raw: dict) -> tuple[Problem, dict]:
    """The problem and its resolved table."""
    table = _section(raw, "problem")
    kind = _kind(table, "problem", PROBLEMS, lambda: plugins.installed("problems"))
    table.setdefault("seed", DEFAULT_SEED)
    given = dict(table)
    if isinstance(given.get("rows_per_client"), list):  # a TOML pair (low, high)
        given["rows_per_client"] = tuple(given["rows_per_client"])
    reg = {key: given.pop(key) for key in list(given) if key in REGULARIZER_KEYS}
    factory = plugins.problem(kind)
    problem = _call(factory, "problem", given)
    _built(problem, Problem, "problem", kind)
    resolved = _with_defaults(kind, factory, {k: v for k, v in table.items() if k not in reg})
    if reg:
        problem = Composite(problem, _regularizer(reg))
        resolved.update(reg)
    return problem, resolved


#: regularizer -> its parameters, as ``parameter: [problem] key`` (each key the
#: parameter's name after ``reg_``, but the L1 weights: ``reg_l1``)
_REGULARIZER_PARAMETERS = {
    "l1": {"weight": "reg_l1"},
    "elastic_net": {"l1": "reg_l1", "l2": "reg_l2"},
    "group_lasso": {"weight": "reg_weight", "groups": "reg_groups"},
    "nonnegative": {},
    "box": {"low": "reg_low", "high": "reg_high"},
}

#: The ``[problem]`` keys of a regularizer: ``regularizer`` names it (a key of
#: :data:`~stochmix.problems.REGULARIZERS`), the others are its weights.
REGULARIZER_KEYS = ("regularizer", *dict.fromkeys(
    key for keys in _REGULARIZER_PARAMETERS.values() for key in keys.values()
))  # fmt: skip


def _regularizer(keys: dict):
    """The regularizer of ``[problem]``'s ``regularizer`` and ``reg_*`` keys."""
    name = keys.get("regularizer")
    if name not in _REGULARIZER_PARAMETERS:
        given = ", ".join(sorted(keys))
        raise ConfigError(
            f"problem.regularizer must be one of {sorted(_REGULARIZER_PARAMETERS)} (with "
            f"{given}), got {name!r}"
        )
    wanted = _REGULARIZER_PARAMETERS[name]
    extra = sorted(set(keys) - {"regularizer", *wanted.values()})
    if extra:
        raise ConfigError(
            f"problem.{extra[0]} does not apply to regularizer = {name!r}, which takes "
            f"{sorted(wanted.values()) or 'no weight'}"
        )
    required = _parameters(REGULARIZERS[name])  # those without a default are required
    missing = [key for param, key in wanted.items()
               if key not in keys and required[param].default is required[param].empty]  # fmt: skip
    if missing:
        raise ConfigError(f"problem.{missing[0]} is required with regularizer = {name!r}")
    try:
        return regularizer(
            name, **{param: keys[key] for param, key in wanted.items() if key in keys}
        )
    except (TypeError, ValueError) as error:
        raise ConfigError(f"problem.regularizer = {name!r}: {error}") from None


def _built(value, expected: type, where: str, kind: str) -> None:
    """Refuse what an installed kind's factory built when it is not an ``expected``."""
    if not isinstance(value, expected):
        raise ConfigError(
            f"{where}.kind = {kind!r} built a {type(value).__name__}, not a "
            f"stochmix {expected.__name__}"
        )


def _participation(
    raw: dict, n_clients: int, everyone: list[str], decentralized: list[str], graphs=None
) -> tuple[ParticipationProcess, dict]:
    """The participation process and its resolved table (full participation by default;
    the only kind :data:`EVERY_CLIENT` accepts). For decentralized methods the table may
    be written ``[activation]`` (the same table, named for them; not both), and takes the
    activation kinds (:data:`ACTIVATIONS`) over the graph of ``[graphs]``' step 0."""
    if "activation" in raw:
        if "participation" in raw:
            raise ConfigError(
                "give [participation] or [activation] (its name for decentralized methods), "
                "not both"
            )
        if not decentralized:
            raise ConfigError(
                "activation: [activation] is for decentralized methods; federated methods "
                "take [participation]"
            )
        raw = {**raw, "participation": raw["activation"]}
    table = _section(raw, "participation", default={"kind": "full"})
    if "kind" in table:
        if isinstance(table["kind"], str) and table["kind"] in PROCESS_ALIASES:
            plugins.installed("participation")  # a plugin of that name: refused, not shadowed
        table = {**table, "kind": renamed(table["kind"], "participation.kind", PROCESS_ALIASES)}
    known = {**PROCESSES, **ACTIVATIONS} if decentralized else PROCESSES
    kind = _kind(table, "participation", known, lambda: plugins.installed("participation"))
    if everyone and kind != "full":
        raise ConfigError(
            f"participation.kind = {kind!r} cannot drive {everyone[0]}: {everyone[0]} "
            f"{_EVERY_CLIENT_WHY.get(everyone[0], _RUNS_EVERY_CLIENT)}; use kind = "
            '"full" or leave [participation] out'
        )
    if kind in ACTIVATIONS:
        factory = ACTIVATIONS[kind]
        supplied = {"n_clients": n_clients}
        if "graph" in _parameters(factory):
            supplied = {"graph": graphs.adjacency(0)}
        process = _call(factory, "participation", table, supplied)
        skip: tuple = tuple(supplied)
    else:
        factory = plugins.process(kind)
        process = _call(factory, "participation", table, {"n_clients": n_clients})
        skip = ("n_clients",)
    _built(process, ParticipationProcess, "participation", kind)
    resolved = _with_defaults(kind, factory, table, skip=skip)
    if kind == "bernoulli" and "p" in table:
        resolved.pop("seed", None)  # the seed draws p_i between low and high only
    return process, resolved


#: Why a method of :data:`EVERY_CLIENT` takes ``full`` participation only (the error's
#: reason): its paper's setting, or its own draws from the arrival schedule.
_RUNS_EVERY_CLIENT = "runs every client in every round, as in its paper"
_ARRIVALS = (
    "draws its own clients from the [clock]'s arrival schedule (concurrency clients "
    "train at once, a new one starts as each update arrives), so every client must be "
    "available to it"
)
_EVERY_CLIENT_WHY = {"fedbuff": _ARRIVALS, "fedasync": _ARRIVALS}


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
    return graph_sequence(_section(raw, "graphs"), n_clients)


def graph_sequence(table: dict, n_clients: int) -> tuple:
    """The graph sequence of a ``[graphs]`` table (message drops included), its resolved
    table and its rule (None when the table sets none): what ``stochmix run`` mixes over
    and ``stochmix spectrum`` summarizes.

    Args:
        table: the ``[graphs]`` table (not changed).
        n_clients: the problem's number of clients, which ``nodes`` must equal.

    Raises:
        ConfigError: one line naming the key and the bad value.
    """
    table = dict(table)
    kind = _kind(table, "graphs", GRAPHS)
    nodes = table.pop("nodes", n_clients)
    if nodes != n_clients or not _integer(nodes):
        raise ConfigError(f"graphs.nodes must equal problem.n_clients = {n_clients}, got {nodes!r}")
    rule = table.pop("rule", None)
    if rule is not None and rule not in mixing.RULES:
        raise ConfigError(f"graphs.rule must be one of {list(mixing.RULES)}, got {rule!r}")
    factory = GRAPHS[kind]
    if "p" in _parameters(factory) and table.get("p") is None:  # write the default p out
        table["p"] = mixing.RandomSequence(nodes, kind, seed=0).p
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


def _message_drops(table: dict, sequence) -> tuple:
    """The sequence wrapped in :class:`~stochmix.mixing.MessageDrops` when ``table`` has
    drop keys (taken out of it), and their resolved values (empty without drops)."""
    given = {key: table.pop(key) for key in list(table) if key in DROP_KEYS}
    if not given:
        return sequence, {}
    given.setdefault("drop_seed", DEFAULT_SEED)
    if "drop_model" in given:
        given["drop_model"] = renamed(given["drop_model"], "graphs.drop_model", DROP_MODEL_ALIASES)
    try:
        drops = mixing.MessageDrops(sequence, **{DROP_KEYS[k]: v for k, v in given.items()})
    except (TypeError, ValueError) as error:
        message = _first_line(error)
        keys = {argument: key for key, argument in DROP_KEYS.items()}
        first, _, rest = message.partition(" ")
        if first in keys:
            raise ConfigError(f"graphs.{keys[first]} {rest}") from None
        raise ConfigError(f"graphs: {message}") from None
    resolved: dict[str, Any] = {"drop_model": drops.model}
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
    params = _parameters(plugins.method(kind)[0])
    for name, need in plugins.method_needs(kind).items():
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
    kind = _kind(table, where, METHODS, lambda: plugins.installed("methods"))
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
    factory, fixed = plugins.method(kind)
    supplied = {"lr": lrs[0], **fixed}
    if plugins.decentralized(kind):
        _check_rules(where, kind, table, graphs, graph_kind, graph_rule)
        supplied["graphs"] = graphs
    built = _call(factory, where, table, supplied, ("kind", "label", "lr"))  # fail now
    _built(built, Method, where, kind)
    options = _with_defaults(kind, factory, table, skip=supplied)
    del options["kind"]
    return MethodSpec(kind, options, lrs, label, supplied.get("graphs"))


def _method_tables(raw: dict) -> list:
    methods = raw.get("methods")
    if not isinstance(methods, list) or not methods:
        raise ConfigError("methods must be a non-empty list of [[methods]] tables")
    return methods

"""How a swept key names a value of a configuration.

A swept key is a dotted path: ``rounds`` (a top-level setting), ``problem.dim``,
``participation.low``, ``graphs.p``, ``clock.deadline``, ``clock.compute.scale`` (a key of a
table, at any depth), or ``methods.<label>.<key>`` for a key of one ``[[methods]]`` table,
named by its ``label`` (its ``kind`` where it has no label), e.g.
``methods.FOCUS.local_steps`` or ``methods.fedavg.lr``. Labels, not positions: they are what
the summary table and ``study.csv`` show, and they stay right when a method is added to the
configuration. A whole table is a key too, its values tables: ``activation``, ``clock``,
``graphs``, ``problem``, ``participation``, ``methods.<label>``, or ``methods`` (each value
a list of method tables).

**The rule.** A key can be swept when the configuration's resolved form has it (every
default written out, tables at every depth), when its table's kind takes it, or else when
the configuration with the key set to its first swept value is accepted by the
configuration's parser (the schema: an unknown key is refused there by name); anything else
is one error naming the key, with the close keys. Every cell is then parsed before any
runs. ``name``, ``seed`` and ``seeds`` cannot vary (seeds multiply every cell), nor can a
method's ``kind`` or ``label`` (list each method in ``[[methods]]``) or the ``[output]``
table (how the study is drawn, not what runs).
"""

from __future__ import annotations

import copy
import difflib
from typing import Any

from ..config import (
    DROP_KEYS,
    GRAPHS,
    METHODS,
    PROBLEMS,
    PROCESSES,
    TOP_LEVEL,
    ConfigError,
    Experiment,
    parse,
)
from ..config.clock import _KEYS as CLOCK_KEYS
from ..config.parsing import _parameters
from ..config.registry import ACTIVATIONS
from .spec import SweepError

__all__ = [
    "FIXED",
    "TABLES",
    "check_keys",
    "known_keys",
    "set_value",
]

#: The configuration's tables (their keys are swept as ``table.key``, the table itself,
#: its values tables, as ``table``).
TABLES = ("problem", "participation", "activation", "graphs", "clock", "methods")

#: Top-level keys that cannot vary, and why.
FIXED = {
    "name": "it names the study",
    "seed": "the seeds multiply every cell; set seeds in the configuration",
    "seeds": "the seeds multiply every cell; set seeds in the configuration",
    "output": "it says how the study is drawn, not what runs; set [output] once",
}

_FACTORIES: dict[str, dict[str, Any]] = {
    "problem": PROBLEMS,
    "participation": {**PROCESSES, **ACTIVATIONS},
    "graphs": GRAPHS,
}
_SUPPLIED = {"problem": (), "participation": ("n_clients", "graph"), "graphs": ("nodes",)}
_GRAPH_EXTRA = ("nodes", "rule", "channel_noise", *DROP_KEYS)


def _label(table: Any) -> str | None:
    if not isinstance(table, dict):
        return None
    label = table.get("label", table.get("kind"))
    return label if isinstance(label, str) else None


def _flatten(table: dict, prefix: str, keys: set[str]) -> None:
    """Add ``prefix.key`` for every key of ``table``, at every depth."""
    for name, value in table.items():
        key = f"{prefix}.{name}"
        keys.add(key)
        if isinstance(value, dict):
            _flatten(value, key, keys)


def known_keys(exp: Experiment) -> list[str]:
    """Every key a sweep over ``exp``'s configuration may name without a trial parse: the
    keys of its resolved form at every depth, the whole tables, and the keys each table's
    kind takes (``kind`` and ``label`` of a method included: :func:`check_keys` refuses
    them with a reason). For decentralized methods, the participation keys also as
    ``activation.*`` (the table's name for them).

    Args:
        exp: the parsed configuration the sweep varies.

    Returns:
        The dotted keys, sorted.
    """
    resolved = exp.resolved()
    keys = {k for k in TOP_LEVEL if k not in TABLES}
    keys.update(table for table in TABLES if table in resolved)
    for table in ("problem", "participation", "graphs", "clock"):
        if table not in resolved:
            continue
        section: dict = resolved[table]
        _flatten(section, table, keys)
        kind = section.get("kind")
        if table in _FACTORIES and kind in _FACTORIES[table]:
            params = _parameters(_FACTORIES[table][kind])
            keys.update(f"{table}.{p}" for p in params if p not in _SUPPLIED[table])
        if table == "graphs":
            keys.update(f"graphs.{name}" for name in _GRAPH_EXTRA)
        if table == "clock":
            keys.update(f"clock.{name}" for name in CLOCK_KEYS)
    if any(spec.graphs is not None for spec in exp.methods):
        keys.update(
            "activation" + key[len("participation") :]
            for key in list(keys)
            if key == "participation" or key.startswith("participation.")
        )
    for spec in exp.methods:
        names = {"kind", "label", "lr", *spec.options}
        names.update(p for p in _parameters(METHODS[spec.kind][0]) if p != "graphs")
        keys.add(f"methods.{spec.label}")
        keys.update(f"methods.{spec.label}.{name}" for name in names)
    return sorted(keys)


def _method_key(key: str, labels: list[str]) -> tuple[str, str] | None:
    """``(label, option)`` of a ``methods.<label>.<option>`` key (the longest label that
    fits), None where no label fits."""
    rest = key[len("methods.") :]
    fits = [label for label in labels if rest == label or rest.startswith(label + ".")]
    if not fits:
        return None
    label = max(fits, key=len)
    return label, rest[len(label) + 1 :]


def _why_fixed(key: str, labels: list[str]) -> str | None:
    """Why ``key`` cannot vary (None where it can)."""
    top = key.partition(".")[0]
    if top in FIXED:
        return FIXED[top]
    if key.startswith("methods."):
        found = _method_key(key, labels)
        option = found[1] if found else key.rsplit(".", 1)[-1]
        if option == "kind":
            return "a method's kind is what the study compares; list each method in [[methods]]"
        if option == "label":
            return "a method's label names its rows"
    return None


def check_keys(values: dict[str, list], exp: Experiment, raw: dict | None = None) -> None:
    """Refuse a swept key that does not exist or cannot vary (the rule: see the module).

    Args:
        values: swept key -> its values (for the message).
        exp: the parsed configuration the sweep varies.
        raw: the configuration dict ``exp`` was parsed from; where given, a key that
            :func:`known_keys` does not list is accepted if the configuration with the
            key set to its first value parses (without it, such a key is refused).

    Raises:
        SweepError: naming the key and its values, and for an unknown key the close ones
            (and what the configuration said of it).
    """
    known = known_keys(exp)
    labels = [spec.label for spec in exp.methods]
    for key, vals in values.items():
        why = _why_fixed(key, labels)
        if why is not None:
            raise SweepError(f"sweep: {key!r} cannot vary ({why}), got {key} = {vals!r}")
        if key in known:
            continue
        said = _trial(raw, key, vals[0]) if raw is not None else "not a key of it"
        if said is None:
            continue
        close = difflib.get_close_matches(key, known, n=5, cutoff=0.6)
        hint = f"; close keys: {close}" if close else ""
        methods = f" (methods are named by label: {labels})" if key.startswith("methods") else ""
        raise SweepError(
            f"sweep: no key {key!r} in the configuration{methods} ({said}), "
            f"got {key} = {vals!r}{hint}"
        )


def _trial(raw: dict, key: str, value: Any) -> str | None:
    """None where the configuration ``raw`` with ``key`` set to ``value`` parses, else
    what the parser said."""
    trial = copy.deepcopy(raw)
    try:
        set_value(trial, key, value)
        parse(trial)
    except (ConfigError, TypeError) as error:
        text = str(error).strip().splitlines()
        return f"set to {value!r}: {text[0] if text else type(error).__name__}"
    return None


def _set_path(table: dict, parts: list[str], value: Any, key: str) -> None:
    """Set ``table[parts[0]][parts[1]]... = value``, making the missing tables."""
    for depth, part in enumerate(parts[:-1]):
        inner = table.setdefault(part, {})
        if not isinstance(inner, dict):
            where = ".".join(parts[: depth + 1])
            raise SweepError(
                f"sweep: {key!r} names a key inside {where}, which is {inner!r}, not a table"
            )
        table = inner
    table[parts[-1]] = value


def set_value(raw: dict, key: str, value: Any) -> None:
    """Set ``key`` to ``value`` in the configuration dict ``raw`` (in place): a key at any
    depth (the tables on the way are made where missing), a whole table, or a key of the
    ``[[methods]]`` table of a label (``methods.<label>`` alone: the whole table).

    Args:
        raw: a configuration dict (as read from TOML), changed in place.
        key: a key :func:`check_keys` accepts.
        value: the value.

    Raises:
        SweepError: the key names a method the configuration does not have, or a key
            inside a value that is not a table.
    """
    if key.startswith("methods."):
        tables = raw.get("methods", [])
        labels = [label for label in map(_label, tables) if label is not None]
        found = _method_key(key, labels)
        if found is None:
            raise SweepError(f"sweep: no method for {key!r}; the labels are {labels}")
        label, option = found
        for index, table in enumerate(tables):
            if _label(table) != label:
                continue
            if not option:
                if not isinstance(value, dict):
                    raise SweepError(f"sweep: {key!r} takes method tables, got {value!r}")
                tables[index] = {"label": label, **copy.deepcopy(value)}
            else:
                _set_path(table, option.split("."), value, key)
        return
    _set_path(raw, key.split("."), copy.deepcopy(value), key)

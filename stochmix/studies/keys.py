"""How a swept key names a value of a configuration.

A swept key is a dotted path: ``rounds`` (a top-level setting), ``problem.dim``,
``participation.low``, ``graphs.p`` (a key of a table), or ``methods.<label>.<key>`` for a
key of one ``[[methods]]`` table, named by its ``label`` (its ``kind`` where it has no
label), e.g. ``methods.FOCUS.local_steps`` or ``methods.fedavg.lr``. Labels, not positions:
they are what the summary table and ``study.csv`` show, and they stay right when a method
is added to the configuration.

A key can be swept when the configuration's resolved form has it (every default written
out) or the table's kind takes it. ``name``, ``seed`` and ``seeds`` cannot vary (seeds
multiply every cell), nor can a table's ``kind`` or a method's ``label``.
"""

from __future__ import annotations

import difflib
from typing import Any

from ..config import (
    DROP_KEYS,
    GRAPHS,
    METHODS,
    PROBLEMS,
    PROCESSES,
    TOP_LEVEL,
    Experiment,
)
from ..config.parsing import _parameters
from .spec import SweepError

__all__ = [
    "FIXED",
    "TABLES",
    "check_keys",
    "known_keys",
    "set_value",
]

#: The configuration's tables (their keys are swept as ``table.key``).
TABLES = ("problem", "participation", "graphs", "methods")

#: Top-level keys that cannot vary, and why.
FIXED = {
    "name": "it names the study",
    "seed": "the seeds multiply every cell; set seeds in the configuration",
    "seeds": "the seeds multiply every cell; set seeds in the configuration",
}

_FACTORIES: dict[str, dict[str, Any]] = {
    "problem": PROBLEMS,
    "participation": PROCESSES,
    "graphs": GRAPHS,
}
_SUPPLIED = {"problem": (), "participation": ("n_clients",), "graphs": ("nodes",)}
_GRAPH_EXTRA = ("nodes", "rule", "channel_noise", *DROP_KEYS)


def _label(table: Any) -> str | None:
    if not isinstance(table, dict):
        return None
    label = table.get("label", table.get("kind"))
    return label if isinstance(label, str) else None


def known_keys(exp: Experiment) -> list[str]:
    """Every key a sweep over ``exp``'s configuration may name (``kind`` and ``label``
    included: :func:`check_keys` refuses them with a reason).

    Args:
        exp: the parsed configuration the sweep varies.

    Returns:
        The dotted keys, sorted.
    """
    resolved = exp.resolved()
    keys = {k for k in TOP_LEVEL if k not in TABLES}
    for table in ("problem", "participation", "graphs"):
        if table not in resolved:
            continue
        section: dict = resolved[table]
        names = set(section)
        kind = section.get("kind")
        if kind in _FACTORIES[table]:
            params = _parameters(_FACTORIES[table][kind])
            names.update(p for p in params if p not in _SUPPLIED[table])
        if table == "graphs":
            names.update(_GRAPH_EXTRA)
        keys.update(f"{table}.{name}" for name in names)
    for spec in exp.methods:
        names = {"kind", "label", "lr", *spec.options}
        names.update(p for p in _parameters(METHODS[spec.kind][0]) if p != "graphs")
        keys.update(f"methods.{spec.label}.{name}" for name in names)
    return sorted(keys)


def _method_key(key: str, labels: list[str]) -> tuple[str, str] | None:
    """``(label, option)`` of a ``methods.<label>.<option>`` key (the longest label that
    fits), None where no label fits."""
    rest = key[len("methods.") :]
    fits = [label for label in labels if rest.startswith(label + ".")]
    if not fits:
        return None
    label = max(fits, key=len)
    return label, rest[len(label) + 1 :]


def _why_fixed(key: str, labels: list[str]) -> str | None:
    """Why ``key`` cannot vary (None where it can)."""
    if key in FIXED:
        return FIXED[key]
    if key in TABLES:
        return "it is a whole table; sweep its keys (e.g. problem.dim)"
    if key.startswith("methods."):
        found = _method_key(key, labels)
        option = found[1] if found else key.rsplit(".", 1)[-1]
        if option == "kind":
            return "a method's kind is what the study compares; list each method in [[methods]]"
        if option == "label":
            return "a method's label names its rows"
        return None
    table, _, option = key.partition(".")
    if table in TABLES and option == "kind":
        return f"the {table}'s kind sets which keys the table has; run one study per kind"
    return None


def check_keys(values: dict[str, list], exp: Experiment) -> None:
    """Refuse a swept key that does not exist or cannot vary.

    Args:
        values: swept key -> its values (for the message).
        exp: the parsed configuration the sweep varies.

    Raises:
        SweepError: naming the key and its values, and for an unknown key the close ones.
    """
    known = known_keys(exp)
    labels = [spec.label for spec in exp.methods]
    for key, vals in values.items():
        why = _why_fixed(key, labels)
        if why is not None:
            raise SweepError(f"sweep: {key!r} cannot vary ({why}), got {key} = {vals!r}")
        if key not in known:
            close = difflib.get_close_matches(key, known, n=5, cutoff=0.6)
            hint = f"; close keys: {close}" if close else ""
            methods = (
                f" (methods are named by label: {labels})" if key.startswith("methods") else ""
            )
            raise SweepError(
                f"sweep: no key {key!r} in the configuration{methods}, got {key} = {vals!r}{hint}"
            )


def set_value(raw: dict, key: str, value: Any) -> None:
    """Set ``key`` to ``value`` in the configuration dict ``raw`` (in place).

    Args:
        raw: a configuration dict (as read from TOML), changed in place.
        key: a key :func:`check_keys` accepts.
        value: the value.

    Raises:
        SweepError: the key names a method the configuration does not have.
    """
    if "." not in key:
        raw[key] = value
        return
    if key.startswith("methods."):
        tables = raw.get("methods", [])
        labels = [label for label in map(_label, tables) if label is not None]
        found = _method_key(key, labels)
        if found is None:
            raise SweepError(f"sweep: no method for {key!r}; the labels are {labels}")
        label, option = found
        for table in tables:
            if _label(table) == label:
                table[option] = value
        return
    table, _, option = key.partition(".")
    raw.setdefault(table, {})[option] = value

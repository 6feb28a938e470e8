"""The TOML writer: :func:`dumps` gives a table as TOML text that ``tomllib`` reads back
equal (the standard library reads TOML but does not write it)."""

from __future__ import annotations

import json
import math
import re

import numpy as np

__all__ = [
    "dumps",
]

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

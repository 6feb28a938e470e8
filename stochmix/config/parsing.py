"""The bottom of the configuration package: :class:`ConfigError`, the default seed, and the
helpers that read a table (its section, its kind, a factory called with its keys, the
defaults written back)."""

from __future__ import annotations

import inspect
from typing import Any

__all__ = [
    "ConfigError",
    "DEFAULT_SEED",
]


class ConfigError(ValueError):
    """A configuration that cannot be run; the message names the key."""


#: The seed of every random choice a configuration leaves unset.
DEFAULT_SEED = 0


def _section(raw: dict, key: str, default: dict | None = None) -> dict:
    if key not in raw:
        if default is not None:
            return dict(default)
        raise ConfigError(f"missing [{key}] section")
    value = raw[key]
    if not isinstance(value, dict):
        raise ConfigError(f"{key} must be a table, got {type(value).__name__}")
    return dict(value)


def _kind(table: dict, where: str, allowed, installed=None) -> str:
    """The table's ``kind`` (taken out of it): one of ``allowed`` or, where ``installed``
    is given, of the kinds it returns (called only for a kind not in ``allowed``)."""
    kind = table.pop("kind", None)
    if isinstance(kind, str) and kind in allowed:
        return kind
    more = installed() if installed is not None else []
    if not isinstance(kind, str) or kind not in more:
        raise ConfigError(f"{where}.kind must be one of {sorted([*allowed, *more])}, got {kind!r}")
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
    table: dict[str, Any] = {"kind": kind}
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

"""The public API as text: every documented name's signature, one line each.

The names are those the API reference documents (the packages of
``docs/_ext/apipages.py``, each one's ``__all__``). A function gives its signature; a
class its constructor's and those of its public methods and properties defined in
stochmix (the overridable hooks a user's subclass relies on: ``Method.round_phases``,
``FedAvg.aggregate``, ``Problem.gradients``, ...); data its type.

``tests/package/test_api_surface.py`` compares this text with ``tests/public_api.txt``, so that a
signature changes only on purpose: after a deliberate change, rewrite the file with::

    python -m tests.api_surface --write

in the same commit, with a CHANGELOG line (and, for an extension point, the old form kept
working for one release with a ``DeprecationWarning``).
"""

from __future__ import annotations

import importlib
import inspect
import sys
import types
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORD = Path(__file__).resolve().parent / "public_api.txt"


def _packages() -> list[str]:
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        import apipages
    finally:
        sys.path.pop(0)
    return [package for package, _ in apipages.PACKAGES]


def _signature(obj) -> str:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"


def _members(cls) -> list[str]:
    """The public methods and properties of ``cls`` that stochmix defines (its own or
    inherited from a stochmix base), as ``name(signature)`` or ``name [property]``."""
    lines = []
    for name in sorted(dir(cls)):
        if name.startswith("_"):
            continue
        owner = next((k for k in cls.__mro__ if name in vars(k)), None)
        if owner is None or not owner.__module__.startswith("stochmix"):
            continue
        raw = vars(owner)[name]
        if isinstance(raw, property):
            lines.append(f"{name} [property]")
        elif isinstance(raw, (staticmethod, classmethod)):
            kind = "staticmethod" if isinstance(raw, staticmethod) else "classmethod"
            lines.append(f"{name}{_signature(getattr(cls, name))} [{kind}]")
        elif inspect.isfunction(raw):
            lines.append(f"{name}{_signature(raw)}")
    return lines


def surface() -> list[str]:
    """The lines of the public API, sorted within each package."""
    lines: list[str] = []
    for package in _packages():
        module = importlib.import_module(package)
        for name in sorted(getattr(module, "__all__", ())):
            obj = getattr(module, name)
            where = f"{package}.{name}"
            if isinstance(obj, types.ModuleType):
                continue
            if inspect.isclass(obj):
                lines.append(f"{where}{_signature(obj)} [class]")
                lines += [f"{where}.{member}" for member in _members(obj)]
            elif callable(obj):
                lines.append(f"{where}{_signature(obj)}")
            else:
                lines.append(f"{where}: {type(obj).__name__}")
    return lines


if __name__ == "__main__":
    text = "\n".join(surface()) + "\n"
    if sys.argv[1:] == ["--write"]:
        RECORD.write_text(text)
        print(f"wrote {RECORD} ({text.count(chr(10))} lines)")
    else:
        sys.stdout.write(text)

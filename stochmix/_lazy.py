"""Modules imported when first used, so that ``import stochmix`` stays cheap.

``la = lazy_module("scipy.linalg")`` binds a stand-in whose first attribute access imports
the module (SciPy's dense and sparse linear algebra and graph routines cost about 80 ms at
import, and most runs never call them); :class:`LazyExports` does the same for the public
names of a package of ours (``stochmix.algorithms.FedAvg`` imports only ``fedavg``). This
module imports nothing else of ours.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable, Mapping
from typing import Any


def _import(name: str, package: str | None = None) -> Any:
    """The module ``name`` (relative to ``package`` when it starts with a dot), imported now.

    Through ``__import__``, as an ``import`` statement does, rather than
    :func:`importlib.import_module`: ``python -X importtime`` times only the former, and
    would list what a lazily imported module imports without the module itself.
    """
    if name.startswith("."):
        level = len(name) - len(name.lstrip("."))
        if package is None or package.count(".") < level - 1:
            raise ImportError(f"no package for the relative import {name!r}")
        base = package.rsplit(".", level - 1)[0]
        name = f"{base}.{name[level:]}" if name[level:] else base
    __import__(name)
    return sys.modules[name]


class _LazyModule:
    """A stand-in for the module ``name``, imported on first attribute access."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attribute: str):
        module = _import(self._name)
        return getattr(module, attribute)

    def __repr__(self) -> str:
        return f"<module {self._name!r}, imported when first used>"


def lazy_module(name: str) -> _LazyModule:
    """A stand-in for the module ``name`` (see the module docstring)."""
    return _LazyModule(name)


def optional_module(name: str, extra: str, what: str):
    """The optional dependency ``name``, or an ImportError saying that ``what`` needs it and
    how to install it (``pip install "stochmix[extra]"``)."""
    try:
        return importlib.import_module(name)
    except ImportError:
        raise ImportError(
            f'{what} needs {name}, which is not installed: pip install "stochmix[{extra}]"'
        ) from None


class LazyExports:
    """The public names of a package, each imported from its module when first used.

    ``names`` maps each name to the module that defines it, relative to ``package``
    (``{"FedAvg": ".fedavg"}``); ``submodules`` are the package's own subpackages and
    modules that it exports as attributes (``stochmix.algorithms``). The package binds
    them through PEP 562 hooks, so that ``pkg.name``, ``from pkg import name``,
    ``from pkg import *`` and ``dir(pkg)`` work as with eager imports::

        _EXPORTS = LazyExports(__name__, {"FedAvg": ".fedavg"})

        def __getattr__(name: str) -> Any:
            return _EXPORTS.load(name)

        def __dir__() -> list[str]:
            return _EXPORTS.dir()

    A name, once loaded, is stored in the package's namespace, so the hook runs once.
    (Type checkers do not run the hooks: the package imports the same names under
    ``if TYPE_CHECKING:``.)
    """

    def __init__(self, package: str, names: Mapping[str, str], submodules: Iterable[str] = ()):
        self.package = package
        self.names = dict(names)
        self.submodules = frozenset(submodules)
        self._namespace = vars(sys.modules[package])  # the package, while it is being run

    def load(self, name: str) -> Any:
        """The value of ``name`` in the package, imported now (AttributeError if the
        package does not export it)."""
        if name in self.submodules:
            value = _import(f"{self.package}.{name}")
        elif name in self.names:
            value = getattr(_import(self.names[name], self.package), name)
        elif not name.startswith("_") and _has_submodule(self.package, name):
            # any other subpackage or module, as if an eager import had loaded it
            # (sm.timing, sm.analysis: attributes that imports of 0.1 made as they went)
            value = _import(f"{self.package}.{name}")
        else:
            raise AttributeError(f"module {self.package!r} has no attribute {name!r}")
        self._namespace[name] = value
        return value

    def dir(self) -> list[str]:
        """The package's namespace with the names not loaded yet."""
        return sorted({*self._namespace, *self.names, *self.submodules})


def _has_submodule(package: str, name: str) -> bool:
    """Whether ``package`` has a module or subpackage ``name`` (found, not imported)."""
    import importlib.util

    try:
        return importlib.util.find_spec(f"{package}.{name}") is not None
    except (ImportError, ValueError):
        return False

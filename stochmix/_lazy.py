"""Modules imported when first used, so that ``import stochmix`` stays cheap.

``la = lazy_module("scipy.linalg")`` binds a stand-in whose first attribute access imports
the module (SciPy's dense and sparse linear algebra and graph routines cost about 80 ms at
import, and most runs never call them). This module imports nothing else of ours.
"""

from __future__ import annotations

import importlib


class _LazyModule:
    """A stand-in for the module ``name``, imported on first attribute access."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attribute: str):
        module = importlib.import_module(self._name)
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

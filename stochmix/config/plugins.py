"""Methods, problems and participation processes that installed packages add to
configurations, through package entry points.

A package declares each one under its name in one of :data:`GROUPS` (in its
``pyproject.toml``)::

    [project.entry-points."stochmix.methods"]
    fedavg_momentum = "my_package.methods:FedAvgMomentum"

and, once installed, ``kind = "fedavg_momentum"`` in a ``[[methods]]`` table builds
``FedAvgMomentum(lr=..., **the table's other keys)``. A configuration only ever names a
kind: what runs is what an installed package declares, never an import path read from a
file.

What each group's object is called with:

* ``stochmix.methods``: a :class:`~stochmix.engine.Method` subclass or a function that
  returns a Method, called with ``lr`` and the table's keys. A subclass of
  :class:`~stochmix.algorithms.DecentralizedMethod` is decentralized: it gets the
  ``[graphs]`` sequence as ``graphs`` and its weight rules as its ``needs`` say.
* ``stochmix.problems``: a function (or class) that returns a
  :class:`~stochmix.problems.Problem`, called with the ``[problem]`` table's keys (``seed``
  included, 0 unless the table sets it), e.g. ``"my_package:MyProblem.random"``.
* ``stochmix.participation``: a function (or class) that returns a
  :class:`~stochmix.participation.ParticipationProcess`, called with ``n_clients`` and the
  ``[participation]`` table's keys.

Entry points are read on first need, once per process (the groups when a kind is not
built in, an entry point's object when its kind is used); :func:`refresh` reads them
again. A name that a built-in kind already has (for participation, the activation kinds of
decentralized methods included) or an old spelling of one (``uniform``) is refused, naming
the distribution that declares it, and an entry point that does not load gives one error
naming it.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata as metadata
from collections.abc import Callable
from typing import Any

from .._names import PROCESS_ALIASES
from ..engine import Method
from .parsing import ConfigError, _first_line
from .registry import ACTIVATIONS, DECENTRALIZED, METHODS, PROBLEMS, PROCESSES, RULE_NEEDS

__all__ = [
    "GROUPS",
    "decentralized",
    "installed",
    "method",
    "method_needs",
    "problem",
    "process",
    "refresh",
]

#: What a configuration names -> the entry-point group an installed package declares it in.
GROUPS = {
    "methods": "stochmix.methods",
    "problems": "stochmix.problems",
    "participation": "stochmix.participation",
}

_BUILT_IN: dict[str, Any] = {
    "methods": METHODS,
    "problems": PROBLEMS,
    # a [participation] table of decentralized methods takes the activation kinds too
    "participation": {**PROCESSES, **ACTIVATIONS},
}
#: old spellings a configuration still reads (with a warning) -> the kind each one means
_ALIASES: dict[str, dict[str, str]] = {"participation": PROCESS_ALIASES}


def _distribution(entry: metadata.EntryPoint) -> str:
    """The distribution that declares ``entry``, as ``name version``."""
    dist = getattr(entry, "dist", None)
    if dist is None:
        return "an unknown distribution"
    return f"the distribution {dist.metadata['Name']} {dist.version}"


def _declared(entry: metadata.EntryPoint, group: str) -> str:
    return f"entry point {entry.name} = {entry.value!r} (group {group}, {_distribution(entry)})"


@functools.cache
def _entry_points(what: str) -> dict[str, metadata.EntryPoint]:
    """The entry points of ``what``'s group by name, read once; a name that is built in,
    or that two distributions declare differently, is refused."""
    group = GROUPS[what]
    found: dict[str, metadata.EntryPoint] = {}
    for entry in metadata.entry_points(group=group):
        if entry.name in _BUILT_IN[what]:
            raise ConfigError(
                f"{_declared(entry, group)} is refused: {entry.name!r} is a built-in {what} "
                "kind; the package must declare it under another name"
            )
        alias = _ALIASES.get(what, {}).get(entry.name)
        if alias is not None:  # a configuration's kind = name means the built-in kind
            raise ConfigError(
                f"{_declared(entry, group)} is refused: {entry.name!r} is an old spelling of "
                f"the built-in {what} kind {alias!r}; the package must declare it under "
                "another name"
            )
        other = found.get(entry.name)
        if other is not None and other.value != entry.value:
            raise ConfigError(
                f"{_declared(entry, group)} is refused: {_declared(other, group)} has the same name"
            )
        found[entry.name] = entry
    return found


def installed(what: str) -> list[str]:
    """The kinds that installed packages add to ``what`` (``"methods"``, ``"problems"``
    or ``"participation"``), sorted; nothing is imported.

    Raises:
        ConfigError: a declared name that a built-in kind has, or that two distributions
            declare differently.
    """
    return sorted(_entry_points(what))


@functools.cache
def _load(what: str, name: str) -> Callable[..., Any]:
    """The object of the entry point ``name`` of ``what``'s group, loaded once."""
    group = GROUPS[what]
    entry = _entry_points(what)[name]
    try:
        loaded = entry.load()
    except Exception as error:  # noqa: BLE001 - any failure of third-party code is reported
        raise ConfigError(
            f"{_declared(entry, group)} does not load: {type(error).__name__}: {_first_line(error)}"
        ) from error
    if not callable(loaded):
        raise ConfigError(
            f"{_declared(entry, group)} is a {type(loaded).__name__}, not a class or function"
        )
    if what == "methods" and isinstance(loaded, type) and not issubclass(loaded, Method):
        raise ConfigError(
            f"{_declared(entry, group)} is the class {loaded.__name__}, not a subclass of "
            "stochmix.Method"
        )
    return loaded


def _plugin(what: str, kind: str) -> Callable[..., Any]:
    if kind not in _entry_points(what):
        raise KeyError(kind)
    return _load(what, kind)


def method(kind: str) -> tuple[Callable[..., Method], dict[str, Any]]:
    """The constructor of the method ``kind`` and the arguments the kind fixes (see
    :data:`~stochmix.config.METHODS`), built in or installed.

    Raises:
        KeyError: no such kind.
        ConfigError: an installed one that is refused or does not load.
    """
    if kind in METHODS:
        return METHODS[kind]
    return _plugin("methods", kind), {}


def decentralized(kind: str) -> bool:
    """Whether the method ``kind`` mixes over a graph sequence: a built-in decentralized
    kind, or an installed subclass of :class:`~stochmix.algorithms.DecentralizedMethod`
    (an unknown kind is not)."""
    from ..algorithms import DecentralizedMethod

    if kind in METHODS:
        return kind in DECENTRALIZED
    if kind not in _entry_points("methods"):
        return False
    factory = _load("methods", kind)
    return isinstance(factory, type) and issubclass(factory, DecentralizedMethod)


def method_needs(kind: str) -> dict[str, str]:
    """The weight-rule arguments of the decentralized method ``kind`` and the
    stochasticity each one needs (:data:`~stochmix.config.RULE_NEEDS`)."""
    if kind in RULE_NEEDS:
        return RULE_NEEDS[kind]
    return dict(getattr(method(kind)[0], "needs", {}))


def problem(kind: str) -> Callable[..., Any]:
    """The factory of the problem ``kind``, built in or installed (as :func:`method`)."""
    return PROBLEMS[kind] if kind in PROBLEMS else _plugin("problems", kind)


def process(kind: str) -> Callable[..., Any]:
    """The factory of the participation process ``kind``, built in or installed."""
    return PROCESSES[kind] if kind in PROCESSES else _plugin("participation", kind)


def refresh() -> None:
    """Forget the entry points read so far: the next use reads them again (after a
    package is installed into the running interpreter)."""
    _entry_points.cache_clear()
    _load.cache_clear()
    importlib.invalidate_caches()

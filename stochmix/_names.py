"""One name per thing: the spellings that earlier releases used for a graph, a drop model
or a command-line choice, and the warning that maps each one to its name.

Every graph kind, weight rule, participation kind and drop model has one name, in
snake_case, the same on the command line, in a configuration and in Python. An old
spelling is accepted for one release with a :class:`DeprecationWarning` that names the
new one.
"""

from __future__ import annotations

import warnings

__all__ = [
    "DROP_MODEL_ALIASES",
    "GRAPH_ALIASES",
    "PROCESS_ALIASES",
    "RenamedWarning",
    "renamed",
]

#: Old spellings of graph kinds (command line, Python) -> the one name.
GRAPH_ALIASES = {
    "one-peer-exponential": "one_peer_exponential",
    "ring": "directed_ring",
    "erdos-renyi": "erdos_renyi",
    "random-directed": "random_directed",
    "directed_ring_with_random_edges": "random_directed",
}

#: Old spellings of participation kinds (configurations) -> the one name, that of the
#: Python class in snake_case (``UniformSample``, ``WeightedSample``).
PROCESS_ALIASES = {"uniform": "uniform_sample", "weighted": "weighted_sample"}

#: Old spellings of message-drop models -> the one name.
DROP_MODEL_ALIASES = {"gilbert-elliott": "gilbert_elliott"}


class RenamedWarning(DeprecationWarning):
    """An old spelling of a name was given (the command shows it as one line)."""


def renamed(value, name: str, aliases: dict[str, str], stacklevel: int = 3):
    """``value``, or the name an old spelling stands for, with a :class:`RenamedWarning`
    (a DeprecationWarning).

    Args:
        value: what the caller gave (anything; only a string in ``aliases`` is mapped).
        name: the argument, option or key, as the warning shows it.
        aliases: old spelling -> new name.
        stacklevel: passed to :func:`warnings.warn` (3: the caller of the caller).

    Returns:
        The new name for an old spelling, else ``value`` unchanged.
    """
    if isinstance(value, str) and value in aliases:
        new = aliases[value]
        warnings.warn(
            f"{name} {value!r} is deprecated and will be refused in the next release;"
            f" write {new!r}",
            RenamedWarning,
            stacklevel=stacklevel,
        )
        return new
    return value

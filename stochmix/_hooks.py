"""Extension points called the way the release a user's override was written for calls
them: when a hook gained an argument, an override that does not take it is called
without it, with a :class:`DeprecationWarning` naming the new form (for one release).

Leaf module: imports nothing of stochmix.
"""

from __future__ import annotations

import inspect
import warnings

__all__ = ["call_hook"]

_TAKES: dict = {}  # (the class's function, argument count) -> whether it takes them


def _takes(function, count: int) -> bool:
    """Whether the bound ``function`` accepts ``count`` positional arguments."""
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # a builtin or a C callable: assume it does
        return True
    try:
        signature.bind(*range(count))
    except TypeError:
        return False
    return True


def call_hook(obj, name: str, args: tuple, added: tuple, since: str, new_form: str):
    """``obj.<name>(*args, *added)``; if ``obj``'s override of the hook takes only
    ``args`` (written before ``added`` existed, in stochmix ``since``), ``obj.<name>(*args)``
    with a DeprecationWarning that names ``new_form``."""
    hook = getattr(obj, name)
    key = (getattr(type(obj), name, None), len(args) + len(added))
    found = _TAKES.get(key)
    if found is None:
        found = _TAKES[key] = _takes(hook, len(args) + len(added))
    if found:
        return hook(*args, *added)
    warnings.warn(
        f"{type(obj).__name__}.{name} takes the arguments of stochmix {since}; it is called "
        f"the old way until the next release: write it as {new_form}",
        DeprecationWarning,
        stacklevel=3,
    )
    return hook(*args)

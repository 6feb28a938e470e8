"""Whether a key a method inherits still speaks for its class.

A method's :meth:`~stochmix.engine.model.method.Method.template_key`,
:meth:`~stochmix.engine.model.method.Method.phase_key` and
:meth:`~stochmix.engine.model.method.Method.segment_key` claim that rounds with equal keys
build the same phases (up to who takes part). The engine checks the claim once, on a key's
second round, and trusts it afterwards. A built-in key is written for the built-in class's
own hooks. A user's subclass that overrides a hook the round reads (``round_steps``,
``aggregate``, ``round_phases``, ...) without giving the key itself may change its rounds
later than that check (a step count or a step size that changes at round 100 under the
same key): the inherited key would plan those rounds from the first ones, a silent wrong
number. So a key inherited past such a subclass is not used (:func:`method_key` gives
None): its rounds are built in full, and ``explain`` says why
(:func:`untrusted_key`). A subclass states its own key to have its rounds templated,
cached or segmented again.

Only overrides count: a method defined in a user's class that also exists in one of its
bases (helpers with new names are called only from overridden hooks), other than the
hooks that run once a run or never shape a round (:data:`ONCE`). Classes of stochmix
itself are trusted (their keys are written and tested for their own hooks). A key that a
base class derives from a declaration of its subclasses (``key_declarations``: a
decentralized method's ``rounds_repeat``) speaks for the class that states it.
"""

from __future__ import annotations

__all__ = ["KEYS", "ONCE", "method_key", "untrusted_key", "why_untrusted"]

#: The keys a method gives the engine.
KEYS = ("template_key", "phase_key", "segment_key")

#: Hooks that do not shape a round's phases: run once a run (checks, the start, the
#: state's blocks), descriptions and the keys themselves.
ONCE = frozenset(
    {
        "start",
        "blocks",
        "check_problem",
        "check_participation",
        "check_everyone",
        "fingerprint",
        "consensus_error",
        "segment_variants",
        "template_groups",
        "round_trips",
        *KEYS,
    }
)


def _library(cls: type) -> bool:
    module = getattr(cls, "__module__", "") or ""
    return module == "stochmix" or module.startswith("stochmix.")


def _overrides(cls: type) -> list[str]:
    """The round hooks ``cls`` overrides: its functions and properties (not plain data)
    that one of its bases also has, but :data:`ONCE` and dunders."""
    found = []
    for name, value in vars(cls).items():
        if name in ONCE or (name.startswith("__") and name.endswith("__")):
            continue
        if not (callable(value) or isinstance(value, (property, staticmethod, classmethod))):
            continue
        if any(hasattr(base, name) for base in cls.__mro__[1:]):
            found.append(name)
    return sorted(found)


_FOUND: dict[tuple[type, str], tuple[str, tuple[str, ...]] | None] = {}


def untrusted_key(cls: type, key: str) -> tuple[str, tuple[str, ...]] | None:
    """``(class, hooks)`` when the ``key`` of ``cls`` (one of :data:`KEYS`) is inherited past
    a user's class that overrides round hooks: the first such class's name and the hooks
    it overrides; None when the key speaks for ``cls``: given by ``cls`` or a class below
    which nothing overrides a round hook, or read from a declaration (a name in the
    class's ``key_declarations``, such as a decentralized method's ``rounds_repeat``) that
    such a class states itself."""
    if (cls, key) not in _FOUND:
        _FOUND[cls, key] = _first_override(cls, key)
    return _FOUND[cls, key]


def _first_override(cls: type, key: str) -> tuple[str, tuple[str, ...]] | None:
    declarations = frozenset(getattr(cls, "key_declarations", ()))
    for klass in cls.__mro__:
        own = vars(klass)
        if key in own or not declarations.isdisjoint(own):
            return None
        if _library(klass):
            continue
        hooks = _overrides(klass)
        if hooks:
            return klass.__qualname__, tuple(hooks)
    return None


def method_key(method, key: str, *args):
    """``method.<key>(*args)``, or None when the key is inherited past an overriding
    subclass (:func:`untrusted_key`)."""
    if untrusted_key(type(method), key) is not None:
        return None
    return getattr(method, key)(*args)


def why_untrusted(method, key: str) -> str | None:
    """A sentence for ``explain``: why the method's ``key`` is not used, or None."""
    found = untrusted_key(type(method), key)
    if found is None:
        return None
    klass, hooks = found
    return (
        f"{klass} overrides {', '.join(hooks)} and inherits its {key}, which speaks for its "
        f"base class's hooks only: every round is built in full; give {klass} its own "
        f"{key} to have its rounds share plans (the engine checks it on a key's second round)"
    )

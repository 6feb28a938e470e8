"""Whether a key a method inherits still speaks for its class.

A method's :meth:`~stochmix.engine.model.method.Method.template_key`,
:meth:`~stochmix.engine.model.method.Method.phase_key` and
:meth:`~stochmix.engine.model.method.Method.segment_key` claim that rounds with equal keys
build the same phases (up to who takes part). The engine checks the claim once, on a key's
second round, and trusts it afterwards. A built-in key is written for the built-in class's
own hooks. A user's subclass (or mixin) that overrides a hook the round reads
(``round_steps``, ``aggregate``, ``round_phases``, ...) without giving the key itself may
change its rounds later than that check (a step count or a step size that changes at round
100 under the same key): the inherited key would plan those rounds from the first ones, a
silent wrong number. So a key inherited past such an override is not used
(:class:`MethodKeys` gives None): those rounds are planned without it, and ``explain`` says
why. A user's class (or mixin) states its own key to have its rounds templated, cached or
segmented again.

What counts as an override: an attribute of a user's class, in effect for the method
(not shadowed by a class before it), that is a function or a descriptor (a property, a
``functools.partialmethod``, ...) and that a class after it also has, or a descriptor
other than a plain function, static or class method (a property may stand for what a base
sets on its instances, such as ``lr``); and a callable set on the instance in the place of
a class attribute. Not counted: data attributes, new helper methods (called only from
overridden hooks), dunders and the hooks that run once a run or never shape a round
(:data:`ONCE`). Classes of stochmix itself are trusted (their keys are written and tested
for their own hooks). A key that a base class derives from a declaration of its subclasses
(``key_declarations``: a decentralized method's ``rounds_repeat``, read by the keys of
:class:`~stochmix.algorithms.decentralized_base.DecentralizedMethod`) speaks for a user's
class that states the declaration itself, and for the classes it derives from.
"""

from __future__ import annotations

import types

__all__ = ["KEYS", "ONCE", "MethodKeys", "untrusted_key"]

#: The keys a method gives the engine.
KEYS = ("template_key", "phase_key", "segment_key")

#: Hooks that do not shape a round's phases: run once a run (checks, the start, the
#: state's blocks), what a run reports, descriptions and the keys themselves.
ONCE = frozenset(
    {
        "start",
        "blocks",
        "check_problem",
        "check_participation",
        "check_everyone",
        "fingerprint",
        "consensus_error",
        "output",
        "sent_floats",
        "steps_key",
        "segment_variants",
        "template_groups",
        "round_trips",
        *KEYS,
    }
)

#: What each key's refusal costs, for ``explain``.
_LOSS = {
    "template_key": "its rounds are not templated",
    "phase_key": "its plans are not reused from round to round",
    "segment_key": "its ticks do not run in compiled segments",
}


def _library(cls: type) -> bool:
    module = getattr(cls, "__module__", "") or ""
    return module == "stochmix" or module.startswith("stochmix.")


def _hook_like(value) -> bool:
    return callable(value) or hasattr(value, "__get__")


def _overrides(klass: type, mro: tuple) -> list[str]:
    """The round hooks ``klass`` (a class of ``mro``) overrides for the method: see the
    module docstring."""
    at = mro.index(klass)
    later = mro[at + 1 :]
    found = []
    for name, value in vars(klass).items():
        if name in ONCE or (name.startswith("__") and name.endswith("__")):
            continue
        if not _hook_like(value):
            continue
        if any(name in vars(k) for k in mro[:at]):
            continue  # shadowed by a class before it
        overrides = any(name in vars(k) for k in later)
        plain = isinstance(value, (types.FunctionType, staticmethod, classmethod, type))
        if overrides or not plain:
            found.append(name)
    return sorted(found)


def untrusted_key(cls: type, key: str) -> tuple[str, tuple[str, ...]] | None:
    """``(class, hooks)`` when the ``key`` of ``cls`` (one of :data:`KEYS`) is inherited past
    a user's class that overrides round hooks: the first such class's name and the hooks
    it overrides; None when the key speaks for ``cls`` (see the module docstring)."""
    mro = cls.__mro__
    definer = next((k for k in mro if key in vars(k)), None)
    if definer is None or not _library(definer):
        return None  # no key, or the user's own
    declarer = next((k for k in mro if "key_declarations" in vars(k)), None)
    declared = frozenset(vars(declarer)["key_declarations"]) if declarer is definer else ()
    for klass in mro:
        if _library(klass):
            continue
        if declared and not declared.isdisjoint(vars(klass)):
            return None  # stated by this class, for itself and the classes it derives from
        hooks = _overrides(klass, mro)
        if hooks:
            return klass.__name__, tuple(hooks)
    return None


def _instance_hooks(method) -> tuple[str, ...]:
    """Callables set on the instance in the place of a class's round hook."""
    cls = type(method)
    own = getattr(method, "__dict__", {})
    return tuple(
        sorted(
            name
            for name, value in own.items()
            if name not in ONCE
            and not name.startswith("__")
            and callable(value)
            and callable(getattr(cls, name, None))
        )
    )


class MethodKeys:
    """A method's keys as the engine takes them, worked out once (for a run): ``get(key,
    *args)`` is ``method.<key>(*args)``, or None when the key does not speak for the
    method's class (see the module docstring); ``why(key)`` says why, for ``explain``."""

    def __init__(self, method):
        self.method = method
        own = getattr(method, "__dict__", {})
        hooks = _instance_hooks(method)
        self._refused: dict[str, tuple[str, tuple[str, ...]] | None] = {}
        for key in KEYS:
            if key in own:
                found = None  # the instance's own key
            elif hooks:
                found = (f"this {type(method).__name__} object", hooks)
            else:
                found = untrusted_key(type(method), key)
            self._refused[key] = found

    def get(self, key: str, *args):
        if self._refused[key] is not None:
            return None
        return getattr(self.method, key)(*args)

    def refused(self, key: str) -> bool:
        """Whether the method's own ``key`` is set aside (whatever it would give)."""
        return self._refused[key] is not None

    def why(self, key: str) -> str | None:
        """A sentence: why ``key`` is not used, or None."""
        found = self._refused[key]
        if found is None:
            return None
        who, hooks = found
        declared = getattr(type(self.method), "key_declarations", ())
        fix = f"give it its own {key}"
        if declared:
            fix = (
                f"state {' or '.join(f'{d} = True' for d in declared)} on the class if its "
                f"iterations repeat (the keys read it), or give it its own {key}"
            )
        return (
            f"{who} overrides {', '.join(hooks)} and inherits its {key}, written for its base "
            f"class's hooks only, so {_LOSS[key]}; {fix} (the engine checks a key on its "
            "second round)"
        )

"""Capability flags that stay true to the methods they describe.

A class declares what its methods allow as plain class attributes (``pure_gradients =
True`` on a problem, ``reports_node_average = True`` on a method); the engine reads the
flags as they are. A flag describes the methods it was written with, so a subclass that
rewrites one of them without declaring the flag again must not inherit it:
:func:`keep_declarations`, called from ``__init_subclass__``, sets it False there (or True
where the subclass writes a member that re-establishes it). It looks at the new class's
own body only, once, when the class is made.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

__all__ = ["Declaration", "keep_declarations"]


class Declaration(NamedTuple):
    """What one flag describes: ``described``, the members whose rewriting turns it off,
    and ``renewed``, those whose rewriting turns it back on (they are written for the
    rewritten ones, as a problem's ``row_gradient`` is for its gradients)."""

    described: tuple[str, ...]
    renewed: tuple[str, ...] = ()


def keep_declarations(cls: type, declarations: Mapping[str, Declaration]) -> None:
    """For each ``flag: Declaration`` that ``cls``'s body does not set itself: True when
    the body defines one of its ``renewed`` members, else False when it defines one of its
    ``described`` members, else inherited as it is."""
    own = vars(cls)
    for flag, declaration in declarations.items():
        if flag in own:
            continue
        if any(name in own for name in declaration.renewed):
            setattr(cls, flag, True)
        elif any(name in own for name in declaration.described):
            setattr(cls, flag, False)

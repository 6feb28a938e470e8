"""The engine's module paths before its stages became folders (0.1: one flat folder), kept
importable for one release: ``import stochmix.engine.loop`` gives
:mod:`stochmix.engine.runner.loop` with a :class:`DeprecationWarning` naming the new path.

Only the names below are redirected (a finder on :data:`sys.meta_path` that answers for
nothing else), and every target is a module of this package.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings

__all__ = ["MOVED", "install"]

_ENGINE = __name__.rpartition(".")[0]

#: old module name under ``stochmix.engine`` -> its new modules (several where it was split)
MOVED: dict[str, tuple[str, ...]] = {
    **{
        name: (f"model.{name}",)
        for name in (
            "activated blockwise equations layout method phase phase_cache rowmap terms traffic"
        ).split()
    },
    **{
        name: (f"plan.{name}",)
        for name in "capabilities liveness planner schedule slowpath template".split()
    },
    **{
        name: (f"codegen.{name}",)
        for name in "program row_statements rowwise segment_kernel tensors torch_program".split()
    },
    **{
        name: (f"runner.{name}",)
        for name in (
            "checkpoint checkpointer explain loop progress recorder result rounds segments"
        ).split()
    },
    "distributed": ("backends.distributed",),
    "threads": ("backends.threads",),
    "backend_names": ("backends.names",),
    "execute": ("plan.round_plan", "plan.gradients", "codegen.cache", "backends.dispatch"),
}


class _Redirect(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``stochmix.engine.<old>`` and loads it as its new module (or, for a module
    that was split, a module that reads its names from the new ones)."""

    def find_spec(self, fullname, path=None, target=None):
        package, _, name = fullname.rpartition(".")
        if package != _ENGINE or name not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self)

    def create_module(self, spec):
        name = spec.name.rpartition(".")[2]
        targets = [f"{_ENGINE}.{new}" for new in MOVED[name]]
        warnings.warn(
            f"{spec.name} moved to {' and '.join(targets)} (the engine's stages are folders "
            "now); the old path goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        modules = [importlib.import_module(target) for target in targets]
        if len(modules) == 1:
            return modules[0]
        merged = types.ModuleType(spec.name, f"Moved to {', '.join(targets)}.")
        for module in modules:
            for key in getattr(module, "__all__", ()):
                setattr(merged, key, getattr(module, key))
        return merged

    def exec_module(self, module):
        pass  # the target module ran when it was imported


def install() -> None:
    """Put the redirecting finder on :data:`sys.meta_path` (once)."""
    if not any(isinstance(finder, _Redirect) for finder in sys.meta_path):
        sys.meta_path.append(_Redirect())

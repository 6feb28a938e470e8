"""The disk cache of compiled row-wise programs: one module file per program structure in a
private folder, so that Numba's own cache compiles a structure once per machine, not once
per process (see :func:`cache_dir` for what the cache trusts and what it refuses).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.abc
import importlib.util
import os
import stat
import sys
import tempfile
import threading
import types
import warnings
from pathlib import Path

import numpy as np

from ..model.kernels import KERNELS

__all__ = ["HELPERS", "cache_dir", "cached_function", "compiled_rows"]

# The stochmix._compiled helpers the generated code calls by name (both where it is
# compiled in memory and in the module text kept in the disk cache).
HELPERS = (
    "prefetch_read",
    "prefetch_write",
    "rounded_as",
    *(kernel.numba for kernel in KERNELS.values()),
)
#: the writer whose source keys every cached program (its code shapes what is generated)
WRITER = "stochmix.engine.codegen.rowwise"


def cache_dir() -> Path | None:
    """Where compiled programs are kept between processes: ``$STOCHMIX_CACHE/programs``
    ("off" disables the cache), else ``$XDG_CACHE_HOME/stochmix/programs`` or
    ``~/.cache/stochmix/programs``.

    What the cache trusts: Numba keeps each program's machine code with an index that is a
    pickle, which runs code when loaded. So the folder must be private: it is created with
    mode 0700, and a folder (or its ``__pycache__``) that is a link, belongs to another
    user or can be written by others is refused with a warning, and programs are then
    compiled in memory. The program's Python text is never read back from the file: the
    text generated in this process is what runs, and the file (rewritten when it differs)
    only keys Numba's cache."""
    chosen = os.environ.get("STOCHMIX_CACHE")
    if chosen == "off":
        return None
    if chosen:
        return Path(chosen) / "programs"
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "stochmix" / "programs"


def _importable(function) -> tuple[str, str] | None:
    """(module, name) that imports the Numba function ``function`` back, or None."""
    py = getattr(function, "py_func", None)
    module, name = getattr(py, "__module__", None), getattr(py, "__qualname__", "")
    if not module or module == "__main__" or "." in name or "<" in name:
        return None
    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError:
        return None
    return (module, name) if found is function else None


def _source_digest(module: str) -> str:
    """A hash of a module's source file (a cached program inlines its kernels)."""
    path = getattr(sys.modules.get(module), "__file__", None)
    return hashlib.sha256(Path(path).read_bytes()).hexdigest() if path else "?"


def cached_function(source: str, gradient) -> object | None:
    """The program's function from a module file in :func:`cache_dir`, so that Numba's own
    cache (``cache=True``) compiles it once per machine instead of once per process; None
    when there is no cache or the kernels cannot be imported by name (the caller then
    compiles in memory). The file name hashes the source, the kernels' module sources and
    the versions of stochmix, Numba and NumPy, so nothing stale is ever loaded."""
    folder = cache_dir()
    if folder is None:
        return None
    import numba

    from ..._version import __version__

    lines = [
        "import numba",
        "import numpy as np",
        "",
        f"from stochmix._compiled import inlined, {', '.join(HELPERS)}",
    ]
    parts = [source, __version__, numba.__version__, np.__version__, _source_digest(WRITER)]
    parts.append(_source_digest("stochmix._compiled"))
    for alias, function in zip(("grad", "fetch"), gradient or (), strict=False):
        where = _importable(function)
        if where is None:
            return None
        lines.append(f"from {where[0]} import {where[1]} as {alias}")
        parts += [*where, _source_digest(where[0])]
    lines += [f"{alias} = inlined({alias})" for alias in ("grad", "fetch")[: len(gradient or ())]]
    digest = hashlib.sha256("\0".join(parts).encode()).hexdigest()[:24]
    text = "\n".join(lines) + "\n\n\n@numba.njit(nogil=True, boundscheck=False, cache=True)\n"
    text += source
    name = f"stochmix_program_{digest}"
    path = folder / f"{name}.py"
    with _CACHE_LOCK:  # threads starting the same structure build its module once
        module = sys.modules.get(name)
        if module is not None:
            return module.rows
        try:
            if not _private_folder(folder) or not _private_folder(folder / "__pycache__"):
                return None
            if not _holds(path, text):
                _write_exclusively(folder, path, text)
            # the module runs *our* text, never the file's: the file is only what Numba's
            # cache is keyed by (its path and stamp)
            module = types.ModuleType(name)
            module.__file__ = str(path)
            sys.modules[name] = module  # Numba's cache finds the module again by name
            exec(compile(text, str(path), "exec"), module.__dict__)
        except (OSError, SyntaxError, ImportError):
            sys.modules.pop(name, None)
            return None
        _keep(name, module)
    return module.rows


_CACHE_LOCK = threading.RLock()
_MODULES: dict = {}  # name -> every program module this process made


class _ProgramFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds this process's program modules by name when they are no longer in
    ``sys.modules``: Numba's cache imports a program's module by name when it loads the
    machine code (a dispatcher compiled later for a new signature does so), and code that
    tidies ``sys.modules`` must not make that load fail. It finds nothing else."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _MODULES:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return _MODULES[spec.name]

    def exec_module(self, module) -> None:
        """Nothing to run: the module was made and run when the program was."""


_FINDER = _ProgramFinder()


def _keep(name: str, module) -> None:
    _MODULES[name] = module
    if _FINDER not in sys.meta_path:
        sys.meta_path.append(_FINDER)


_REFUSED: set = set()


def _private_folder(folder: Path) -> bool:
    """Whether ``folder`` is fit to hold compiled programs, creating it (mode 0700) and its
    missing parents when needed: a real folder (not a link), owned by this user, that no
    one else may write to. Numba's index of compiled code beside each program is a pickle,
    so a folder another user can write to could run their code here; such a folder is
    refused with a one-line warning (once), and programs are compiled in memory."""
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(folder)
    except OSError:
        return False
    why = None
    if not stat.S_ISDIR(info.st_mode):
        why = "it is not a folder (a link?)"
    elif hasattr(os, "getuid") and info.st_uid != os.getuid():
        why = f"it belongs to user id {info.st_uid}, not to this user ({os.getuid()})"
    elif info.st_mode & 0o022:
        why = f"others may write to it (mode {stat.S_IMODE(info.st_mode):o})"
    if why is None:
        return True
    if str(folder) not in _REFUSED:
        _REFUSED.add(str(folder))
        warnings.warn(
            f"stochmix: not using the program cache {str(folder)!r}: {why}; compiling in "
            "memory (set STOCHMIX_CACHE to a private folder, or 'off')",
            RuntimeWarning,
            stacklevel=5,
        )
    return False


def _holds(path: Path, text: str) -> bool:
    """Whether ``path`` is a regular file (not a link) holding exactly ``text``."""
    try:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode):
            return False
        return path.read_bytes() == text.encode()
    except OSError:
        return False


def _write_exclusively(folder: Path, path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a scratch file created exclusively (a random
    name, never following a link, mode 0600), renamed over ``path`` (atomic)."""
    handle, scratch = tempfile.mkstemp(prefix=".", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(scratch, path)
    except BaseException:
        if os.path.exists(scratch):
            os.unlink(scratch)
        raise


def compiled_rows(source: str, gradient=None, name: str = "<stochmix program>"):
    """The generated function ``rows`` of ``source`` compiled by Numba: from the disk cache
    (:func:`cached_function`) where it can be, else in memory, with the
    :data:`HELPERS` and the problem's ``gradient`` ``(kernel, fetch)`` (inlined) in its
    namespace; ``name`` names the source in tracebacks."""
    cached = cached_function(source, gradient)
    if cached is not None:
        return cached
    import numba

    from ... import _compiled

    namespace = {"np": np, **{helper: getattr(_compiled, helper) for helper in HELPERS}}
    if gradient is not None:
        namespace["grad"], namespace["fetch"] = map(_compiled.inlined, gradient)
    exec(compile(source, name, "exec"), namespace)
    return numba.njit(nogil=True, boundscheck=False)(namespace["rows"])

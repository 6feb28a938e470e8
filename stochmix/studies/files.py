"""The study's own files, written and read without following links.

A study folder may sit on a file system that others use too (a Dask cluster needs one that
every worker sees), so a study writes only into folders that are its user's own:

- a folder it writes into (the study folder, ``cells/`` and each cell's folder) must be a
  real folder (not a link), owned by this user and writable by no one else (no group or
  others write bit); a folder missing is created with mode 0755; any other folder is
  refused with one :class:`~stochmix.studies.spec.SweepError` naming it and why
  (:func:`private_folder`);
- its own files (``summary.json``, the marker ``done``) are written through a scratch file
  created exclusively (``mkstemp``: a random name, ``O_CREAT | O_EXCL | O_NOFOLLOW``),
  renamed over the file (:func:`write_atomic`), so a link planted at any name is never
  followed;
- files read back are opened with ``O_NOFOLLOW`` and must be regular files
  (:func:`read_regular`).

The same discipline as the program cache (:mod:`stochmix.engine.codegen.disk_cache`) and
the checkpoints (:mod:`stochmix.engine.runner.checkpoint`).
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from pathlib import Path

from .spec import SweepError

__all__ = ["file_digest", "private_folder", "read_regular", "remove_scratch", "write_atomic"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _why_not_private(info: os.stat_result) -> str | None:
    """Why a folder with ``info`` (from ``lstat``) is not this user's own, or None."""
    if stat.S_ISLNK(info.st_mode):
        return "it is a link (a study does not write through links)"
    if not stat.S_ISDIR(info.st_mode):
        return "it is not a folder"
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        return f"it belongs to user id {info.st_uid}, not to this user ({os.getuid()})"
    if os.name == "posix" and info.st_mode & 0o022:
        mode = stat.S_IMODE(info.st_mode)
        return f"others may write to it (mode {mode:o}; `chmod go-w` it)"
    return None


def private_folder(path, what: str = "study folder") -> Path:
    """``path`` as a folder this user alone writes to, created (mode 0755) if missing.

    Args:
        path: the folder; its parent must exist.
        what: how the error names it (``"study folder"``, ``"cell folder"`` ...).

    Returns:
        ``path``.

    Raises:
        SweepError: ``path`` is a link, not a folder, owned by another user, or writable
            by group or others (the message names it and why).
    """
    path = Path(path)
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        pass
    except OSError as error:
        raise SweepError(f"{what} {str(path)!r} cannot be created: {error.strerror}") from None
    try:
        info = os.lstat(path)
    except OSError as error:
        raise SweepError(f"{what} {str(path)!r} cannot be read: {error.strerror}") from None
    why = _why_not_private(info)
    if why is not None:
        raise SweepError(f"{what} {str(path)!r} is refused: {why}")
    return path


def write_atomic(path, text: str) -> None:
    """Write ``text`` to ``path`` through a scratch file of the same folder created
    exclusively (a random name, never following a link), made mode 0644, then renamed over
    ``path`` (a link at ``path`` is replaced, never followed). Raises OSError."""
    path = Path(path)
    handle, scratch = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            if hasattr(os, "fchmod"):
                os.fchmod(out.fileno(), 0o644)
            out.write(text)
        os.replace(scratch, path)
    except BaseException:
        if os.path.lexists(scratch):
            os.unlink(scratch)
        raise


def read_regular(path) -> bytes:
    """The bytes of ``path``, which must be a regular file: a link is not followed.

    Raises:
        OSError: missing, a link, or not a regular file.
    """
    handle = os.open(path, os.O_RDONLY | _NOFOLLOW)
    with os.fdopen(handle, "rb") as source:
        if not stat.S_ISREG(os.fstat(source.fileno()).st_mode):
            raise OSError(f"{path} is not a regular file")
        return source.read()


def file_digest(path) -> str:
    """SHA-256 of a regular file's bytes (:func:`read_regular`). Raises OSError."""
    return hashlib.sha256(read_regular(path)).hexdigest()


def remove_scratch(folder: Path, names: tuple[str, ...]) -> None:
    """Remove the scratch files (``.<name>.*.tmp``, regular files only) that an earlier
    run killed mid-write left in ``folder``."""
    prefixes = tuple(f".{name}." for name in names)
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith(prefixes) and entry.name.endswith(".tmp"):
            try:
                if entry.is_file(follow_symlinks=False):
                    os.unlink(entry.path)
            except OSError:
                pass

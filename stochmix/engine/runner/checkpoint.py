"""Checkpoints of a run: written atomically, verified when read, never able to run code.

A checkpoint holds the stacked state, the per-round records so far, the method's per-run
memory (learned estimates), the stochastic-gradient generator's state, the number of rounds
done, and the run's identity; the participation stream is restored by replaying its seeded
masks up to that round.

**Format** (version :data:`FORMAT`): a first line ``stochmix-checkpoint``, a second line
of JSON (the format version, the body's length and SHA-256), then the body: a NumPy
``.npz`` archive read with ``allow_pickle=False``, whose entry ``meta`` is a JSON text, the
payload's structure with every array replaced by a reference ``{"__array__": "a3"}`` to an
entry of the archive. Loading checks the first line, the version, the length and the
digest before it reads anything else, so a truncated file, any flipped byte or another
file's contents give one :class:`CheckpointError` naming the file. Objects in the method's
memory are saved through their ``checkpoint_state()`` (plain data) and restored into the
fresh objects of the resumed run through ``restore_state(state)``: nothing in the file
names a class to build or a function to call.

Writing: a scratch file created exclusively (``mkstemp``: a random name, ``O_EXCL``, never
following a link) in the checkpoint's folder, flushed to disk, then renamed over the
checkpoint, so a crash at any moment leaves the previous checkpoint whole.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np

__all__ = [
    "CheckpointError",
    "FORMAT",
    "MAGIC",
    "check_folder_writable",
    "check_writable",
    "load",
    "restore_memory",
    "save",
]

FORMAT = 2
MAGIC = "stochmix-checkpoint"


class CheckpointError(ValueError):
    """A checkpoint file that cannot be read back: the message names the file."""


# ------------------------------------------------------------------ encoding the payload
def _encode(value, arrays: dict, where: str):
    """``value`` as JSON-able data, its arrays moved into ``arrays``."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "biuf":
            raise TypeError(f"checkpoint: {where} holds an array of dtype {value.dtype}")
        name = f"a{len(arrays)}"
        arrays[name] = value
        return {"__array__": name}
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return {"__float__": repr(float(value))}  # exact, and inf/nan survive JSON
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return {"__list__": [_encode(v, arrays, f"{where}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError(f"checkpoint: {where} has keys that are not strings")
        return {"__dict__": {k: _encode(v, arrays, f"{where}.{k}") for k, v in value.items()}}
    state = getattr(value, "checkpoint_state", None)
    if callable(state):
        return {"__state__": _encode(state(), arrays, f"{where}.checkpoint_state()")}
    raise TypeError(
        f"checkpoint: {where} is a {type(value).__name__}; objects kept between rounds must "
        "offer checkpoint_state() and restore_state(state)"
    )


def _decode(value, arrays):
    if isinstance(value, dict):
        if "__array__" in value:
            return arrays[value["__array__"]]
        if "__float__" in value:
            return float(value["__float__"])
        if "__list__" in value:
            return [_decode(v, arrays) for v in value["__list__"]]
        if "__dict__" in value:
            return {k: _decode(v, arrays) for k, v in value["__dict__"].items()}
        if "__state__" in value:
            return _SavedState(_decode(value["__state__"], arrays))
        raise ValueError(f"unknown entry {sorted(value)}")
    return value


class _SavedState:
    """An object's ``checkpoint_state()`` as read back, to hand to ``restore_state``."""

    def __init__(self, state):
        self.state = state


def restore_memory(fresh: dict, saved: dict) -> dict:
    """A resumed run's memory: ``saved`` values, objects restored in place into the
    ``fresh`` ones that the method's ``start`` made (an object the fresh run lacks is an
    error, never built from the file)."""
    out = dict(fresh)
    for key, value in saved.items():
        if isinstance(value, _SavedState):
            target = fresh.get(key)
            restore = getattr(target, "restore_state", None)
            if not callable(restore):
                raise CheckpointError(f"checkpoint memory {key!r} has no object to restore into")
            restore(value.state)
            out[key] = target
        else:
            out[key] = value
    return out


# ------------------------------------------------------------------ files
def check_folder_writable(folder, what: str) -> None:
    """Create ``folder`` (and its parents) if needed and check that a file can be created
    in it, by creating and removing a scratch file; a ValueError starting with ``what``
    otherwise (found before any work, not at the first write after it)."""
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(prefix=".probe-", suffix=".tmp", dir=folder)
        os.close(handle)
        os.unlink(probe)
    except OSError as error:
        raise ValueError(f"{what} cannot be written: {error.strerror or error}") from None


def check_writable(path) -> Path:
    """Check before a run's first round that checkpoints can be written at ``path``
    (creating its folder), and remove scratch files earlier runs left there when killed
    mid-write. Raises ValueError naming the path."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"checkpoint must be a file path, got the folder {str(path)!r}")
    check_folder_writable(path.parent, f"checkpoint {str(path)!r}")
    prefix = f".{path.name}."
    for orphan in path.parent.iterdir():  # names compared as text: no glob wildcards
        name = orphan.name
        if not (name.startswith(prefix) and name.endswith(".tmp")):
            continue
        if orphan.is_file() and not orphan.is_symlink():
            try:
                orphan.unlink()
            except OSError:
                pass
    return path


def save(path, payload: dict) -> None:
    """Write ``payload`` to ``path`` atomically (see the module docstring). Raises OSError
    when the file cannot be written; the previous checkpoint is then left as it was."""
    path = Path(path)
    arrays: dict = {}
    meta = json.dumps({"payload": _encode(payload, arrays, "payload")}, sort_keys=True)
    archive = io.BytesIO()
    np.savez(archive, meta=np.array(meta), **arrays)
    body = archive.getvalue()
    header = {"format": FORMAT, "length": len(body), "sha256": hashlib.sha256(body).hexdigest()}
    handle, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(f"{MAGIC}\n{json.dumps(header, sort_keys=True)}\n".encode())
            out.write(body)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load(path) -> dict | None:
    """The checkpoint at ``path``, verified; None when there is none.

    Raises:
        CheckpointError: the file is not a stochmix checkpoint of this version, or its
            contents do not match their digest (truncated, altered); the message names it.
    """
    path = Path(path)
    if not path.exists():
        return None
    if path.is_dir():
        raise ValueError(f"checkpoint must be a file path, got the folder {str(path)!r}")

    def bad(why: str) -> CheckpointError:
        return CheckpointError(f"checkpoint {str(path)!r} cannot be used: {why}")

    try:
        raw = path.read_bytes()
    except OSError as error:
        raise bad(f"it cannot be read ({error.strerror or error})") from None
    first, _, rest = raw.partition(b"\n")
    if first != MAGIC.encode():
        raise bad("not a stochmix checkpoint (its first line is not 'stochmix-checkpoint')")
    line, _, body = rest.partition(b"\n")
    try:
        header = json.loads(line)
        version, length, sha = header["format"], header["length"], header["sha256"]
    except (ValueError, TypeError, KeyError, UnicodeError):
        raise bad("its header is damaged") from None
    if version != FORMAT:
        raise bad(f"format {version!r}, this version reads format {FORMAT}")
    if len(body) != length or hashlib.sha256(body).hexdigest() != sha:
        raise bad("its contents do not match their length and SHA-256 (truncated or damaged)")
    try:
        with np.load(io.BytesIO(body), allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            arrays = {k: data[k] for k in data.files if k != "meta"}
        return _decode(meta["payload"], arrays)
    except (OSError, ValueError, EOFError, KeyError, TypeError, zipfile.BadZipFile) as error:
        raise bad(f"its body is not a checkpoint's ({type(error).__name__}: {error})") from None

"""Recorded participation: :class:`Trace` replays a ``(rounds, N)`` boolean array, given
as an array or read from a ``.npy`` file (never unpickled)."""

from __future__ import annotations

import os

import numpy as np
from jaxtyping import Bool

from .._validate import as_bool
from .base import ParticipationProcess
from .statistics import _check_masks


class Trace(ParticipationProcess):
    """Replay of a recorded ``(rounds, N)`` boolean array, or of a ``.npy`` file holding one.

    A file is read with ``allow_pickle=False``, so loading a trace never runs code; a file
    that cannot be read, holds pickled objects, an ``.npz`` archive or anything but a
    ``(rounds, N)`` boolean array is refused with one error naming the file.

    Every stream starts at row 0 (the seed is ignored). Past the last row the stream raises
    ``ValueError`` naming the trace length, unless ``repeat=True``, in which case it starts
    again from row 0. Probabilities are ``None``; the trace's own frequencies are
    :func:`stochmix.participation.empirical_probabilities` of :attr:`masks_array`.
    """

    def __init__(
        self,
        masks: Bool[np.ndarray, "rounds n"] | str | os.PathLike,
        repeat: bool = False,
    ):
        self.source: str | None  # the file the masks were read from
        if isinstance(masks, (str, bytes, os.PathLike)):
            self.source = os.fsdecode(masks)
            masks = _load_trace(self.source)
            name = f"masks (from {self.source!r})"
        else:
            self.source = None
            name = "masks"
        arr = _check_masks(masks, name)
        if arr.shape[1] < 1:
            raise ValueError(
                f"{name} must have shape (rounds, n_clients) with both >= 1, got {arr.shape}"
            )
        self.repeat = as_bool(repeat, "repeat")
        self.masks_array = np.array(arr, dtype=bool, copy=True)
        self.masks_array.flags.writeable = False
        self.n_clients = int(arr.shape[1])

    @property
    def rounds(self) -> int:
        """Number of recorded rounds."""
        return int(self.masks_array.shape[0])

    def _stream(self, rng):
        rows = self.masks_array
        while True:
            for row in rows:
                yield row.copy()
            if not self.repeat:
                raise ValueError(
                    f"the trace has only {rows.shape[0]} rounds (trace length "
                    f"{rows.shape[0]}); more were requested. Pass repeat=True to cycle it."
                )

    def _fields(self):
        fields = {"rounds": self.rounds, "n_clients": self.n_clients}
        if self.source is not None:
            fields["source"] = repr(self.source)
        if self.repeat:
            fields["repeat"] = True
        return fields


def _load_trace(path: str) -> np.ndarray:
    """The array of a ``.npy`` file, read without ever unpickling (``allow_pickle=False``);
    any failure is one error naming the file."""
    try:
        loaded = np.load(path, allow_pickle=False)
    except Exception as error:  # OSError, ValueError (pickled data), EOFError, ...
        reason = str(error) or type(error).__name__
        raise ValueError(f"masks: cannot load a trace from {path!r}: {reason}") from error
    if not isinstance(loaded, np.ndarray):
        if hasattr(loaded, "close"):
            loaded.close()
        raise TypeError(
            f"masks: {path!r} must hold a single .npy array, got a {type(loaded).__name__}"
        )
    return loaded


__all__ = ["Trace"]

"""Argument checks shared by every layer.

This module imports nothing else of ours, so every subpackage may use it. Each check
raises one ``TypeError`` (a value of the wrong kind: a string, a bool or a complex number
where a real number goes, floats where integers go, ...) or ``ValueError`` (the right kind
but the wrong shape, range or finiteness) whose message names the argument and shows the
bad value. One helper per kind of check:

==========================  ==============================================================
helper                      what passes
==========================  ==============================================================
:func:`as_int`              an integer (never a bool or a float), optionally in a range
:func:`as_float`            a finite real number (never a bool or a complex), in a range
:func:`as_bool`             ``True`` or ``False`` (never 0, 1, "yes", ...)
:func:`choice`              one of a set of names
:func:`flag_or_choice`      ``True``, ``False`` or one of a set of names (``"auto"``)
:func:`as_float_dtype`      float32 or float64, as a NumPy dtype
:func:`as_seed`             a seed, normalised: None, an int >= 0, a SeedSequence or a Generator
:func:`is_scalar`           (a test) one value rather than a sequence or array
:func:`as_real_array`       an array of real numbers (ints or floats), shape and finiteness
:func:`as_int_array`        an array of integers
:func:`as_bool_array`       an array of booleans (never 0/1 integers)
:func:`as_mask`             a boolean vector of a given length
:func:`as_probabilities`    a vector of probabilities in (0, 1]
:func:`as_nonnegative`      a finite vector with no negative entry
:func:`as_client_indices`   indices in ``[0, n)``, optionally distinct and increasing
:func:`as_labels`           nonnegative integer class labels
==========================  ==============================================================
"""

from __future__ import annotations

import numbers
from typing import Literal, overload

import numpy as np


def show(value, limit: int = 80) -> str:
    """``repr(value)`` on one line, cut to ``limit`` characters (for error messages)."""
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


_show = show  # the old name, still imported by mixing, participation and algorithms


def _scalar(value):
    """A 0-d NumPy array as its scalar (so ``np.float64(2)`` and ``np.array(2.0)`` pass)."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        return value[()]
    return value


def _is_bool(value) -> bool:
    return isinstance(value, (bool, np.bool_))


def as_int(value, name: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """``value`` as a Python int in ``[minimum, maximum]``; bools and floats are refused
    (``TypeError``), even integral ones such as ``2.0``."""
    value = _scalar(value)
    if _is_bool(value) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {_show(value)}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return value


def as_float(
    value,
    name: str,
    *,
    positive: bool = False,
    nonnegative: bool = False,
    maximum: float | None = None,
) -> float:
    """``value`` as a finite Python float with optional range checks; bools, complex
    numbers and strings are refused (``TypeError``)."""
    value = _scalar(value)
    if _is_bool(value) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {_show(value)}")
    value = float(value)
    if not np.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if positive and value <= 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    if nonnegative and value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return value


@overload
def as_bool(value, name: str, *, optional: Literal[False] = False) -> bool: ...
@overload
def as_bool(value, name: str, *, optional: bool) -> bool | None: ...
def as_bool(value, name: str, *, optional: bool = False) -> bool | None:
    """``True`` or ``False`` (NumPy's too); ``None`` only when ``optional``. Truthy values
    such as ``1`` or ``"yes"`` are refused (``TypeError``)."""
    if optional and value is None:
        return None
    if not _is_bool(value):
        extra = " or None" if optional else ""
        raise TypeError(f"{name} must be True or False{extra}, got {_show(value)}")
    return bool(value)


def choice(value, name: str, allowed) -> str:
    """``value`` if it is one of the names ``allowed`` (a string; anything else is a
    ``TypeError``, an unknown name a ``ValueError``)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be one of {sorted(allowed)}, got {_show(value)}")
    if value not in allowed:
        raise ValueError(f"{name} must be one of {sorted(allowed)}, got {_show(value)}")
    return value


def flag_or_choice(value, name: str, allowed) -> bool | str:
    """``True`` or ``False`` (NumPy's too, as a Python bool) or one of the names
    ``allowed``, such as ``compiled=True | False | "auto"``. Truthy values such as ``1`` are
    refused (``TypeError``), an unknown name too (``ValueError``)."""
    if _is_bool(value):
        return bool(value)
    names = " or ".join(repr(a).replace("'", '"') for a in sorted(allowed))
    if not isinstance(value, str):
        raise TypeError(f"{name} must be True, False or {names}, got {_show(value)}")
    if value not in allowed:
        raise ValueError(f"{name} must be True, False or {names}, got {_show(value)}")
    return value


def as_float_dtype(value, name: str = "dtype") -> np.dtype:
    """``value`` as the NumPy dtype float32 or float64 (from a dtype, a type such as
    ``np.float32`` or a name such as ``"float64"``). What NumPy cannot read as a dtype
    (``"floaty"``, ``3``, None, a Torch dtype) is a ``TypeError``, another dtype
    (``int32``) a ``ValueError``."""
    if value is None:
        raise TypeError(f"{name} must be float32 or float64, got None")
    try:
        dtype = np.dtype(value)
    except (TypeError, ValueError):
        raise TypeError(
            f"{name} must be float32 or float64 (a NumPy dtype, type or name), got {_show(value)}"
        ) from None
    if dtype not in (np.float32, np.float64):
        raise ValueError(f"{name} must be float32 or float64, got {dtype}")
    return dtype


# ----------------------------------------------------------------------------- seeds

_SEED_OBJECTS = (np.random.Generator, np.random.SeedSequence, np.random.BitGenerator)


def as_seed(seed, name: str = "seed"):
    """A seed normalised, the one place that decides what a seed is: ``None``; an integer
    >= 0 (Python's, NumPy's or a 0-d integer array) as a Python ``int``; or a
    ``SeedSequence``, ``BitGenerator`` or ``Generator``, returned as given. Everything
    that reads a seed (a run's Result, its checkpoint identity, the participation stream,
    stochastic gradients) sees this value, so ``np.int64(3)`` and ``3`` are one seed.
    Idempotent."""
    if seed is None or isinstance(seed, _SEED_OBJECTS):
        return seed
    seed = _scalar(seed)
    if _is_bool(seed) or not isinstance(seed, numbers.Integral):
        raise TypeError(
            f"{name} must be an integer >= 0, a SeedSequence, a Generator or None, "
            f"got {_show(seed)}"
        )
    if seed < 0:
        raise ValueError(f"{name} must be >= 0, got {int(seed)}")
    return int(seed)


def make_rng(seed, name: str = "seed") -> np.random.Generator:
    """A NumPy generator from a seed (see :func:`as_seed`); a Generator is used as is."""
    seed = as_seed(seed, name)
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(seed)


# ---------------------------------------------------------------------------- arrays


def is_scalar(value) -> bool:
    """Whether ``value`` is one value (a number, a string, None, a 0-d array) rather than a
    sequence or an array, without building an array from it (a ragged list is not scalar)."""
    if isinstance(value, np.ndarray):
        return value.ndim == 0
    if isinstance(value, np.generic):  # NumPy scalars have __array__ too
        return True
    return not isinstance(value, (list, tuple, range)) and not hasattr(value, "__array__")


def _asarray(value, name: str) -> np.ndarray:
    """``np.asarray(value)``; a ragged nested sequence is refused naming the argument."""
    if isinstance(value, np.ndarray):
        return value
    try:
        return np.asarray(value)
    except (ValueError, TypeError):
        raise ValueError(
            f"{name} must be a rectangular array, got a ragged {type(value).__name__}: "
            f"{_show(value)}"
        ) from None


def _where(index) -> str:
    index = tuple(int(i) for i in index)
    return str(index[0]) if len(index) == 1 else str(index)


def _check_ndim(arr: np.ndarray, name: str, ndim: int | None, shape) -> None:
    if shape is not None:
        shape = tuple(shape)
        if arr.shape != shape:
            raise ValueError(f"{name} must have shape {shape}, got {arr.shape}")
    elif ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-d array, got shape {arr.shape}")


def check_finite(arr: np.ndarray, name: str) -> np.ndarray:
    """``arr`` if every entry is finite, else a ``ValueError`` naming the first bad one.
    (A finite sum settles it without an array of flags as large as ``arr``.)"""
    if arr.dtype.kind == "f" and np.isfinite(arr.sum()):
        return arr
    finite = np.isfinite(arr)
    if not finite.all():
        index = np.argwhere(~finite)[0]
        raise ValueError(f"{name} must be finite; entry {_where(index)} is {arr[tuple(index)]}")
    return arr


def as_real_array(
    value,
    name: str,
    *,
    ndim: int | None = None,
    shape=None,
    finite: bool = True,
    keep_float: bool = False,
) -> np.ndarray:
    """``value`` as a float64 array of real numbers (integers are converted; floats of
    another precision are kept when ``keep_float``). Booleans, complex numbers, strings
    and objects are refused (``TypeError``); a wrong ``ndim`` or ``shape``, or with
    ``finite`` a NaN or inf, is a ``ValueError``."""
    arr = _asarray(value, name)
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"{name} must hold real numbers, got dtype {arr.dtype}: {_show(value)}")
    _check_ndim(arr, name, ndim, shape)
    if not (keep_float and arr.dtype.kind == "f"):
        arr = arr.astype(np.float64, copy=False)
    if finite:
        check_finite(arr, name)
    return arr


def as_int_array(value, name: str, *, ndim: int | None = 1, shape=None) -> np.ndarray:
    """``value`` as an int64 array; floats (even integral ones), booleans and anything else
    are refused (``TypeError``). An empty list passes."""
    arr = _asarray(value, name)
    if arr.dtype.kind not in "iu" and not (arr.size == 0 and arr.dtype.kind == "f"):
        raise TypeError(f"{name} must hold integers, got dtype {arr.dtype}: {_show(value)}")
    _check_ndim(arr, name, ndim, shape)
    return arr.astype(np.int64, copy=False)


def as_bool_array(value, name: str, *, ndim: int | None = None, shape=None) -> np.ndarray:
    """``value`` as a boolean array; integers or floats are refused (``TypeError``), not
    cast; a wrong ``ndim`` or ``shape`` is a ``ValueError``."""
    arr = _asarray(value, name)
    if arr.dtype != np.bool_:
        raise TypeError(f"{name} must be a boolean array, got dtype {arr.dtype}: {_show(value)}")
    _check_ndim(arr, name, ndim, shape)
    return arr


def as_mask(mask, n: int | None, name: str = "mask") -> np.ndarray:
    """A boolean vector of length ``n`` (any length when ``n`` is None); integers or
    floats are refused, not cast."""
    arr = as_bool_array(mask, name)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-d boolean array, got shape {arr.shape}")
    if n is not None and arr.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},), got {arr.shape}")
    return arr


def as_probabilities(p, name: str = "probabilities", n: int | None = None) -> np.ndarray:
    """A non-empty float vector with every entry in (0, 1]."""
    arr = as_real_array(p, name, ndim=1, shape=None if n is None else (n,), finite=False)
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty, got shape (0,)")
    bad = ~((arr > 0) & (arr <= 1))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name} must lie in (0, 1]; entry {i} is {float(arr[i])!r}")
    return arr


def as_nonnegative(values, name: str, n: int | None = None) -> np.ndarray:
    """A finite float vector with no negative entry."""
    arr = as_real_array(values, name, ndim=1, shape=None if n is None else (n,))
    if (arr < 0).any():
        i = int(np.flatnonzero(arr < 0)[0])
        raise ValueError(f"{name} must be nonnegative; entry {i} is {float(arr[i])!r}")
    return arr


def as_client_indices(
    clients,
    n_clients: int | None,
    name: str = "clients",
    *,
    distinct: bool = False,
    increasing: bool = False,
) -> np.ndarray:
    """A 1-d int64 array of indices in ``[0, n_clients)`` (``>= 0`` when ``n_clients`` is
    None). ``distinct`` refuses a repeated index; ``increasing`` asks for sorted, distinct
    indices (cheaper to check: one pass)."""
    arr = as_int_array(clients, name, ndim=1)
    if arr.size == 0:
        return arr
    if increasing and arr.size > 1:
        step = np.diff(arr)
        if not (step > 0).all():
            i = int(np.flatnonzero(step <= 0)[0])
            raise ValueError(
                f"{name} must be sorted and distinct; entry {i + 1} = {arr[i + 1]} follows {arr[i]}"
            )
        low, high = arr[0], arr[-1]
    else:
        low, high = arr.min(), arr.max()
    if low < 0 or (n_clients is not None and high >= n_clients):
        bad = (arr < 0) if n_clients is None else ((arr < 0) | (arr >= n_clients))
        i = int(np.flatnonzero(bad)[0])
        where = "be >= 0" if n_clients is None else f"lie in [0, {n_clients})"
        raise ValueError(f"{name} must {where}; got entry {i} = {arr[i]}")
    if distinct and not increasing and arr.size > 1:
        ordered = np.sort(arr)
        same = ordered[1:] == ordered[:-1]
        if same.any():
            raise ValueError(
                f"{name} must be distinct; {ordered[1:][same][0]} appears more than once"
            )
    return arr


def as_labels(
    labels, name: str = "labels", *, ndim: int | None = 1, integral_floats: bool = False
) -> np.ndarray:
    """Nonnegative integer class labels as int64 (``ndim`` None: any shape). With
    ``integral_floats`` floats that are whole numbers pass too; booleans never do."""
    arr = _asarray(labels, name)
    if integral_floats and arr.dtype.kind == "f":
        if not np.isfinite(arr).all() or (arr != np.round(arr)).any():
            bad = ~np.isfinite(arr) | (arr != np.round(arr))
            index = np.argwhere(bad)[0]
            raise ValueError(
                f"{name} must be integer class labels; entry {_where(index)} is {arr[tuple(index)]}"
            )
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise TypeError(
            f"{name} must hold integer class labels, got dtype {arr.dtype}: {_show(labels)}"
        )
    _check_ndim(arr, name, ndim, None)
    arr = arr.astype(np.int64, copy=False)
    if arr.size and arr.min() < 0:
        index = np.argwhere(arr < 0)[0]
        raise ValueError(
            f"{name} must be nonnegative class labels; entry {_where(index)} is {arr[tuple(index)]}"
        )
    return arr

"""The top level of a configuration: its allowed keys, the run's name, rounds, seeds and
backend, and the run settings (device, compiled, dtype, metrics, evaluate_every, storage)."""

from __future__ import annotations

import re
from typing import Any

from ..engine.runner.result import METRICS
from .parsing import DEFAULT_SEED, ConfigError, _integer

__all__ = [
    "BEST_LR_BY",
    "DEFAULT_TOLERANCE",
    "TOP_LEVEL",
]

#: How a step-size grid picks its best step: ``"rounds_to_tolerance"`` (the default: fewest
#: rounds to ``tolerance``, the median over seeds; a step that some seed never brings there
#: ranks after every step that all do; ties, and steps that never reach it, by final error)
#: or ``"final_error"`` (the smallest final error, the mean over seeds).
BEST_LR_BY = ("rounds_to_tolerance", "final_error")

#: The default ``tolerance`` of ``best_lr_by = "rounds_to_tolerance"``: the tolerance of the
#: summary's "rounds to 1e-8" column.
DEFAULT_TOLERANCE = 1e-8

#: The top-level keys of a configuration (outside its tables) and what each one holds.
TOP_LEVEL = {
    "name",
    "rounds",
    "seed",
    "seeds",
    "backend",
    "device",
    "compiled",
    "dtype",
    "metrics",
    "evaluate_every",
    "storage",
    "best_lr_by",
    "tolerance",
    "problem",
    "participation",
    "activation",
    "graphs",
    "clock",
    "methods",
    "output",
}


def _settings(raw: dict, backend: str) -> dict:
    """The run settings of the top level, checked, with their defaults."""
    settings: dict[str, Any] = {}
    if "device" in raw:
        if not isinstance(raw["device"], str):
            raise ConfigError(f"device must be a string, got {raw['device']!r}")
        if backend != "torch":
            raise ConfigError(f'device = {raw["device"]!r} needs backend = "torch"')
        settings["device"] = raw["device"]
    compiled = raw.get("compiled", "auto")
    if not isinstance(compiled, (bool, str)) or compiled not in (True, False, "auto"):
        raise ConfigError(f'compiled must be true, false or "auto", got {compiled!r}')
    if compiled is True and backend != "numpy":
        raise ConfigError('compiled = true needs backend = "numpy"')
    settings["compiled"] = compiled
    dtype = raw.get("dtype", "float64")
    if dtype not in ("float64", "float32"):
        raise ConfigError(f"dtype must be one of ['float32', 'float64'], got {dtype!r}")
    settings["dtype"] = dtype
    metrics = raw.get("metrics", list(METRICS))
    if not isinstance(metrics, list) or not all(m in METRICS for m in metrics):
        raise ConfigError(f"metrics must be a list of names among {list(METRICS)}, got {metrics!r}")
    settings["metrics"] = list(metrics)
    every = raw.get("evaluate_every", "auto")
    if every != "auto" and not (_integer(every) and every >= 1):
        raise ConfigError(f'evaluate_every must be "auto" or a positive integer, got {every!r}')
    settings["evaluate_every"] = every
    storage = raw.get("storage", "auto")
    if storage not in ("auto", "full", "compact"):
        raise ConfigError(f'storage must be "auto", "full" or "compact", got {storage!r}')
    settings["storage"] = storage
    return settings


def _lr_choice(raw: dict) -> dict:
    """``best_lr_by`` and ``tolerance``, checked, with their defaults."""
    by = raw.get("best_lr_by", BEST_LR_BY[0])
    if by not in BEST_LR_BY:
        raise ConfigError(f"best_lr_by must be one of {list(BEST_LR_BY)}, got {by!r}")
    tolerance = raw.get("tolerance", DEFAULT_TOLERANCE)
    if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)):
        raise ConfigError(f"tolerance must be a positive number, got {tolerance!r}")
    if not 0 < tolerance < float("inf"):
        raise ConfigError(f"tolerance must be a positive number, got {tolerance!r}")
    return {"best_lr_by": by, "tolerance": float(tolerance)}


_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def _slug(stem: str) -> str:
    """A file's stem made a safe run name (the default name of a configuration file)."""
    slug = re.sub(r"[^A-Za-z0-9._-]", "_", stem).lstrip("._-")[:64]
    return slug or "experiment"


def _run_shape(raw: dict) -> tuple[str, int, list[int], str]:
    """name, rounds, seeds and backend, checked."""
    name = raw.get("name", None)
    if not isinstance(name, str) or not _SAFE_NAME.fullmatch(name):
        raise ConfigError(
            "name must be 1-64 letters, digits, '.', '_' or '-', starting with a letter or "
            f"digit (it names the run folder), got {name!r}"
        )
    rounds = raw.get("rounds", 300)
    if not _integer(rounds) or rounds < 0:
        raise ConfigError(f"rounds must be a nonnegative integer, got {rounds!r}")
    if "seeds" in raw and "seed" in raw:
        raise ConfigError("give seed or seeds, not both")
    key = "seeds" if "seeds" in raw else "seed"
    seeds = raw.get("seeds", [raw.get("seed", DEFAULT_SEED)])
    if not isinstance(seeds, list) or not seeds or not all(_integer(s) and s >= 0 for s in seeds):
        shown = seeds if key == "seeds" else raw.get("seed")
        raise ConfigError(f"{key} must be a nonnegative integer (or a list of them), got {shown!r}")
    backend = raw.get("backend", "numpy")
    if backend not in ("numpy", "torch"):
        raise ConfigError(f"backend must be one of ['numpy', 'torch'], got {backend!r}")
    return name, rounds, seeds, backend

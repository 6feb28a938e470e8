"""The ``[clock]`` table: simulated time for every run of a configuration.

.. code-block:: toml

    [clock]
    compute = { kind = "pareto", shape = 1.5, scale = 0.1 }  # seconds per local step
    download = 0.2                                            # a number: a constant
    upload = { kind = "exponential", mean = 0.5 }
    deadline = 2.0          # optional: the server waits at most this long
    partial_work = false    # late clients contribute the steps they completed
    availability = { mean_on = 60.0, mean_off = 30.0 }  # optional: on/off periods

Each delay is a number of seconds or a table with ``kind`` (``constant``,
``exponential``, ``lognormal``, ``pareto``) and the arguments of that class of
:mod:`stochmix.timing.delays`; ``speeds`` (one factor per client) may be given too. The
resolved table writes every default out.
"""

from __future__ import annotations

from ..timing import Clock, Constant, Exponential, LogNormal, OnOff, Pareto, TimeModel
from .parsing import ConfigError, _call, _first_line, _kind, _section, _with_defaults

__all__ = [
    "DELAYS",
    "clock_table",
]

#: Delay kinds of a ``[clock]`` table: kind -> class.
DELAYS = {
    "constant": Constant,
    "exponential": Exponential,
    "lognormal": LogNormal,
    "pareto": Pareto,
}

_KEYS = {"compute", "download", "upload", "speeds", "deadline", "partial_work", "availability"}


def _delay(value, where: str) -> tuple:
    """A delay and its resolved TOML value from a number or a ``{kind, ...}`` table."""
    if isinstance(value, dict):
        value = dict(value)
        kind = _kind(value, where, DELAYS)
        factory = DELAYS[kind]
        return _call(factory, where, value), _with_defaults(kind, factory, value)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return _call(Constant, where, {"value": value}, also=()), float(value)
    raise ConfigError(f"{where} must be a number of seconds or a table with kind, got {value!r}")


def clock_table(raw: dict) -> tuple:
    """The configuration's :class:`~stochmix.timing.Clock` and its resolved table, or
    ``(None, None)`` without a ``[clock]``."""
    if "clock" not in raw:
        return None, None
    table = _section(raw, "clock")
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise ConfigError(f"unknown key clock.{unknown[0]}; allowed keys: {sorted(_KEYS)}")
    resolved: dict = {}
    delays = {}
    for name, default in (("compute", 1.0), ("download", 0.0), ("upload", 0.0)):
        delays[name], resolved[name] = _delay(table.get(name, default), f"clock.{name}")
    availability = None
    if "availability" in table:
        given = table["availability"]
        if not isinstance(given, dict):
            raise ConfigError(
                f"clock.availability must be a table (mean_on, mean_off), got {given!r}"
            )
        availability = _call(OnOff, "clock.availability", dict(given), also=())
        resolved_availability = {"mean_on": availability.mean_on, "mean_off": availability.mean_off}
    try:
        model = TimeModel(**delays, speeds=table.get("speeds"))
        clock = Clock(model, table.get("deadline"), table.get("partial_work", False), availability)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"clock: {_first_line(error)}") from None
    if "speeds" in table:
        resolved["speeds"] = [float(s) for s in model.speeds]
    if clock.deadline is not None:
        resolved["deadline"] = clock.deadline
    resolved["partial_work"] = clock.partial_work
    if availability is not None:
        resolved["availability"] = resolved_availability
    return clock, resolved

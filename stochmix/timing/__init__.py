"""Simulated time: delays, the clients' time model, the virtual clock of synchronous
rounds (deadlines) and the arrival schedule of asynchronous aggregation."""

from .availability import OnOff
from .clock import Clock
from .delays import Constant, Delay, Exponential, LogNormal, Pareto
from .model import TimeModel

__all__ = [
    "Clock",
    "Constant",
    "Delay",
    "Exponential",
    "OnOff",
    "LogNormal",
    "Pareto",
    "TimeModel",
]

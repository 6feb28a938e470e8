"""Simulated time: delays, the clients' time model, the virtual clock of synchronous
rounds (deadlines) and the arrival schedule of asynchronous aggregation."""

from .clock import Clock
from .delays import Constant, Delay, Exponential, LogNormal, Pareto
from .model import TimeModel

__all__ = [
    "Clock",
    "Constant",
    "Delay",
    "Exponential",
    "LogNormal",
    "Pareto",
    "TimeModel",
]

"""The records of a parsed configuration: :class:`Experiment` and its :class:`MethodSpec`."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import algorithms
from ..participation import ParticipationProcess
from ..problems import Problem
from . import plugins

__all__ = [
    "Experiment",
    "MethodSpec",
]


@dataclass
class MethodSpec:
    """One method of a configuration: its kind, its options (every default written out),
    its lr grid, its label and, for a decentralized method, the graph sequence."""

    kind: str
    options: dict
    lrs: list[float]
    label: str
    graphs: object = None
    channel_noise: float = 0.0  # [graphs] channel_noise: algorithms.ChannelNoise

    def build(self, lr: float):
        """The method at step size ``lr``."""
        factory, fixed = plugins.method(self.kind)
        extra = {"graphs": self.graphs} if plugins.decentralized(self.kind) else {}
        method = factory(lr=lr, **fixed, **extra, **self.options)
        # (every kind of DECENTRALIZED makes a DecentralizedMethod)
        if self.channel_noise and isinstance(method, algorithms.DecentralizedMethod):
            method = algorithms.ChannelNoise(method, self.channel_noise)
        return method

    def table(self) -> dict:
        """The ``[[methods]]`` table that gives this method back."""
        lr = self.lrs if len(self.lrs) > 1 else self.lrs[0]
        return {"kind": self.kind, "label": self.label, "lr": lr, **self.options}


@dataclass
class Experiment:
    """A parsed configuration. ``tables`` holds the resolved ``[problem]``,
    ``[participation]`` and ``[graphs]`` tables and ``settings`` the resolved top-level
    run settings (both as TOML values); :meth:`resolved` puts everything back together."""

    name: str
    problem: Problem
    participation: ParticipationProcess
    methods: list[MethodSpec]
    rounds: int
    seeds: list[int]
    backend: str = "numpy"
    settings: dict = field(default_factory=dict)
    tables: dict = field(default_factory=dict)
    #: How a step-size grid picks its best step: ``best_lr_by`` and ``tolerance``
    #: (:data:`~stochmix.config.settings.BEST_LR_BY`).
    lr_choice: dict = field(
        default_factory=lambda: {"best_lr_by": "rounds_to_tolerance", "tolerance": 1e-8}
    )
    #: the ``[clock]``'s :class:`~stochmix.timing.Clock` (simulated time), or None
    clock: object = None
    #: the ``[output]`` table where the configuration gives one (:mod:`stochmix.config.output`:
    #: ``x``, the axis of the plots), else empty
    output: dict = field(default_factory=dict)

    @property
    def plot_x(self) -> str:
        """The x axis of the plots: ``output.x``, ``"round"`` by default."""
        return str(self.output.get("x", "round"))

    @property
    def run_options(self) -> dict:
        """Keyword arguments for :func:`stochmix.run` beyond the seed and the backend."""
        options = dict(self.settings)
        if "dtype" in options:
            options["dtype"] = np.dtype(options["dtype"]).type
        if "metrics" in options:
            options["metrics"] = tuple(options["metrics"])
        if self.clock is not None:
            options["clock"] = self.clock
        return options

    def resolved(self) -> dict:
        """The configuration with every default and seed written out: :func:`parse` of it
        (or :func:`load` of :func:`dumps` of it) gives the same runs."""
        top = {
            "name": self.name,
            "rounds": self.rounds,
            "seeds": list(self.seeds),
            "backend": self.backend,
        }
        return {
            **top,
            **self.settings,
            **self.lr_choice,
            **self.tables,
            "methods": [m.table() for m in self.methods],
            **({"output": dict(self.output)} if self.output else {}),
        }

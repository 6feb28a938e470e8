"""The ``[output]`` table: how ``stochmix run`` draws what it ran.

.. code-block:: toml

    [output]
    x = "messages"      # the x axis of error.png (and of a study's curves.png)
    save_models = true  # also write models.npz: every run's final node models

``x`` is one of :data:`PLOT_AXES`: ``"round"`` (the default), the running sum of the
``gradients``, ``messages``, ``floats`` or ``sample_gradients`` columns of ``metrics.csv``
up to each round, or
the simulated ``time`` (which needs a clock: a ``[clock]`` table, a clock process such as
``poisson_clocks`` or ``random_edge``, or an asynchronous method, which runs on a default
clock). ``stochmix run --x ...`` overrides it; in Python the same name is the ``x`` of
:func:`stochmix.experiments.plot` and :meth:`stochmix.Study.plot_curves`. The table is
written in the resolved configuration where the configuration gives it (it changes no
run: a study leaves it out of its cells, whose resolved text is their identity).

``save_models`` (``true`` or ``false``, the default; ``stochmix run --save-models`` sets
it) writes ``models.npz`` next to ``metrics.csv``: one array per run, named
``"<method label>, lr=<lr>, seed=<seed>"``, its :attr:`~stochmix.Result.node_models`
((n, dim): one row per client or peer; a federated method's server model is the last row
of ``metrics.csv``'s run, not in it). Its runs keep every node row (``storage = "auto"``
becomes ``"full"``; ``"compact"`` is refused).
"""

from __future__ import annotations

from .parsing import ConfigError, _section

__all__ = [
    "AXIS_LABELS",
    "PLOT_AXES",
    "check_axis",
    "output_table",
]

#: The x axes of the command's plots: the round, the running sum of a cost column of
#: ``metrics.csv``, or the simulated time of a clock.
PLOT_AXES = ("round", "gradients", "messages", "floats", "sample_gradients", "time")

#: The label each of :data:`PLOT_AXES` gets on a plot's x axis.
AXIS_LABELS = {
    "round": "round",
    "gradients": "gradient evaluations",
    "messages": "messages",
    "floats": "floats sent",
    "sample_gradients": "sample gradients",
    "time": "simulated time (s)",
}

_KEYS = {"x", "save_models"}


def output_table(raw: dict) -> dict:
    """The ``[output]`` table checked, with its defaults (``{"x": "round"}`` without one;
    ``save_models`` only where given).

    Raises:
        ConfigError: an unknown key, an ``x`` not in :data:`PLOT_AXES` or a
            ``save_models`` that is not ``true`` or ``false``.
    """
    table = _section(raw, "output", default={})
    unknown = sorted(set(table) - _KEYS)
    if unknown:
        raise ConfigError(f"unknown key output.{unknown[0]}; allowed keys: {sorted(_KEYS)}")
    x = table.get("x", "round")
    if x not in PLOT_AXES:
        raise ConfigError(f"output.x must be one of {list(PLOT_AXES)}, got {x!r}")
    if "save_models" not in table:
        return {"x": x}
    save = table["save_models"]
    if not isinstance(save, bool):
        raise ConfigError(f"output.save_models must be true or false, got {save!r}")
    return {"x": x, "save_models": save}


def _timed(exp) -> list[str]:
    """The labels of ``exp``'s methods whose runs record no simulated time."""
    from ..participation import PoissonClocks, RandomEdge

    if exp.clock is not None or isinstance(exp.participation, (PoissonClocks, RandomEdge)):
        return []
    return [
        spec.label
        for spec in exp.methods
        if not getattr(spec.build(spec.lrs[0]), "asynchronous", False)
    ]


def check_axis(x, exp, where: str = "output.x") -> str:
    """``x`` checked against :data:`PLOT_AXES` and, for ``"time"``, against what ``exp``
    records, before any run.

    Args:
        x: the axis.
        exp: the parsed :class:`~stochmix.config.Experiment`.
        where: how the error names the setting (``"output.x"`` or ``"--x"``).

    Returns:
        ``x``.

    Raises:
        ConfigError: an unknown axis, or ``"time"`` where some method records no
            simulated time (the message says to add a clock).
    """
    if x not in PLOT_AXES:
        raise ConfigError(f"{where} must be one of {list(PLOT_AXES)}, got {x!r}")
    if x == "time":
        untimed = _timed(exp)
        if untimed:
            raise ConfigError(
                f"{where} = 'time' needs simulated time, which {', '.join(untimed)} "
                "would not record: add a [clock] table to the configuration (a clock; in "
                "Python, stochmix.run(..., clock=...)) or use a clock process "
                "(poisson_clocks, random_edge)"
            )
    return x

"""The record of one run: per-round metrics, and what can be read off them."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from jaxtyping import Float

from ..._validate import as_bool, as_float
from .recorder import METRICS  # noqa: F401  (the names run(metrics=...) takes)

__all__ = [
    "AXES",
    "COLUMNS",
    "COSTS",
    "CURVES",
    "OPTIONAL_COLUMNS",
    "Result",
]

#: Per-round curves a Result may hold (``relative_error`` is derived from distance).
#: ``objective`` is the value f(x_r) itself, recorded instead of ``objective_gap`` for a
#: problem whose f_star is unknown (a learning problem such as a TorchModel).
CURVES = ("relative_error", "distance", "objective_gap", "gradient_norm", "consensus", "objective")

#: The columns of :meth:`Result.columns`, :meth:`Result.to_csv` and the command's
#: ``metrics.csv``, in order, for every run. ``wall_time`` is added only on request: it
#: differs from run to run, and the metrics of one configuration are byte-identical from run
#: to run.
COLUMNS = (
    "method", "lr", "seed", "round", *CURVES[:5], "participants", "gradients", "messages",
    "floats", "sample_gradients",
)  # fmt: skip

#: What a round costs, per round (:mod:`stochmix.engine.model.traffic`): gradient
#: evaluations, messages and floats sent, and sample gradients (component gradients of a
#: finite sum). :meth:`Result.plot` draws a curve against their running sums.
COSTS = ("gradients", "messages", "floats", "sample_gradients")

#: What :meth:`Result.plot` puts on its x axis: the round, a cost's running sum, ``bytes``
#: (floats times the dtype's size), the simulated ``time`` of a clock process or the
#: ``wall_time``.
AXES = ("round", *COSTS, "bytes", "time", "wall_time")

#: Columns added after :data:`COLUMNS` (before ``wall_time``) only for runs that recorded
#: them: ``objective``, the value f(x_r) of a problem whose f_star is unknown (its
#: ``objective_gap`` column is then empty), and ``time``, the simulated time at the end
#: of each round of a clock process (:class:`~stochmix.participation.PoissonClocks`,
#: :class:`~stochmix.participation.RandomEdge`). Other runs keep exactly :data:`COLUMNS`.
OPTIONAL_COLUMNS = ("objective", "time")


@dataclass
class Result:
    """Per-round record of a run; index r is "after round r" (r = 0 is the start).

    A metric that costs a pass over every client may be evaluated on a schedule (see
    ``evaluate_every`` of :func:`stochmix.run`); rounds without a value hold NaN, and
    everything here (rates, rounds to a tolerance, plots, CSV) reads only the rounds
    with a value.

    Attributes:
        method: the method's name.
        server: (rounds + 1, dim) model reported by the method after each round (the
            server model for federated methods, the network average for decentralized ones).
        distance: ||x_r - x_star||, or None when x_star is unknown.
        objective_gap: f(x_r) - f(x_star), or None (not recorded, or f_star unknown).
        gradient_norm: ||grad f(x_r)||, or None.
        consensus: mean squared distance of the nodes to their average, or None.
        participants: (rounds + 1,) number of participants of each round (0 at r = 0).
        wall_time: (rounds + 1,) seconds since the run started.
        diverged_at: the round whose state held NaN or Inf, or None.
        config: what produced the run (method, lr, participation, seed, dtype ...);
            ``config["resumed_from"]`` is the round a run resumed from a checkpoint
            started at (absent for a run that did not resume).
        objective: f(x_r) itself where f_star is unknown (learning problems such as a
            :class:`~stochmix.problems.TorchModel`; ``objective_gap`` is then None), or
            None.
        gradients: (rounds + 1,) gradient evaluations of each round (0 at r = 0): a node's
            full local gradient, or an estimate from some of its samples, at one point
            counts 1 (:mod:`stochmix.engine.model.traffic`); or None (a result saved before
            they were recorded).
        messages: (rounds + 1,) messages sent in each round, or None.
        floats: (rounds + 1,) floats sent in each round (compressed rows count what they
            cost), or None.
        time: (rounds + 1,) simulated time at the end of each round of a clock process
            (Poisson clocks, random edges), or None.
        node_models: (n, dim) float64, the model every node holds when the run ended (at
            the round it stopped, if it diverged), row i for client or peer i, or None.
            Decentralized methods: one row per peer, what the method's ``node_models``
            reports (push-sum methods: the de-biased x_i / w_i), whose mean is
            :attr:`final`. Federated methods: one row per client, the client rows of the
            model block (``Method.model_block``, rows ``client_node`` on): the model each
            client last computed, or last pulled (the start x0 for a client that never took
            part); the server row is not included (it is :attr:`final`). None where the
            run did not keep those rows (``storage="auto"`` leaves out client rows that
            every round overwrites before reading them, e.g. FedAvg's on the compiled loop
            or in large runs: run with ``storage="full"`` to keep them), for a sharded run
            (each rank holds part of the nodes) and in results saved before stochmix
            recorded them.
    """

    method: str
    server: Float[np.ndarray, "r1 d"]
    participants: np.ndarray
    wall_time: np.ndarray
    distance: np.ndarray | None = None
    objective_gap: np.ndarray | None = None
    gradient_norm: np.ndarray | None = None
    consensus: np.ndarray | None = None
    diverged_at: int | None = None
    config: dict = field(default_factory=dict)
    objective: np.ndarray | None = None
    gradients: np.ndarray | None = None
    messages: np.ndarray | None = None
    floats: np.ndarray | None = None
    time: np.ndarray | None = None
    sample_gradients: np.ndarray | None = None
    node_models: Float[np.ndarray, "n d"] | None = None

    @property
    def bytes(self) -> np.ndarray | None:
        """Bytes sent in each round: :attr:`floats` times the size of the run's dtype."""
        return None if self.floats is None else self.floats * self.dtype.itemsize

    def axis(self, x: str = "round") -> np.ndarray:
        """The values of round 0..R on the axis ``x`` (one of :data:`AXES`): the round,
        the running sum of a cost or of ``bytes``, the simulated ``time`` or the
        ``wall_time``."""
        if x not in AXES:
            raise ValueError(f"x must be one of {list(AXES)}, got {x!r}")
        if x == "round":
            return np.arange(self.rounds + 1)
        values = self.bytes if x == "bytes" else getattr(self, x)
        if values is None and x == "time":
            raise ValueError(
                "this run recorded no simulated time (x='time'): pass a clock, "
                "stochmix.run(..., clock=stochmix.timing.Clock(...)) (a [clock] table in a "
                "configuration), or run a clock process (PoissonClocks, RandomEdge)"
            )
        if values is None:
            raise ValueError(f"this run recorded no {x!r} (x={x!r})")
        values = np.asarray(values)
        return np.cumsum(values) if x in (*COSTS, "bytes") else values

    @property
    def rounds(self) -> int:
        """Number of rounds completed."""
        return self.server.shape[0] - 1

    @property
    def diverged(self) -> bool:
        """True when the run stopped on a non-finite state."""
        return self.diverged_at is not None

    @property
    def final(self) -> np.ndarray:
        """The last reported model, shape (dim,)."""
        return self.server[-1]

    @property
    def dtype(self) -> np.dtype:
        """The floating type the run computed in (``config["dtype"]``; float64 if unknown)."""
        return np.dtype(self.config.get("dtype", "float64"))

    @property
    def relative_error(self) -> np.ndarray:
        """||x_r - x_star|| / ||x_0 - x_star||: error relative to the starting error."""
        if self.distance is None:
            raise ValueError("relative_error needs the problem's x_star, which is unknown")
        start = self.distance[0] if self.distance[0] > 0 else 1.0
        return self.distance / start

    def error(self, metric: str = "relative_error") -> np.ndarray:
        """A per-round curve by name: relative_error, distance, objective_gap,
        gradient_norm, consensus or objective (NaN in rounds without a value)."""
        if metric not in CURVES:
            raise ValueError(f"metric must be one of {list(CURVES)}, got {metric!r}")
        if metric == "relative_error":
            return self.relative_error
        curve = getattr(self, metric)
        if curve is None:
            raise ValueError(f"metric {metric!r} was not recorded in this run")
        return curve

    def evaluated(self, metric: str = "relative_error") -> tuple[np.ndarray, np.ndarray]:
        """``(rounds, values)`` of the rounds where ``metric`` has a value."""
        curve = np.asarray(self.error(metric), dtype=float)
        rounds = np.flatnonzero(~np.isnan(curve))
        return rounds, curve[rounds]

    def last(self, metric: str = "relative_error") -> float | None:
        """The value of ``metric`` at the last round that has one (None if none has)."""
        _, values = self.evaluated(metric)
        return float(values[-1]) if values.size else None

    def rounds_to(self, eps: float, metric: str = "relative_error") -> int | None:
        """First round at which ``metric`` is at most ``eps`` (None if never); only rounds
        with a value count. ``eps`` must be a finite positive number."""
        eps = as_float(eps, "eps", positive=True)
        hit = np.flatnonzero(np.asarray(self.error(metric)) <= eps)
        return int(hit[0]) if hit.size else None

    def default_floor(self, metric: str = "relative_error") -> float:
        """Where :meth:`rate` stops fitting by default: 1e3 machine epsilons of the run's
        dtype times the curve's start (a float32 run's error stalls near 1e-7, not 1e-16)."""
        rounds, values = self.evaluated(metric)
        top = values[0] if values.size and values[0] > 0 else np.nanmax(np.abs(values), initial=0)
        return float(1e3 * np.finfo(self.dtype).eps * top)

    def rate(
        self, metric: str = "relative_error", floor: float | None = None, *, tail: bool = False
    ) -> float:
        """Fitted linear rate rho of ``metric`` ~ C rho^r over its linear phase.

        The linear phase is the span from the first round below 10% of the start down to
        the last round above ``floor`` (default :meth:`default_floor`: 1e3 machine epsilons
        of the run's dtype times the start), skipping nothing when the curve never drops
        that far. A least-squares line through log(metric) against the round number there
        gives rho = exp(slope); rounds without a value are left out. A curve that stalls
        gives rho close to 1.

        ``tail=True`` measures the asymptotic rate, the one a certificate
        (:func:`stochmix.analysis.certify`) or :func:`~stochmix.analysis.periodic_rate`
        bounds: the same line through the *last half* of the span from the first round
        below 10% of the start to the first round at or under ``floor`` (default 1e3
        times :meth:`default_floor`, 1e6 machine epsilons times the start). The default
        fit reads rounds whose error is within 1e3 rounding units of zero, where rounding
        adds to the computed distance and flattens the slope (on decentralized runs its
        rho exceeded the exact rate by up to 1.2e-4), and its first rounds still hold the
        faster modes; both fits are exact on a geometric curve ``C rho^r``. With
        ``tail=True`` the overshoot measured on such runs (rates 0.93 to 0.98) was at most
        5e-7. A finite window of a curve with several slow modes (oscillating ones:
        complex eigenvalues) still differs from the asymptotic rate by about the log of
        the oscillation's amplitude over the window's length, either way: compare a run
        with a certificate as ``rate(tail=True) <= certificate.rate + tolerance``, the
        tolerance that bound; on a quadratic the exact asymptotic rate is
        ``periodic_rate(method, problem, pattern).per_round``.

        Raises:
            ValueError: fewer than 2 rounds with a value.
        """
        rounds, curve = self.evaluated(metric)
        if curve.size < 3:
            got = max(curve.size - 1, 0)
            raise ValueError(f"rate needs at least 2 rounds with a value of {metric}, got {got}")
        tail = as_bool(tail, "tail")
        top = curve[0] if curve[0] > 0 else np.max(curve)
        if floor is None:
            floor = self.default_floor(metric) * (1e3 if tail else 1.0)
        valid = np.isfinite(curve) & (curve > floor)
        below = np.flatnonzero(valid & (curve <= 0.1 * top))
        first = int(below[0]) if below.size else 0
        last_valid = np.flatnonzero(valid)
        last = int(last_valid[-1]) if last_valid.size else curve.size - 1
        if tail and below.size:
            under = np.flatnonzero(~valid[first:])
            last = first + int(under[0]) - 1 if under.size else curve.size - 1
            if last - (first + last) // 2 >= 2:  # else the whole span: too few rounds
                first = (first + last) // 2
        if last - first < 2:
            first, last = 0, max(int(last_valid[-1]) if last_valid.size else 2, 2)
        span = np.arange(first, min(last, curve.size - 1) + 1)
        span = span[valid[span]]
        if span.size < 2:
            return float("nan")
        slope = np.polyfit(rounds[span], np.log(curve[span]), 1)[0]
        return float(np.exp(slope))

    def summary(self) -> dict:
        """Headline numbers: final error, rounds to 1e-8, rate, time per round. What a run
        too short to tell (``rate`` needs 2 rounds) is None. Where the problem's x_star is
        unknown (a nonconvex problem) ``relative_error`` says it is undefined, and the
        final gradient norm and consensus error are given where recorded."""
        out = {"method": self.method, "rounds": self.rounds}
        if self.distance is not None:
            out["final_relative_error"] = self.last("relative_error")
            out["rounds_to_1e-8"] = self.rounds_to(1e-8)
            try:
                out["rate"] = self.rate()
            except ValueError:
                out["rate"] = None
        else:  # x_star unknown (a nonconvex problem): stationarity, not an error
            out["relative_error"] = "undefined (the problem's x_star is unknown)"
            for name in ("gradient_norm", "consensus"):
                if getattr(self, name) is not None:
                    out[f"final_{name}"] = self.last(name)
        if self.objective_gap is not None:
            out["final_objective_gap"] = self.last("objective_gap")
        if self.objective is not None:
            out["final_objective"] = self.last("objective")
        out["seconds_per_round"] = float(self.wall_time[-1] / max(self.rounds, 1))
        if self.time is not None:  # simulated seconds (a clock), and to 1e-8
            out["virtual_time"] = float(self.time[-1])
            if self.distance is not None:
                hit = self.rounds_to(1e-8)
                out["virtual_time_to_1e-8"] = None if hit is None else float(self.time[hit])
        out["diverged_at"] = self.diverged_at
        return out

    # ------------------------------------------------------------------- tables and files
    def columns(
        self, *, wall_time: bool = False, objective: bool | None = None, time: bool | None = None
    ) -> dict[str, np.ndarray]:
        """The run as columns of one row per round, named as in :data:`COLUMNS`, then
        ``objective`` where recorded (:data:`OPTIONAL_COLUMNS`), then ``wall_time`` when
        asked: the method's name, its step size ``lr`` and the run's ``seed`` (from
        :attr:`config`; NaN/None where unknown), the round, every curve (NaN where not
        recorded or not evaluated) and the participants. ``objective``: True or False
        puts the ``objective`` column in or leaves it out whatever was recorded (to give
        several runs one header); None (default) puts it in where this run recorded it;
        ``time`` likewise."""
        n = self.rounds + 1
        out: dict[str, np.ndarray] = {
            "method": np.full(n, self.method, dtype=object),
            "lr": np.full(n, self.config.get("lr"), dtype=object),
            "seed": np.full(n, self.config.get("seed"), dtype=object),
            "round": np.arange(n),
        }
        if objective is None:
            objective = self.objective is not None
        for name in CURVES:
            if name == "objective":
                continue
            out[name] = self._column(name, n)
        out["participants"] = np.asarray(self.participants, dtype=np.int64)
        for name in COSTS:
            values = getattr(self, name)
            out[name] = np.full(n, np.nan) if values is None else np.asarray(values, dtype=np.int64)
        if objective:
            out["objective"] = self._column("objective", n)
        if time is None:
            time = self.time is not None
        if time:
            out["time"] = np.full(n, np.nan) if self.time is None else np.asarray(self.time)
        if wall_time:
            out["wall_time"] = np.asarray(self.wall_time, dtype=float)
        return out

    def _column(self, name: str, n: int) -> np.ndarray:
        """The curve ``name`` as a float column (NaN throughout where not recorded)."""
        has = name == "relative_error" and self.distance is not None
        has = has or (name != "relative_error" and getattr(self, name) is not None)
        return np.asarray(self.error(name), dtype=float) if has else np.full(n, np.nan)

    def csv_rows(
        self, *, wall_time: bool = False, header: bool = True, objective: bool | None = None
    ) -> str:
        """The CSV text of :meth:`columns` (``objective`` as there): numbers in their
        shortest exact form (``repr``), an empty cell where a round has no value."""
        cols = self.columns(wall_time=wall_time, objective=objective)
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        if header:
            writer.writerow(cols)
        writer.writerows(zip(*(map(_cell, values) for values in cols.values()), strict=True))
        return buffer.getvalue()

    def to_csv(self, path, *, wall_time: bool = False) -> Path:
        """Write :meth:`columns` to ``path`` as CSV (the command's ``metrics.csv`` format:
        one row per round; ``wall_time=True`` adds the seconds column). Returns the path."""
        path = Path(path)
        with open(path, "w", newline="", encoding="utf-8") as handle:
            handle.write(self.csv_rows(wall_time=wall_time))
        return path

    def to_dataframe(self, *, wall_time: bool = False):
        """:meth:`columns` as a ``pandas.DataFrame`` (pandas is optional)."""
        try:
            import pandas as pd
        except ImportError:
            raise ImportError(
                "Result.to_dataframe needs pandas (pip install pandas); "
                "Result.columns() gives the same columns as NumPy arrays"
            ) from None
        return pd.DataFrame(self.columns(wall_time=wall_time))

    def save(self, path) -> Path:
        """Write to ``path`` (.npz); :meth:`load` reads it back."""
        path = Path(path)
        arrays = {
            k: v
            for k in (
                "server",
                "participants",
                "wall_time",
                "distance",
                "objective_gap",
                "gradient_norm",
                "consensus",
                "objective",
                *COSTS,
                "time",
                "node_models",
            )
            if (v := getattr(self, k)) is not None
        }
        meta = {"method": self.method, "diverged_at": self.diverged_at, "config": self.config}
        np.savez(path, meta=np.array(json.dumps(meta, default=str)), **arrays)
        return path if path.suffix == ".npz" else path.with_suffix(path.suffix + ".npz")

    @classmethod
    def load(cls, path) -> Result:
        """Read a result written by :meth:`save`.

        The file is read with ``allow_pickle=False`` (loading never runs code) and checked:
        a missing, unreadable or corrupt file, or one that is not a stochmix result (no
        JSON metadata, a missing or misshapen array, an array it never writes), is one
        ``ValueError`` naming the file and what is wrong.
        """
        import os

        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"path must be a file path (str or os.PathLike), got {path!r}")
        path = Path(path)
        saved: tuple[str, ...] = ("server", "participants", "wall_time", *CURVES[1:], *COSTS)
        saved += ("time",)  # save()
        saved += ("node_models",)

        def refuse(reason: str) -> ValueError:
            return ValueError(f"cannot load a stochmix Result from {str(path)!r}: {reason}")

        try:
            data = np.load(path, allow_pickle=False)
        except Exception as error:  # OSError, ValueError (pickled data), EOFError, BadZipFile
            raise refuse(str(error) or type(error).__name__) from error
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise refuse("it holds a single array, not the .npz archive Result.save writes")
        with data:
            files = set(data.files)
            unknown = sorted(files - {"meta", *saved})
            missing = [k for k in ("meta", "server", "participants", "wall_time") if k not in files]
            if unknown or missing:
                raise refuse(f"unexpected arrays {unknown}" if unknown else f"no {missing[0]!r}")
            try:
                arrays = {k: data[k] for k in sorted(files)}
            except Exception as error:  # pickled objects (ValueError), a corrupt member ...
                raise refuse(str(error) or type(error).__name__) from error
        meta = arrays.pop("meta")
        if meta.dtype.kind != "U" or meta.ndim != 0:
            raise refuse(f"its metadata is not a JSON string (dtype {meta.dtype})")
        try:
            meta = json.loads(str(meta))
        except json.JSONDecodeError as error:
            raise refuse(f"its metadata is not valid JSON ({error})") from None
        if not isinstance(meta, dict) or not {"method", "diverged_at", "config"} <= set(meta):
            raise refuse("its metadata lacks method, diverged_at or config")
        method, diverged_at, config = meta["method"], meta["diverged_at"], meta["config"]
        if not isinstance(method, str) or not isinstance(config, dict):
            raise refuse("its metadata's method is not a string or its config not a dict")
        if diverged_at is not None and type(diverged_at) is not int:
            raise refuse(f"its diverged_at is not a round number: {diverged_at!r}")
        server = arrays["server"]
        if server.ndim != 2 or server.shape[0] < 1 or server.dtype.kind not in "iuf":
            raise refuse(
                f"server must be a (rounds + 1, dim) array of numbers, got dtype "
                f"{server.dtype} and shape {server.shape}"
            )
        models = arrays.get("node_models")
        if models is not None and (
            models.ndim != 2 or models.shape[1] != server.shape[1] or models.dtype.kind != "f"
        ):
            raise refuse(
                f"node_models must be an (n, {server.shape[1]}) float array (one row per node, "
                f"as wide as server), got dtype {models.dtype} and shape {models.shape}"
            )
        for key, value in arrays.items():
            if key not in ("server", "node_models") and (
                value.shape != server.shape[:1] or value.dtype.kind not in "iuf"
            ):
                raise refuse(
                    f"{key} must be a ({server.shape[0]},) array of numbers (one per round of "
                    f"server), got dtype {value.dtype} and shape {value.shape}"
                )
        return cls(method=method, diverged_at=diverged_at, config=config, **arrays)

    def plot(self, ax=None, metric: str = "relative_error", x: str = "round", **kwargs):
        """Plot ``metric`` on a log scale against ``x`` (one of :data:`AXES`: rounds, the
        running sum of gradient evaluations, messages, floats or bytes, the simulated
        ``time`` or the ``wall_time``; only rounds with a value, a scheduled metric with
        markers); returns the axes."""
        import matplotlib.pyplot as plt

        along = self.axis(x)  # ValueError naming x before any figure
        if ax is None:
            _, ax = plt.subplots(figsize=(6, 4))
        rounds, values = self.evaluated(metric)
        if rounds.size < self.rounds + 1 and "marker" not in kwargs:
            kwargs["marker"] = "."
        ax.semilogy(along[rounds], values, label=kwargs.pop("label", self.method), **kwargs)
        ax.set_xlabel(x.replace("_", " ") if x != "round" else "round")
        ax.set_ylabel(metric.replace("_", " "))
        ax.legend()
        return ax

    def __repr__(self) -> str:
        final = self.last() if self.distance is not None else None
        tail = f", final relative error {final:.3e}" if final is not None else ""
        div = f", diverged at round {self.diverged_at}" if self.diverged else ""
        return f"Result({self.method!r}, {self.rounds} rounds{tail}{div})"


def final_node_models(method, z, ctx, back) -> np.ndarray | None:
    """:attr:`Result.node_models` of a run that ended with the state ``z`` (see there):
    ``method.node_models(z, ctx)`` where the method has it (decentralized methods), else
    the client rows of its model block; None where the state does not keep those rows. A
    float64 copy, shape (n, dim)."""
    layout = ctx.layout
    block = method.model_block
    if block in layout.scratch:  # its node rows are not kept in the state
        return None
    if hasattr(method, "node_models"):
        rows = method.node_models(z, ctx)
    else:
        local = np.arange(ctx.n_clients) + method.client_node - layout.first_node(block)
        if local[0] < 0 or local[-1] >= layout.block(block).rows:
            return None  # a model block without a row per client
        rows = z[layout.rows(block, local)]
    return np.array(back.to_numpy(rows), dtype=np.float64)


def _cell(value) -> str:
    """One CSV cell: '' for a missing value, the shortest exact text of a number."""
    if value is None:
        return ""
    if isinstance(value, (float, np.floating)):
        return "" if np.isnan(value) else repr(float(value))
    if isinstance(value, (np.integer,)):
        return str(int(value))
    return str(value)

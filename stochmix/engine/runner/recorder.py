"""What a run records after each round, and when.

Four metrics, each a number per round:

* ``distance`` ||x_r - x_star|| of the reported model (O(d));
* ``objective`` f(x_r) - f(x_star) (``Problem.objective_gap``), recorded as the Result's
  ``objective_gap``; where f_star is unknown (``problem.f_star`` is None: learning problems
  such as a TorchModel, a logistic regression without a minimiser) the value f(x_r)
  itself, recorded as the Result's ``objective`` (its ``objective_gap`` is then None), so
  that a loss is never shown as a gap;
* ``gradient_norm`` ||grad f(x_r)||;
* ``consensus``: the nodes' mean squared distance to their average (decentralized methods;
  a pass over the nodes, which every round of theirs makes anyway).

``objective`` and ``gradient_norm`` cost a pass over all N clients unless the problem has
them in closed form (``problem.closed_form_metrics``: Quadratic and LeastSquares do, in
O(d^2)). Those that need a pass are evaluated on a *schedule*, so that a round's cost stays
what its participants cost: ``evaluate_every=k`` evaluates them every k-th round,
``"auto"`` picks k from a cost model of element counts (:func:`auto_interval`) so that
they take at most about 10% of the run. Round 0 and the last round are always evaluated;
the other rounds hold NaN. The model counts elements rather than timing anything, so a
run's schedule, like its numbers, is the same every time.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from ..._validate import as_int
from ...problems.base import rows_in_closed_form
from ..model.traffic import COSTS

__all__ = [
    "AUTO_SHARE",
    "FIELDS",
    "METRICS",
    "MODEL_METRICS",
    "ROUND_OVERHEAD_ELEMENTS",
    "Recorder",
    "auto_interval",
    "check_schedule",
]

METRICS = ("distance", "objective", "gradient_norm", "consensus")
#: the metrics a batch of rounds evaluates at every round's reported model (see
#: :meth:`Recorder.model_metrics`)
MODEL_METRICS = ("objective", "gradient_norm")
# The Result's field for each metric (``objective``: where f_star is known; see
# :func:`objective_measure`).
FIELDS = {
    "distance": "distance",
    "objective": "objective_gap",
    "gradient_norm": "gradient_norm",
    "consensus": "consensus",
}
# A round's fixed cost (planning, Python, small arrays), in array elements of streamed work:
# an engine round costs at least ~50 us, as long as NumPy takes to stream ~5e4 float64s.
ROUND_OVERHEAD_ELEMENTS = 5e4
# The share of a run the scheduled metrics may take under evaluate_every="auto".
AUTO_SHARE = 0.1


def auto_interval(n_clients: int, expected: float, per_client: float, passes: int) -> int:
    """Rounds between evaluations of ``passes`` metrics that each cost a pass over
    ``n_clients`` clients of ``per_client`` elements, in rounds that cost about
    ``expected`` participants' worth of the same plus :data:`ROUND_OVERHEAD_ELEMENTS`:
    the smallest interval at which the passes take at most :data:`AUTO_SHARE` of the run.
    """
    if passes == 0:
        return 1
    evaluation = passes * n_clients * per_client
    round_cost = ROUND_OVERHEAD_ELEMENTS + expected * per_client
    return max(1, math.ceil(evaluation / (AUTO_SHARE * round_cost)))


def objective_measure(problem):
    """How a run records the ``objective`` metric of ``problem``: ``(field, function)``
    with ``field`` the Result's field and ``function(x)`` the value at a point, or None
    when the problem has neither ``objective`` nor ``objective_gap``.

    * f_star known (``problem.x_star`` or ``problem.f_star`` is not None):
      ``("objective_gap", problem.objective_gap)``, or ``objective(x) - f_star`` without
      one (f_star evaluated once, as ``objective(x_star)`` where the problem does not give
      it); a problem with a known x_star and an ``objective_gap`` is not asked for f_star
      (a Quadratic's closed-form gap needs no pass over the clients);
    * an ``objective_gap`` without an ``f_star`` attribute (a problem of one's own that
      knows its gap): ``("objective_gap", problem.objective_gap)``;
    * otherwise f_star is unknown (learning problems: ``problem.f_star`` is None):
      ``("objective", problem.objective)``, the value f(x) itself.
    """
    has_value, has_gap = hasattr(problem, "objective"), hasattr(problem, "objective_gap")
    if not (has_value or has_gap):
        return None
    x_star = getattr(problem, "x_star", None)
    if x_star is not None and has_gap:
        return "objective_gap", problem.objective_gap
    f_star = getattr(problem, "f_star", None)
    if f_star is None and x_star is not None and has_value:
        f_star = float(problem.objective(x_star))
    if f_star is not None:
        if has_gap:
            return "objective_gap", problem.objective_gap
        return "objective_gap", lambda x: problem.objective(x) - f_star
    if has_gap and not hasattr(problem, "f_star"):
        return "objective_gap", problem.objective_gap
    # f_star unknown: the value itself (objective_gap(x) is f(x) then, by its contract)
    return "objective", problem.objective if has_value else problem.objective_gap


def check_schedule(evaluate_every) -> int | str:
    """``evaluate_every`` checked: "auto" or a positive integer."""
    if isinstance(evaluate_every, str):
        if evaluate_every != "auto":
            raise ValueError(
                f'evaluate_every must be "auto" or a positive integer, got {evaluate_every!r}'
            )
        return evaluate_every
    return as_int(evaluate_every, "evaluate_every", minimum=1)


class Recorder:
    """The per-round record of one run: the reported model, the metrics (which are
    recorded, when, and their values), the participants and the wall time of each round.

    Args:
        problem: the run's problem (``x_star``, ``objective_gap``, ``gradient``, and
            ``closed_form_metrics`` are used where present).
        method: the run's method (``output`` and ``consensus_error``).
        ctx: the run's context.
        metrics: names among :data:`METRICS` asked for; those the problem or method
            cannot give are left out.
        rounds: the run's length (the arrays have ``rounds + 1`` entries).
        evaluate_every: "auto" or a positive integer (see the module docstring).
        expected: the expected number of participants per round.
    """

    def __init__(self, problem, method, ctx, metrics, rounds: int, evaluate_every, expected):
        self.problem, self.method, self.ctx = problem, method, ctx
        self.rounds = rounds
        self.x_star = getattr(problem, "x_star", None)
        wanted = {
            "distance": self.x_star is not None,
            "objective": hasattr(problem, "objective_gap") or hasattr(problem, "objective"),
            "gradient_norm": hasattr(problem, "gradient"),
            "consensus": True,
        }
        self.names = [m for m in METRICS if m in metrics and wanted[m]]
        # the objective's field and function: f_star read only when the metric is asked
        measure: tuple[str, Callable[[np.ndarray], float] | None] = (
            objective_measure(problem) if "objective" in self.names else ("objective_gap", None)
        )
        self.objective_field, self._objective = measure
        closed = set(getattr(problem, "closed_form_metrics", ()))
        self.scheduled = [m for m in self.names if m in ("objective", "gradient_norm")]
        self.scheduled = [m for m in self.scheduled if m not in closed]
        if evaluate_every == "auto":
            per_client = problem.chunk_cost() if hasattr(problem, "chunk_cost") else ctx.dim
            self.interval = auto_interval(
                ctx.n_clients, expected, float(per_client), len(self.scheduled)
            )
        else:
            self.interval = int(evaluate_every)
        self.server = np.empty((rounds + 1, ctx.dim))
        self.values = {m: np.full(rounds + 1, np.nan) for m in self.names}
        self.count = np.zeros(rounds + 1, dtype=np.int64)  # participants of each round
        self.clock = np.zeros(rounds + 1)  # seconds from the run's start to each round's end
        # simulated time at each round's end (a clock process's ticks), NaN where none
        self.time = np.full(rounds + 1, np.nan)
        self.time[0] = 0.0
        # gradient evaluations, messages, floats sent and sample gradients of each round
        # (see traffic.py)
        self.traffic = np.zeros((rounds + 1, len(COSTS)), dtype=np.int64)
        self.counted = False  # whether the run recorded the traffic (run_rounds says)
        self.samples_known = True  # False after resuming a checkpoint that lacks them

    def due(self, r: int) -> bool:
        """Whether the scheduled metrics are evaluated after round ``r``."""
        return r % self.interval == 0 or r == self.rounds

    def measure(self, r: int, z, backend, last: bool = False) -> np.ndarray:
        """Record the metrics after round ``r`` from the state ``z``; returns the reported
        model (float64, shape (d,)). ``last``: the run stops after this round (the
        scheduled metrics are evaluated whatever the schedule says)."""
        x = backend.to_numpy(self.method.output(z, self.ctx)).astype(float)
        self.server[r] = x
        if self.names:
            with np.errstate(over="ignore", invalid="ignore"):
                self._record(r, x, z, last or self.due(r))
        return x

    def _record(self, r: int, x: np.ndarray, z, due: bool) -> None:
        """Evaluate the metrics of round ``r`` at the model ``x`` (those on the schedule
        when ``due``)."""
        for name in list(self.names):
            if name in self.scheduled and not due:
                continue
            value = self._evaluate(name, x, z)
            if value is None:  # the method has no consensus error: stop asking
                self.names.remove(name)
                del self.values[name]
                continue
            self.values[name][r] = value

    def model_metrics(self) -> list[str]:
        """The metrics recorded every round that are functions of the reported model
        alone, but for ``distance``: ``objective`` and ``gradient_norm`` where the problem
        gives them in closed form (not scheduled)."""
        return [m for m in self.names if m not in self.scheduled and m in MODEL_METRICS]

    def evaluate(self, name: str, x: np.ndarray) -> float:
        """The value of ``name``, one of :meth:`model_metrics`, at the reported model
        ``x``."""
        if name not in MODEL_METRICS:
            raise ValueError(f"name must be one of {MODEL_METRICS}, got {name!r}")
        value = self._evaluate(name, x, None)
        assert value is not None  # (only consensus may have none)
        return value

    def evaluate_rows(self, name: str, models: np.ndarray) -> np.ndarray:
        """:meth:`evaluate` at every row of ``models`` (B, d): :meth:`rows`, or one row at
        a time where the problem has no rows of the metric."""
        found = self.rows(name, models)
        if found is None:
            return np.array([self.evaluate(name, x) for x in models], dtype=float)
        return found

    def rows(self, name: str, models: np.ndarray) -> np.ndarray | None:
        """``name`` (one of :meth:`model_metrics` but ``distance``) at every row of
        ``models`` (B, d) through the problem's
        :meth:`~stochmix.problems.Problem.closed_form_rows`, where they are the metric the
        record holds (the objective as the problem's ``objective_gap``) and what the
        problem's own member computes (:func:`~stochmix.problems.base.
        rows_in_closed_form`); None otherwise."""
        wanted = name != "objective" or self._objective == self.problem.objective_gap
        found = rows_in_closed_form(self.problem, name, models) if wanted else None
        return None if found is None else np.asarray(found, dtype=float).reshape(len(models))

    def _evaluate(self, name: str, x: np.ndarray, z) -> float | None:
        if name == "distance":
            return float(np.linalg.norm(x - self.x_star))
        if name == "objective":
            assert self._objective is not None  # the metric is kept only with a function
            return float(self._objective(x))
        if name == "gradient_norm":
            return float(np.linalg.norm(self.problem.gradient(x)))
        c = self.method.consensus_error(z, self.ctx)
        return None if c is None else float(c)

    # ----------------------------------------------------------------- checkpoints
    def state(self, done: int) -> dict:
        """What a checkpoint keeps of the record after ``done`` rounds."""
        return {
            "server": self.server[: done + 1],
            "record": {k: v[: done + 1] for k, v in self.values.items()},
            "count": self.count[: done + 1],
            "clock": self.clock[: done + 1],
            "time": self.time[: done + 1],
            "traffic": self.traffic[: done + 1],
        }

    def restore(self, saved: dict, done: int) -> None:
        """Take back a checkpoint's record of its first ``done`` rounds (the caller then
        measures round ``done`` again under this run's schedule: the checkpoint's run may
        have ended there and evaluated it as its last round)."""
        self.server[: done + 1] = saved["server"][: done + 1]
        self.count[: done + 1] = saved["count"][: done + 1]
        self.clock[: done + 1] = saved["clock"][: done + 1]
        if "time" in saved:  # checkpoints written before the record had them lack them
            self.time[: done + 1] = saved["time"][: done + 1]
            kept = np.asarray(saved["traffic"])[: done + 1]
            self.traffic[: done + 1, : kept.shape[1]] = kept
            # a checkpoint written before sample gradients were counted: unknown, not 0
            self.samples_known = kept.shape[1] == len(COSTS)
        for key in list(self.values):
            if key not in saved["record"]:  # the method had none (consensus)
                self.names.remove(key)
                del self.values[key]
        for key, values in saved["record"].items():
            if key in self.values:
                self.values[key][: done + 1] = values[: done + 1]
                if key in self.scheduled:
                    self.values[key][done] = np.nan

    def fields(self, done: int) -> dict:
        """The Result's fields: ``server``, ``participants``, ``wall_time`` and one curve
        per metric (None if not kept): the ``objective`` metric goes to
        :attr:`objective_field` (``objective_gap``, or ``objective`` where f_star is
        unknown), and the other of the two is None."""
        out: dict[str, np.ndarray | None] = {
            "server": self.server[: done + 1],
            "participants": self.count[: done + 1],
            "wall_time": self.clock[: done + 1],
            "objective": None,
            **{
                name: self.traffic[: done + 1, k]
                if self.counted and (self.samples_known or name != "sample_gradients")
                else None
                for k, name in enumerate(COSTS)
            },
            "time": self.time[: done + 1] if np.isfinite(self.time[1 : done + 1]).any() else None,
        }
        for name, field in FIELDS.items():
            if name == "objective":
                field = self.objective_field
            out[field] = self.values[name][: done + 1] if name in self.values else None
        return out

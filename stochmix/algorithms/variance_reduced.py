r"""Variance-reduced gradient tracking on finite sums: GT-SVRG, GT-SAGA and GT-SARAH
(Xin, Khan and Kar).

Node i holds a finite sum f_i = (1/m_i) sum_j f_{i,j} (its samples: a
:class:`~stochmix.problems.LeastSquares` or :class:`~stochmix.problems.Logistic` client's
rows, component f_{i,j} = m_i times the loss of row j). Each iteration every node draws b
of its samples uniformly with replacement (from the run's seed and the iteration:
:func:`~stochmix.engine.model.rowmap.map_generator` with the label ``"samples"``, so a resumed run
draws the same) and forms a variance-reduced estimate v_i of grad f_i at its new point,
evaluating the *same* samples at two points; gradient tracking then mixes:

.. math::

    x^{k+1} = W_k x^k - \alpha y^k,\qquad
    y^{k+1} = W_k y^k + v^{k+1} - v^k,\qquad y^0 = v^0 = \nabla F(x^0).

Each estimate is linear with the draws fixed: sampled gradient terms (``grad(nodes,
samples=S)``, the problem's
:meth:`~stochmix.protocols.FiniteSumProblem.sampled_gradients`), GT-SAGA's table read and
written by index (``table.at[...]``), node-local phases that the compiled programs run; the
mixing phases are whole-block products. So the exact operators (``round_operator`` with the
run's seed) take every round on least squares. With a constant step these converge
linearly to the exact minimiser on strongly convex finite sums, where gradient tracking
with minibatch gradients stalls at a noise floor.
"""

from __future__ import annotations

import numpy as np

from .._validate import as_int, choice, show
from ..engine import Block, RunContext, grad
from ..engine.model.rowmap import map_generator
from ..mixing.sequences import RULES, GraphSequence
from .decentralized_base import DecentralizedMethod, require_everyone

__all__ = ["GTSAGA", "GTSARAH", "GTSVRG", "draw_samples"]

SAMPLES = "samples"  # the label of the draws (map_generator)


def draw_samples(seed, r: int, counts: np.ndarray, batch: int) -> np.ndarray:
    """The sample indices every node draws in iteration r, shape (n, batch): uniform on
    0..m_i-1, from ``map_generator(seed, r, "samples")`` (what the methods draw)."""
    rng = map_generator(seed, r, SAMPLES)
    return (rng.random((counts.size, batch)) * counts[:, None]).astype(np.int64)


class _VarianceReduced(DecentralizedMethod):
    needs = {"rule": "doubly"}
    _counts: np.ndarray | None = None  # each node's samples (check_problem)

    def __init__(self, lr, graphs: GraphSequence, batch=1, rule="metropolis", check_mixing=True):
        super().__init__(lr, graphs, check_mixing=check_mixing)
        self.batch = as_int(batch, "batch", minimum=1)
        self.rule = choice(rule, "rule", RULES)

    _run_state = DecentralizedMethod._run_state | {"_counts"}

    def check_problem(self, problem) -> None:
        super().check_problem(problem)
        # FiniteSumProblem's members, looked up one by one (not isinstance: a Composite
        # forwards them to its smooth part, which isinstance does not see on Python >= 3.12)
        if not (
            callable(getattr(problem, "sampled_gradients", None))
            and hasattr(problem, "rows_per_client")
        ):
            raise ValueError(
                f"problem must be a finite sum whose clients hold samples (LeastSquares, "
                f"Logistic) for {self.name}, got {show(problem)}"
            )
        self._counts = np.asarray(problem.rows_per_client, dtype=np.int64)

    def _sizes(self, n_clients: int) -> np.ndarray:
        """Each node's samples m_i, as the run's problem holds them."""
        counts = self._counts
        if counts is None or counts.size != n_clients:
            raise ValueError(
                f"{self.name} reads the problem's samples: run it with stochmix.run (which "
                "checks the problem first)"
            )
        return counts

    def check_participation(self, participation) -> None:
        reason = "every node samples and mixes in every iteration"
        require_everyone(participation, self.name, reason)

    def _start(self, eq, r: int) -> list:
        if r > 0:
            return []
        y, v = eq.blocks("y", "v")
        y[:] = grad()
        v[:] = grad()
        return [eq.build("full gradients")]

    def _track(self, eq, w) -> list:
        y, v, vn = eq.blocks("y", "v", "vn")
        y[:] = w @ y + vn - v
        v[:] = vn
        return [eq.build("track")]


class GTSVRG(_VarianceReduced):
    r"""GT-SVRG: gradient tracking with SVRG estimates (see the module docstring). Every T
    iterations (``snapshot_every``, from k = 0) each node takes a snapshot tau_i = x_i^k
    and its full local gradient mu_i = grad f_i(tau_i); then

    .. math::

        v_i^{k+1} = \nabla f_{i,S}(x_i^{k+1}) - \nabla f_{i,S}(\tau_i) + \mu_i,

    S the node's b samples of iteration k. State: blocks ``x``, ``y``, ``v`` (the last
    estimate), ``vn`` (the new one), ``tau`` and ``mu``, each (n, d). A round is the
    snapshot (every T), "mix" (x), the estimate and "track" (y and v). The estimate is
    three linear node-local phases, one program: "to the snapshot" (x and tau trade
    places, so that the model block holds tau_i), "estimate at the snapshot" (``vn = mu -
    g_S(tau)``, a sampled gradient term, while x and tau trade back) and "estimate" (``vn
    += g_S(x^{k+1})``, the same samples). The trade is the way to take a gradient at tau:
    the engine takes gradients at the model block. All linear with the draws fixed: on
    least squares the exact operators take every round. A full local gradient costs m_i
    sample gradients, so a snapshot iteration costs m_i + 2b of them at node i, the
    others 2b.

    References:
        - R. Xin, U. A. Khan and S. Kar, "Variance-reduced decentralized stochastic
          optimization with accelerated convergence", IEEE Transactions on Signal
          Processing 68:6255-6271, 2020.
    """

    name = "GT-SVRG"

    def __init__(
        self, lr, graphs: GraphSequence, snapshot_every=10, batch=1, rule="metropolis",
        check_mixing=True,
    ):  # fmt: skip
        super().__init__(lr, graphs, batch, rule, check_mixing)
        self.snapshot_every = as_int(snapshot_every, "snapshot_every", minimum=1)

    def blocks(self, n_clients: int) -> list[Block]:
        names = ("y", "v", "vn", "tau", "mu")
        return [Block("x", n_clients, "model"), *(Block(b, n_clients) for b in names)]

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        eq = self.round_equations(participants, ctx)
        x, y, tau, mu = eq.blocks("x", "y", "tau", "mu")
        phases = []
        if r % self.snapshot_every == 0:
            if r == 0:
                v = eq.block("v")
                y[:] = grad()
                v[:] = grad()
            tau[:] = x
            mu[:] = grad()
            phases.append(eq.build("snapshot"))
        w = self.mixing(r, self.rule)
        x[:] = w @ x - self.lr * y
        phases.append(eq.build("mix"))
        everyone = np.arange(ctx.n_clients)
        picks = draw_samples(ctx.seed, r, self._sizes(everyone.size), self.batch)
        drawn = grad(everyone, samples=picks)
        vn = eq.block("vn")
        x[:], tau[:] = tau, x
        phases.append(eq.build("to the snapshot"))
        vn[:] = mu - drawn  # at tau, in the model block for this phase
        x[:], tau[:] = tau, x
        phases.append(eq.build("estimate at the snapshot"))
        vn[:] += drawn  # at x^{k+1}: the same samples
        phases.append(eq.build("estimate"))
        return [*phases, *self._track(eq, w)]


class GTSARAH(_VarianceReduced):
    r"""GT-SARAH: gradient tracking with SARAH's recursive estimates (see the module
    docstring):

    .. math::

        v_i^{k+1} = \nabla f_{i,S}(x_i^{k+1}) - \nabla f_{i,S}(x_i^k) + v_i^k,

    S the node's b samples of iteration k, and v_i^{k+1} = grad f_i(x_i^{k+1}) (full local
    gradients) whenever k + 1 is a multiple of q (``restart_every``). Made for nonconvex
    finite sums (its guarantee is on the gradient norm); it also converges on convex ones.
    State: blocks ``x``, ``xp`` (x^k), ``y``, ``v``, ``vn``, each (n, d). A round is
    "estimate at x^k" (``vn = v - g_S(x^k)``, a sampled gradient term: ``grad(nodes,
    samples=S)``), "mix" (x and xp), "estimate" (``vn += g_S(x^{k+1})``, the same samples)
    and "track"; at a restart, "mix", "full gradients" and "track". All linear with the
    draws fixed: on least squares the exact operators take every round.

    References:
        - R. Xin, U. A. Khan and S. Kar, "Fast decentralized nonconvex finite-sum
          optimization with recursive variance reduction", SIAM Journal on Optimization
          32(1):1-28, 2022 (the paper writes y with one index shifted, y^{k+1} = W y^k +
          v^k - v^{k-1} and y^0 = 0: the same iterates x^k).
    """

    name = "GT-SARAH"

    def __init__(
        self, lr, graphs: GraphSequence, restart_every=10, batch=1, rule="metropolis",
        check_mixing=True,
    ):  # fmt: skip
        super().__init__(lr, graphs, batch, rule, check_mixing)
        self.restart_every = as_int(restart_every, "restart_every", minimum=1)

    def blocks(self, n_clients: int) -> list[Block]:
        names = ("xp", "y", "v", "vn")
        return [Block("x", n_clients, "model"), *(Block(b, n_clients) for b in names)]

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        eq = self.round_equations(participants, ctx)
        phases = self._start(eq, r)
        x, xp, y, v, vn = eq.blocks("x", "xp", "y", "v", "vn")
        restart = (r + 1) % self.restart_every == 0
        if not restart:  # the samples' gradients at x^k, before x moves
            everyone = np.arange(ctx.n_clients)
            drawn = grad(everyone, samples=draw_samples(ctx.seed, r, self._sizes(everyone.size),
                                                        self.batch))  # fmt: skip
            vn[:] = v - drawn
            phases.append(eq.build("estimate at x^k"))
        w = self.mixing(r, self.rule)
        x[:] = w @ x - self.lr * y
        xp[:] = x
        phases.append(eq.build("mix"))
        if restart:
            vn[:] = grad()
            phases.append(eq.build("full gradients"))
        else:  # ... and at x^{k+1}: the same samples
            vn[:] += drawn
            phases.append(eq.build("estimate"))
        return [*phases, *self._track(eq, w)]


class _TableRows:
    """Every component of every node at the node's point: the table's rows in order
    (node i's m_i rows, then node i + 1's), ``owners`` the node of each row."""

    name = "component table"

    def __init__(self, owners: np.ndarray, within: np.ndarray, counts: np.ndarray):
        self.owners, self.within, self.counts = owners, within, counts

    def __call__(self, x, *, info):
        return info.problem.sampled_gradients(
            self.owners, x, self.within[:, None], self.counts[self.owners].astype(float)
        )


class GTSAGA(_VarianceReduced):
    r"""GT-SAGA: gradient tracking with SAGA estimates (see the module docstring). Every
    node keeps a table of its m_i component gradients (started at x^0) and their average;
    in iteration k it draws one sample s_i and

    .. math::

        v_i^{k+1} = \nabla f_{i,s_i}(x_i^{k+1}) - G_{i,s_i} + \tfrac{1}{m_i}\textstyle\sum_j
            G_{i,j},\qquad G_{i,s_i} \leftarrow \nabla f_{i,s_i}(x_i^{k+1})

    (the table as it was before the iteration in the estimate; the average follows the
    replaced entry). State: blocks ``x``, ``y``, ``v``, ``vn``, ``g`` (the drawn
    components), ``average`` (each (n, d)) and ``table`` (sum_i m_i rows, outside the
    node rows: always kept). A round is "mix", "estimate" and "track": "estimate" is one
    linear phase that takes each node's drawn component gradient (a sampled gradient,
    ``grad(nodes, samples=s)``: one sample gradient a node) and reads and writes its
    drawn entry of the table by index (``table.at[offset_i + s_i]``) as its own row: the
    estimate, the average's update ``average += (g - G_{i,s_i}) / m_i`` and the entry's
    replacement. With the draws fixed the round is affine in the state on least squares,
    so the exact operators (:func:`~stochmix.analysis.round_operator`) take it. The
    table's size is the problem's: the method learns it when a run checks the problem
    (:meth:`check_problem`).

    References:
        - R. Xin, U. A. Khan and S. Kar, "Variance-reduced decentralized stochastic
          optimization with accelerated convergence", IEEE Transactions on Signal
          Processing 68:6255-6271, 2020.
    """

    name = "GT-SAGA"

    def __init__(self, lr, graphs: GraphSequence, rule="metropolis", check_mixing=True):
        super().__init__(lr, graphs, 1, rule, check_mixing)
        self._inverse_counts: np.ndarray | None = None

    _run_state = _VarianceReduced._run_state | {"_inverse_counts"}

    def check_problem(self, problem) -> None:
        super().check_problem(problem)
        self._inverse_counts = 1.0 / self._sizes(problem.n_clients)

    def blocks(self, n_clients: int) -> list[Block]:
        total = int(self._sizes(n_clients).sum())
        names = ("y", "v", "vn", "g", "average")
        return [
            Block("x", n_clients, "model"),
            *(Block(b, n_clients) for b in names),
            Block("table", total, first_node=n_clients),  # not node rows
        ]

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        counts = self._sizes(ctx.n_clients)
        offsets = np.cumsum(counts) - counts
        everyone = np.arange(ctx.n_clients)
        eq = self.round_equations(participants, ctx)
        phases = self._start(eq, r)
        if r == 0:
            owners = np.repeat(everyone, counts)
            within = np.arange(int(counts.sum())) - offsets[owners]
            rows = _TableRows(owners, within, counts)
            phases.append(ctx.map("table", np.arange(owners.size), rows, ("x", owners),
                                  round=r, label="table"))  # fmt: skip
            average = eq.block("average")
            average[:] = grad()
            phases.append(eq.build("table average"))
        x, y, g, vn, average, table = eq.blocks("x", "y", "g", "vn", "average", "table")
        w = self.mixing(r, self.rule)
        x[:] = w @ x - self.lr * y
        phases.append(eq.build("mix"))
        picks = draw_samples(ctx.seed, r, counts, 1)
        drawn = grad(everyone, samples=picks)  # grad f_{i, s_i}(x_i)
        old = table.at[offsets + picks[:, 0]]  # each node's drawn entry of the table
        g[:] = drawn
        vn[:] = drawn - old + average
        average[:] += (drawn - old) * self._inverse_counts
        table.at[old.rows] = drawn
        phases.append(eq.build("estimate"))
        return [*phases, *self._track(eq, w)]

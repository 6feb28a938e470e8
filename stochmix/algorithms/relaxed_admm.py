r"""Relaxed ADMM (R-ADMM) on a fixed undirected graph, written in node variables.

The paper's method keeps one auxiliary variable z_ij per directed edge (node i keeps
z_ij for every neighbour j in N_i, d_i = |N_i|) and, in iteration k,

.. math::

    x_i^{k+1} &= \arg\min_x\ f_i(x) - \Big\langle \sum_{j \in N_i} z_{ij}^k, x\Big\rangle
        + \frac{\rho d_i}{2}\lVert x\rVert^2,\\
    z_{ij}^{k+1} &= (1 - \alpha) z_{ij}^k + \alpha\big(-z_{ji}^k + 2 \rho x_j^{k+1}\big)

(node j sends -z_ji + 2 rho x_j to i). The z update is linear and only the sums
s_i = sum_{j in N_i} z_ij (what node i's local problem reads) and t_i = sum_{j in N_i} z_ji
(what its neighbours hold about it) enter: summing it over the neighbours,

.. math::

    s^{k+1} = (1 - \alpha) s^k - \alpha t^k + 2 \alpha \rho A x^{k+1},\qquad
    t^{k+1} = (1 - \alpha) t^k - \alpha s^k + 2 \alpha \rho D x^{k+1},

A the 0/1 adjacency, D = diag(d_i). This module runs that recursion: two (n, d) blocks
instead of 2|E| edge rows, the neighbour sum one sparse product. It is the edge recursion
exactly when every z_ij is updated in every iteration (a synchronous, lossless network on
a fixed graph, which is what is implemented; ``tests/reference/relaxed_admm.py`` runs the
edge form). A lost packet or an idle node leaves some z_ij and not z_ji, which the node
sums cannot express, so the paper's lossy and asynchronous versions need the edge rows
(see :class:`RelaxedADMM`).
"""

from __future__ import annotations

from typing import cast

import numpy as np

from .._validate import as_float, as_int, choice, show
from ..engine import Block, RunContext, grad
from ..mixing.sequences import GraphSequence
from .admm import _AffineSolve, _Laplacian, _operator
from .fedprox import has_exact_prox

__all__ = ["RelaxedADMM"]


class _Solve(_AffineSolve):
    """The exact local solve x_i = (H_i + rho d_i I)^{-1} (c_i + s_i), refusing problems
    without affine gradients with ``name`` in the message."""

    def __init__(self, shift: np.ndarray, cache: dict, method: str):
        super().__init__(shift, cache)
        self.method = method

    def __call__(self, v, *, info):
        if not has_exact_prox(info.problem):
            named = type(getattr(info.problem, "uncounted", info.problem)).__name__
            raise ValueError(
                f'{self.method}(solver="exact") needs local problems in closed form (a '
                f"Quadratic or a least-squares problem), got {named}; "
                'use solver="gradient"'
            )
        return super().__call__(v, info=info)


class RelaxedADMM(_Laplacian):
    r"""Relaxed ADMM (Bastianello, Carli, Schenato & Todescato 2021), the synchronous
    lossless version on a fixed undirected graph (see the module docstring):

    .. math::

        \text{exact:}\quad & x_i^{k+1} = \arg\min_x f_i(x) - \langle s_i^k, x\rangle
            + \tfrac{\rho d_i}{2}\lVert x\rVert^2,\\
        \text{gradient:}\quad & K \text{ steps } x_i \leftarrow x_i - \gamma\big(\nabla
            f_i(x_i) + \rho d_i x_i - s_i^k\big) \text{ from } x_i^k,\\
        & s^{k+1} = (1 - \alpha) s^k - \alpha t^k + 2\alpha\rho A x^{k+1},\quad
          t^{k+1} = (1 - \alpha) t^k - \alpha s^k + 2\alpha\rho D x^{k+1},

    s_i = sum_j z_ij and t_i = sum_j z_ji the sums of the paper's edge variables, which
    start at z_ij^0 = 0 (s^0 = t^0 = 0; the paper allows any start). alpha = 1/2 is
    the ordinary decentralized ADMM: with c = rho / 2 it is
    :class:`~stochmix.algorithms.DecentralizedADMM` (Shi et al.) with its dual -(s - c (D
    + A) x), from the same start when c (D + A) x^0 = 0; alpha -> 1 is Peaceman-Rachford.

    Convergence (the paper's Sections IV-V): for convex f_i and any alpha in (0, 1) the
    z_ij converge and every x_i to a minimiser of sum_i f_i; for strongly convex smooth
    f_i linearly. The same holds with packet losses and asynchronous nodes, which this
    class does not run: a lost packet j -> i leaves z_ij as it was while z_ji moves, so the
    recursion needs a row per directed edge; it is neither node activation
    (:mod:`stochmix.participation`, which would freeze all of a node's edges, not one
    direction) nor gossip (which averages). Every node computes in every iteration
    (``participation.Full(n)``); any other process is refused.

    One iteration: one local solve per node (the exact solve, or K gradient steps: K
    gradients per node) and one exchange (each node sends one vector per neighbour).
    State: blocks ``x``, ``s`` and ``t``, each (n, d). A round is the local solve (a row
    map, or K whole-block "local step" phases) and "edge variables" (s and t from the new
    x: one sparse product with 2 alpha rho A, per-node coefficients 2 alpha rho d_i).

    **Step size.** ``lr`` is 1/rho, rho the augmented Lagrangian's penalty: node i's
    problem is a proximal step of size lr / d_i on f_i (as for
    :class:`~stochmix.algorithms.DecentralizedADMM`, whose ``lr`` is 1/c = 2/rho).

    **Peer implementation.** decent-bench (github.com/team-decent/decent-bench, commit
    ad39310, ``decent_bench/algorithms/p2p/_admm.py``, class ``ADMM``) runs the same edge
    recursion. Mapping: its ``penalty`` is rho = 1 / ``lr``; its ``relaxation`` is alpha;
    its x_i = prox_{f_i / (rho d_i)}(s_i / (rho d_i)) is our exact local solve; its default
    ``z0=None`` puts z_ij^0 = 0, our start (its ``x0`` is then never read: the first
    iteration overwrites x). Measured (a throwaway script, not a test: it needs the peer),
    with its recursion re-implemented per edge from its code (it needs Python 3.12):
    heterogeneous quadratics, n = 6, d = 3, a ring with two chords, rho in {0.3, 1, 3},
    alpha in {0.2, 0.5, 0.9}: the x iterates of every node agree to at most 1.3e-13 over
    200 iterations (iterates of size up to 5.3). The peer has no gradient-solver variant;
    :class:`~stochmix.algorithms.LTADMM` says how its LT-ADMM compares.

    Args:
        lr: 1/rho > 0.
        graphs: a static graph (``period == 1``, e.g.
            :class:`~stochmix.mixing.StaticSequence`; the z_ij live on its edges;
            undirected: the adjacency is symmetrised).
        relaxation: alpha in (0, 1); default 1/2 (ADMM).
        solver: ``"exact"`` (closed form for affine gradients:
            :class:`~stochmix.problems.Quadratic`, :class:`~stochmix.problems.LeastSquares`)
            or ``"gradient"`` (any smooth problem).
        local_lr: gamma, required with ``"gradient"``: node i's local problem is (L_i +
            rho d_i)-smooth, so 1 / (L + d_max / lr) is safe (L = ``problem.smoothness``).
        local_steps: K (``"gradient"``), default 1.

    References:
        - N. Bastianello, R. Carli, L. Schenato and M. Todescato, "Asynchronous distributed
          optimization over lossy networks via relaxed ADMM: stability and linear
          convergence", IEEE Transactions on Automatic Control 66(6):2620-2635, 2021
          (arXiv:1901.09252): the distributed R-ADMM updates (Section III, the x and
          z_ij updates), its convergence (Section IV) and linear rate (Section V).
    """

    name = "RelaxedADMM"
    _run_state = _Laplacian._run_state | {"_solve_cache"}
    #: every iteration builds the same phases (alpha^0 = 0: the first one too): plans
    #: reused, and a small graph's iterations in compiled batches (the exact solve's
    #: per-node matrices are applied by the batch loop, ``_AffineSolve.row_affine``)
    rounds_repeat = True

    def __init__(
        self,
        lr,
        graphs: GraphSequence,
        relaxation=0.5,
        solver="exact",
        local_lr=None,
        local_steps=1,
        check_mixing=True,
    ):
        inverse = as_float(lr, "lr", positive=True)
        super().__init__(inverse, graphs, 1.0 / inverse, check_mixing)
        if graphs.period != 1:
            raise ValueError(
                f"graphs must be static (period 1) for {self.name}: its edge variables live "
                f"on one graph's edges, got {show(graphs)} with period {graphs.period!r}"
            )
        self.relaxation = as_float(relaxation, "relaxation")
        if not 0.0 < self.relaxation < 1.0:
            raise ValueError(f"relaxation must be in (0, 1), got {relaxation!r}")
        self.solver = choice(solver, "solver", ("exact", "gradient"))
        self.local_lr: float | None = None
        if self.solver == "gradient":
            if local_lr is None:
                d_max = _max_degree(graphs)
                raise ValueError(
                    'local_lr must be given with solver="gradient": node i\'s local problem '
                    "is (L_i + rho d_i)-smooth, so local_lr = 1 / (L + d_max rho) is safe, L "
                    f"= problem.smoothness; here d_max = {d_max} and rho = {self.penalty:g}: "
                    f"local_lr = 1 / (problem.smoothness + {d_max * self.penalty:g})"
                )
            self.local_lr = as_float(local_lr, "local_lr", positive=True)
        elif local_lr is not None:
            raise ValueError(
                f'local_lr must be None with solver="exact" (the local problems are solved in '
                f'closed form: no local step), got local_lr={local_lr!r}; use solver="gradient"'
            )
        self.local_steps = as_int(local_steps, "local_steps", minimum=1)
        self._solve_cache: dict = {}

    def blocks(self, n_clients: int) -> list[Block]:
        return [Block("x", n_clients, "model"), Block("s", n_clients), Block("t", n_clients)]

    def start(self, ctx: RunContext) -> None:
        super().start(ctx)
        self._solve_cache = {}

    def _build(self, adjacency, degrees) -> tuple:
        rho, alpha = self.penalty, self.relaxation
        shift = rho * degrees  # of the local problem, per node
        keep = 1.0 - (self.local_lr or 0.0) * shift  # of x_i in a local step, per node
        return _operator(2.0 * alpha * rho * adjacency), 2.0 * alpha * shift, shift, keep

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        neighbours, own, shift, keep = self._operators(r, self._build)
        eq = self.round_equations(participants, ctx)
        x, s, t = eq.blocks("x", "s", "t")
        if self.solver == "exact":
            solve = _Solve(shift, self._solve_cache, self.name)
            everyone = np.arange(ctx.n_clients)
            phases = [ctx.map("x", everyone, solve, "s", round=r, label="local solve")]
        else:
            gamma = cast(float, self.local_lr)
            x[:] = keep * x - gamma * grad() + gamma * s
            phases = [eq.build("local step")] * self.local_steps
        a = self.relaxation
        s[:] = (1.0 - a) * s - a * t + neighbours @ x
        t[:] = (1.0 - a) * t - a * s + own * x
        return [*phases, eq.build("edge variables")]


def _max_degree(graphs: GraphSequence) -> int:
    adjacency = graphs.adjacency(0)
    return int(np.asarray(((adjacency + adjacency.T) > 0).sum(axis=1)).max())

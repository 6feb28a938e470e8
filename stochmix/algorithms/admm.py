r"""Decentralized ADMM and its linearized form DLM, on the graph's Laplacian.

Both keep a primal block x and a dual block ``alpha`` (one row per node, zero at the
start) and work with node i's neighbours N_i (d_i = |N_i|) in the graph of the round:
with A the 0/1 adjacency, D = diag(d_i) and L = D - A,

.. math::

    \text{ADMM:}\quad & \nabla f_i(x_i^{k+1}) + \alpha_i^k + 2 c\, d_i x_i^{k+1}
        = c\,\big((D + A) x^k\big)_i,\\
    \text{DLM:}\quad & x_i^{k+1} = x_i^k - \frac{\nabla f_i(x_i^k) + \alpha_i^k
        + c (L x^k)_i}{2 c\, d_i + \rho},\\
    \text{both:}\quad & \alpha^{k+1} = \alpha^k + c\, L x^{k+1}.

The mixing terms are sparse products with c (D + A), c L and I - c Lambda^{-1} L, and
the per-node coefficients (1 / (2 c d_i + rho), 1 - gamma 2 c d_i) multiply each node's
rows; all are built once per distinct graph, in the operator cache of every decentralized
method. The exact ADMM step is a batched linear solve over the nodes (a row map, as
FedProx's exact solver), for problems with affine gradients
(:class:`~stochmix.protocols.AffineGradientProblem`: :class:`~stochmix.problems.Quadratic`,
:class:`~stochmix.problems.LeastSquares`); ``solver="gradient"`` replaces it by K
gradient steps on the same local problem (any problem). DLM is linear, so the
exact-operator analysis covers it; ADMM with exact solves is an affine map of the state
too but written as a row map, which the analysis refuses.

Both are synchronous: every node updates in every iteration (``participation.Full(n)``);
the papers' linear rates are for a fixed connected graph (a time-varying sequence runs
with the graph of each round, outside their theorems).
"""

from __future__ import annotations

from typing import cast

import numpy as np
import scipy.sparse as sp

from .._validate import as_float, as_int, choice
from ..engine import Block, RunContext, grad
from ..mixing.rowsparse import RowSparse
from ..mixing.sequences import GraphSequence
from .decentralized_base import DecentralizedMethod, require_everyone
from .fedprox import affine_gradients, has_exact_prox
from .proximal import prox_phase

__all__ = ["DLM", "DecentralizedADMM"]


def _operator(matrix) -> RowSparse:
    op = RowSparse.whole(sp.csr_array(matrix))
    op.mixes = "pull"
    return op


class _Laplacian(DecentralizedMethod):
    """Shared parts: the penalty c, the graph's Laplacian operators and full
    participation."""

    needs: dict = {}

    def __init__(self, lr, graphs: GraphSequence, penalty, check_mixing=True):
        super().__init__(lr, graphs, check_mixing=check_mixing)
        self.penalty = as_float(penalty, "penalty", positive=True)

    def blocks(self, n_clients: int) -> list[Block]:
        return [Block("x", n_clients, "model"), Block("alpha", n_clients)]

    def check_participation(self, participation) -> None:
        reason = "a synchronous method: every node solves its local problem in every iteration"
        require_everyone(participation, self.name, reason)
        # every node in every iteration: plans are reused by phase_key (and small graphs'
        # iterations run in compiled batches) where the iterations repeat
        self._activation = "everyone"

    def _operators(self, k: int, build) -> tuple:
        """``build(adjacency, degrees)`` for the graph of step k, once per distinct graph
        (in the operator cache every decentralized method keeps, :meth:`operators`)."""

        def laplacian() -> tuple:
            adjacency = self.graphs.adjacency(k)
            adjacency = ((adjacency + adjacency.T) > 0).astype(np.float64)  # undirected
            if self.check_mixing:
                self._check_reach(k, adjacency)
            degrees = np.asarray(adjacency.sum(axis=1)).ravel()
            return build(sp.csr_array(adjacency), degrees)

        return self.operators(k, "laplacian", laplacian)

    def _dual_ascent(self, eq, laplacian) -> list:
        x, alpha = eq.blocks("x", "alpha")
        alpha[:] += laplacian @ x
        return [eq.build("dual ascent")]


class DLM(_Laplacian):
    r"""DLM, the decentralized linearized ADMM (see the module docstring):

    .. math::

        x^{k+1} = x^k - \Lambda^{-1}\big(\nabla F(x^k) + \alpha^k + c L x^k\big),\quad
        \alpha^{k+1} = \alpha^k + c L x^{k+1},\quad \Lambda = 2 c D + \rho I,

    alpha^0 = 0. State: blocks ``x`` and ``alpha``, each (n, d); a round is "primal step"
    (x from x, alpha and the n gradients: a sparse product with I - c Lambda^{-1} L and
    the per-node coefficients of Lambda^{-1}) and "dual ascent" (alpha from the new x).
    Linear convergence with c and rho as in the paper's theorem (strongly convex, L-smooth
    f_i; rho large enough).

    **Step size.** ``lr`` is 1/rho, rho the paper's proximal (linearization) parameter:
    with c = 0 DLM is gradient descent with step ``lr`` at every node.

    Args:
        lr: 1/rho > 0.
        graphs: the graph sequence (undirected; the adjacency is symmetrised).
        penalty: c > 0.

    References:
        - Q. Ling, W. Shi, G. Wu and A. Ribeiro, "DLM: decentralized linearized
          alternating direction method of multipliers", IEEE Transactions on Signal
          Processing 63(15):4051-4064, 2015.
    """

    name = "DLM"
    rounds_repeat = True

    def __init__(self, lr, graphs: GraphSequence, penalty=1.0, check_mixing=True):
        super().__init__(lr, graphs, penalty, check_mixing)
        self.rho = 1.0 / self.lr

    def _build(self, adjacency, degrees) -> tuple:
        c, n = self.penalty, degrees.size
        laplacian = sp.diags_array(degrees) - adjacency
        inverse = 1.0 / (2.0 * c * degrees + self.rho)  # Lambda^{-1}, one number per node
        keep = sp.eye_array(n) - c * (sp.diags_array(inverse) @ laplacian)
        return _operator(keep), _operator(c * laplacian), inverse

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        keep, laplacian, inverse = self._operators(r, self._build)
        eq = self.round_equations(participants, ctx)
        x, alpha = eq.blocks("x", "alpha")
        everyone = np.arange(ctx.n_clients)
        x[:] = keep @ x - inverse * alpha - inverse * grad(everyone)
        return [eq.build("primal step"), *self._dual_ascent(eq, laplacian)]


class _AffineSolve:
    """x_i = (H_i + 2 c d_i I)^{-1} (c_i + v_i) for every node, grad f_i(x) = H_i x - c_i:
    the inverses are computed once per problem and graph (one batched inversion), so a
    round is one batched product (elementwise for diagonal Hessians)."""

    name = "exact local solve"

    def __init__(self, shift: np.ndarray, cache: dict):
        self.shift = shift  # 2 c d_i, every node
        self.cache = cache  # (problem, shift) -> (problem, shift, inverses, linear terms)

    def _inverses(self, problem):
        key = (id(problem), id(self.shift))
        found = self.cache.get(key)
        if found is None or found[0] is not problem or found[1] is not self.shift:
            self.cache.clear()
            h, lin = affine_gradients(problem)
            if h.ndim == 2:  # diagonal Hessians
                inverse = 1.0 / (h + self.shift[:, None])
            else:
                inverse = np.linalg.inv(h + self.shift[:, None, None] * np.eye(h.shape[-1]))
            found = self.cache[key] = (problem, self.shift, inverse, lin)
        return found[2], found[3]

    def row_affine(self, problem, rows: np.ndarray):
        """``(M, b, False)``: the map sends node k's row v to ``M_k (v + b_k)``, M the
        inverses above (diagonals or d x d) and b the linear terms c_i, for the nodes
        ``rows`` (see :func:`stochmix.engine.runner.slot_form._affine_triplets`: the
        compiled batches apply it themselves); None for a problem without affine
        gradients."""
        if not has_exact_prox(problem):
            return None
        inverse, lin = self._inverses(problem)
        return inverse[rows], lin[rows], False

    def __call__(self, v, *, info):
        if not has_exact_prox(info.problem):
            named = type(getattr(info.problem, "uncounted", info.problem)).__name__
            raise ValueError(
                f'DecentralizedADMM(solver="exact") needs local problems in closed form (a '
                f"Quadratic or a least-squares problem), got {named}; "
                'use solver="gradient"'
            )
        inverse, lin = self._inverses(info.problem)
        rhs = lin + v  # every node, in order
        if inverse.ndim == 2:
            return inverse * rhs
        return np.einsum("kij,kj->ki", inverse, rhs)


def _local_lr_hint(lr: float, graphs) -> str:
    """The error for ``solver="gradient"`` without ``local_lr``: the safe step's formula,
    with the largest degree of the graph of round 0 and ``lr`` filled in."""
    adjacency = graphs.adjacency(0)
    d_max = int(np.asarray(((adjacency + adjacency.T) > 0).sum(axis=1)).max())
    return (
        'local_lr must be given with solver="gradient": node i\'s local problem is '
        "(L_i + 2 d_i / lr)-smooth, so local_lr = 1 / (L + 2 d_max / lr) is safe, L = "
        f"problem.smoothness; here d_max = {d_max} (graph of round 0) and lr = {lr:g}: "
        f"local_lr = 1 / (problem.smoothness + {2 * d_max / lr:g})"
    )


class DecentralizedADMM(_Laplacian):
    r"""Decentralized consensus ADMM (see the module docstring), alpha^0 = 0:

    .. math::

        \text{exact:}\quad & x_i^{k+1} = \arg\min_x f_i(x) + \langle \alpha_i^k, x\rangle
            + c\, d_i \lVert x\rVert^2 - c\,\big\langle x, ((D + A) x^k)_i\big\rangle,\\
        \text{gradient:}\quad & K \text{ steps } x_i \leftarrow x_i - \gamma\big(\nabla
            f_i(x_i) + \alpha_i^k + 2 c\, d_i x_i - c ((D + A) x^k)_i\big)
            \text{ from } x_i^k,\\
        & \alpha^{k+1} = \alpha^k + c\, L x^{k+1}.

    On a composite problem f_i + r (:class:`~stochmix.problems.Composite`), the
    ``"gradient"`` solver's local steps are proximal-gradient steps, x_i <- prox_{gamma
    r}(x_i - gamma (...)), on the local problem with r added (the exact solver has no
    closed form there and refuses it).

    ``solver="exact"`` solves the local problems in closed form (affine gradients:
    :class:`~stochmix.problems.Quadratic`, :class:`~stochmix.problems.LeastSquares`;
    others are refused when the first round runs); ``"gradient"`` takes ``local_steps``
    gradient steps of size ``local_lr`` on them (any problem; exact as K grows). State: blocks
    ``x``, ``alpha`` and ``u`` (u = c (D + A) x^k - alpha^k, the local problems' linear
    term), each (n, d). A round is "neighbour sums" (u, one sparse product), the local
    solve (a row map, or K whole-block gradient steps) and "dual ascent".

    **Step size.** ``lr`` is 1/c, c the paper's penalty: node i's local problem is a
    proximal step on f_i of size lr / (2 d_i) from the average of its own and its
    neighbours' models (shifted by the dual), so a larger ``lr`` moves further.

    Args:
        lr: 1/c > 0.
        graphs: the graph sequence (undirected; the adjacency is symmetrised).
        solver: ``"exact"`` or ``"gradient"``.
        local_lr: gamma, the step of the local gradient steps, required with
            ``"gradient"``. Node i's local problem is (L_i + 2 d_i / lr)-smooth (L_i: F_i's
            smoothness, d_i: its degree), so 1 / (L + 2 d_max / lr) is a safe step, L =
            ``problem.smoothness`` (max_i L_i); the method is built before it sees the
            problem, so it has no default (the error without it gives this formula with
            d_max and lr filled in).
        local_steps: K (``"gradient"``).

    References:
        - W. Shi, Q. Ling, K. Yuan, G. Wu and W. Yin, "On the linear convergence of the
          ADMM in decentralized consensus optimization", IEEE Transactions on Signal
          Processing 62(7):1750-1761, 2014.
    """

    name = "DecentralizedADMM"
    _run_state = _Laplacian._run_state | {"_solve_cache"}
    #: every iteration builds the same phases (alpha^0 = 0: the first one too): plans
    #: reused, and a small graph's iterations in compiled batches (the exact solve's
    #: per-node matrices are applied by the batch loop, ``_AffineSolve.row_affine``)
    rounds_repeat = True

    def __init__(
        self,
        lr,
        graphs: GraphSequence,
        solver="exact",
        local_lr=None,
        local_steps=1,
        check_mixing=True,
    ):
        super().__init__(lr, graphs, 1.0 / as_float(lr, "lr", positive=True), check_mixing)
        self.solver = choice(solver, "solver", ("exact", "gradient"))
        self.proximal = self.solver == "gradient"  # its local steps take r's prox
        self.local_lr = None
        if self.solver == "gradient":
            if local_lr is None:
                raise ValueError(_local_lr_hint(self.lr, graphs))
            self.local_lr = as_float(local_lr, "local_lr", positive=True)
        elif local_lr is not None:
            raise ValueError(
                f'local_lr must be None with solver="exact" (the local problems are solved in '
                f'closed form: no local step), got local_lr={local_lr!r}; use solver="gradient"'
            )
        self.local_steps = as_int(local_steps, "local_steps", minimum=1)
        self._solve_cache: dict = {}

    def blocks(self, n_clients: int) -> list[Block]:
        return [*super().blocks(n_clients), Block("u", n_clients)]

    def start(self, ctx: RunContext) -> None:
        super().start(ctx)
        self._solve_cache = {}

    def _build(self, adjacency, degrees) -> tuple:
        c = self.penalty
        gather = c * (sp.diags_array(degrees) + adjacency)
        laplacian = c * (sp.diags_array(degrees) - adjacency)
        shift = 2.0 * c * degrees
        keep = 1.0 - (self.local_lr or 0.0) * shift  # of x_i in a local step, per node
        return _operator(gather), _operator(laplacian), shift, keep

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        gather, laplacian, shift, keep = self._operators(r, self._build)
        eq = self.round_equations(participants, ctx)
        x, alpha, u = eq.blocks("x", "alpha", "u")
        u[:] = gather @ x - alpha
        phases = [eq.build("neighbour sums")]
        if self.solver == "exact":
            solve = _AffineSolve(shift, self._solve_cache)
            everyone = np.arange(ctx.n_clients)
            phases.append(ctx.map("x", everyone, solve, "u", round=r, label="local solve"))
        else:
            gamma = cast(float, self.local_lr)
            x[:] = keep * x - gamma * grad() + gamma * u
            local = eq.build("local step")
            for _ in range(self.local_steps):
                phases.append(local)
                if ctx.regularizer is not None:
                    phases.append(prox_phase(ctx, eq, "x", "x", gamma, r))
        return [*phases, *self._dual_ascent(eq, laplacian)]

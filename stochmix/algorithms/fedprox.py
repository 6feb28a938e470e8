"""FedProx: local training on a proximal objective (Li et al. 2020)."""

from __future__ import annotations

import numpy as np

from .._validate import as_float, choice
from ..engine import Block, Equations, Method, RunContext, grad
from ..participation import uniform_weights
from .aggregation import averaged
from .local_training import LocalTraining, train
from .proximal import map_rows

__all__ = [
    "FedProx",
    "SOLVERS",
    "has_exact_prox",
]

SOLVERS = ("gradient", "exact")


def has_exact_prox(problem) -> bool:
    """Whether :class:`FedProx` can solve ``problem``'s local problems in closed form: a
    problem with affine gradients (:class:`~stochmix.protocols.AffineGradientProblem`:
    :class:`~stochmix.problems.Quadratic`, :class:`~stochmix.problems.LeastSquares`), or
    one that gives them as ``hessians_and_linear_terms()``."""
    # the members looked up one by one, not isinstance: a Composite forwards them to its
    # smooth part through __getattr__, which isinstance does not see on Python >= 3.12
    return callable(getattr(problem, "affine_gradients", None)) or callable(
        getattr(problem, "hessians_and_linear_terms", None)
    )


def affine_gradients(problem) -> tuple[np.ndarray, np.ndarray]:
    """``(H, c)`` with grad F_i(x) = H_i x - c_i (H the diagonals where the problem keeps
    them so): its :meth:`~stochmix.protocols.AffineGradientProblem.affine_gradients`, else
    the full Hessians of ``hessians_and_linear_terms()``."""
    compact = getattr(problem, "affine_gradients", None)
    return compact() if callable(compact) else problem.hessians_and_linear_terms()


class _ExactProx:
    """y_i = argmin_y F_i(y) + mu/2 ||y - x_0||^2 for the clients ``rows - 1``, all at
    once: elementwise for diagonal Hessians, one batched linear solve otherwise."""

    name = "exact prox"

    def __init__(self, mu: float, cache: dict):
        self.mu = mu
        self.cache = cache  # id(problem) -> (problem, H, c)

    def _affine(self, problem):
        found = self.cache.get(id(problem))
        if found is None or found[0] is not problem:
            self.cache.clear()
            found = self.cache[id(problem)] = (problem, *affine_gradients(problem))
        return found[1], found[2]

    def __call__(self, x0, *, info):
        problem = info.problem
        if not has_exact_prox(problem):
            raise ValueError(
                f'FedProx(solver="exact") needs the local problems in closed form (a '
                f"Quadratic or a least-squares problem), got {type(problem).__name__}; "
                f'use solver="gradient"'
            )
        clients = info.rows - 1
        mu = self.mu
        hess, lin = self._affine(problem)
        h, rhs = hess[clients], lin[clients]
        if h.ndim == 2:  # diagonal: (h z + mu x0) / (h + mu), entry by entry
            return (rhs + mu * x0) / (h + mu)
        eye = np.eye(h.shape[-1])
        return np.linalg.solve(h + mu * eye, (rhs + mu * x0)[..., None])[..., 0]


class FedProx(LocalTraining, Method):
    r"""FedProx over one model block ``x`` (row 0 server, row i+1 client i).

    Client i in S minimises the proximal objective
    :math:`F_i(y) + \tfrac{\mu}{2}\lVert y - x_0\rVert^2`, then the server averages:

    .. math::

        \text{gradient:}\quad & x_i \leftarrow x_0;\ \ K \text{ times }
            x_i \leftarrow x_i - \gamma\,\big(\nabla F_i(x_i) + \mu (x_i - x_0)\big)\\
        \text{exact:}\quad & x_i \leftarrow (H_i + \mu I)^{-1} (H_i z_i + \mu x_0)
            \quad(\text{affine gradients } \nabla F_i(y) = H_i y - c_i:
            (H_i + \mu I)^{-1}(c_i + \mu x_0))\\
        & x_0 \leftarrow x_0 + \eta\,\tfrac{1}{|S|}\textstyle\sum_{i\in S}(x_i - x_0)

    ``solver="gradient"`` (the K inexact local steps) is linear, so the exact-operator
    analysis applies; ``solver="exact"`` is a nonlinear row map
    (:class:`~stochmix.engine.RowMap`) that reads the problem: elementwise for a
    :class:`~stochmix.problems.Quadratic` with diagonal Hessians, one batched
    ``numpy.linalg.solve`` over the participants for full Hessians and least squares
    (whose H_i, c_i are computed once per run); any other problem is refused with a
    ValueError when the first round runs. A round nobody joins changes nothing.

    Args:
        lr: local step size gamma (``"gradient"`` only).
        mu: the proximal weight mu >= 0.
        local_steps: K (``"gradient"`` only).
        server_lr: eta.
        solver: ``"gradient"`` or ``"exact"``.

    Shapes: ``x`` (N + 1, d).

    References:
        - T. Li, A. K. Sahu, M. Zaheer, M. Sanjabi, A. Talwalkar and V. Smith (2020), "Federated
          optimization in heterogeneous networks", MLSys 2020 (arXiv:1812.06127).
    """

    name = "FedProx"
    _run_state = Method._run_state | {"_prox_cache"}

    def __init__(self, lr, mu=0.01, local_steps=1, server_lr=1.0, solver="gradient") -> None:
        self.lr = as_float(lr, "lr", positive=True)
        self.mu = as_float(mu, "mu", nonnegative=True)
        self._set_local_steps(local_steps)
        self.server_lr = as_float(server_lr, "server_lr", positive=True)
        self.solver = choice(solver, "solver", SOLVERS)
        self._prox_cache: dict = {}

    def blocks(self, n_clients: int) -> list[Block]:
        return [Block("x", n_clients + 1, "model")]

    def phase_key(self, r: int, participants: np.ndarray):
        return self.steps_key(participants.tobytes()) if self.solver == "gradient" else None

    def template_key(self, r: int, participants: np.ndarray):
        # one template for rounds of every size: the average's coefficients read the
        # participants (round scalars); a subclass keeps the key by |S| (its hooks may
        # read |S| without a rule)
        if self.solver != "gradient":
            return None
        return "gradient" if type(self) is FedProx else participants.size

    def start(self, ctx: RunContext) -> None:
        self._prox_cache = {}

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        S = participants
        if S.size == 0:
            return []
        R, _ = self.uploads(S, ctx)  # the server averages the uploads that arrived
        eq = Equations(ctx)
        (x,) = eq.blocks("x")
        if R.size:  # x_0 <- x_0 + eta / |R| sum_R (x_i - x_0)
            x.server = averaged(x, R, uniform_weights(R), self.server_lr, uniform_weights)
        aggregate = eq.build("average")
        if self.solver == "exact":
            prox = _ExactProx(self.mu, self._prox_cache)
            local = map_rows(ctx, x[S], prox, x.server, round=r, label="exact prox")
            return [local, *self.sent(R, ctx), aggregate]

        def step(G):  # after the pull x[G] = x.server
            x[G] -= self.lr * (grad(G) + self.mu * (x[G] - x.server))

        steps = self.round_steps(r, S, ctx)
        return [*train(eq, S, steps, step, "proximal step"), *self.sent(R, ctx), aggregate]

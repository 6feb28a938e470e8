"""The exact affine maps of a method's phases, rounds and periodic patterns of rounds on a
problem with affine gradients, and the run context they are built in (as
:func:`stochmix.run` makes it)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from jaxtyping import Bool, Int

from ..._validate import _show, as_bool_array, as_client_indices, as_int, as_probabilities
from ...engine import Layout, Method, NonlinearPhaseError, Phase, RowMap, RunContext
from ...engine.model.method import model_points
from .gradients import affine_gradients
from .maps import AffineMap

__all__ = [
    "pattern_operator",
    "phase_operator",
    "round_operator",
    "run_context",
]


def _check_points(method: Method) -> None:
    if not model_points(method):
        raise NotImplementedError(
            f"{type(method).__name__} overrides points(): it takes its gradients at points that "
            "are not rows of the state (push-sum divides the model block by the weight block), "
            "so a phase is not affine in the state and has no exact linear operator"
        )


def run_context(method: Method, problem, probabilities=None, seed=None) -> RunContext:
    """A :class:`RunContext` as :func:`stochmix.run` makes it (``method.start`` called).

    ``probabilities`` are the participation marginals a method may read (FedStale, unbiased
    FedAvg); pass the process's ``.probabilities``. ``seed``: the run's seed, from which a
    method's own draws derive (``RandomSteps``' local step counts); None draws fresh ones.
    """
    if not isinstance(method, Method):
        raise TypeError(f"method must be a stochmix Method, got {_show(method)}")
    if not (hasattr(problem, "n_clients") and hasattr(problem, "dim")):
        raise TypeError(
            f"problem must be a stochmix Problem (with n_clients and dim), got {_show(problem)}"
        )
    n, d = int(problem.n_clients), int(problem.dim)
    if probabilities is not None:
        probabilities = as_probabilities(probabilities, "probabilities", n)
    ctx = RunContext(Layout(method.blocks(n)), n, d, probabilities, seed=seed)
    method.start(ctx)
    return ctx


def phase_operator(phase: Phase, layout: Layout, method: Method, problem) -> AffineMap:
    """The exact affine map ``vec(Z+) = T vec(Z) + t`` of one phase.

    ``T = M (x) I_d + (B (x) I_d) blockdiag(H_c) (S (x) I_d)`` and ``t = -(B (x) I_d) vec(c)``
    over the clients the phase asks gradients of, ``S`` selecting their model rows
    (``client_node + c`` of ``model_block``). Unpacks as ``T, t``.

    Raises:
        NotImplementedError: the method overrides ``points`` (push-sum), so the phase is not
            affine in the state.
        NonlinearPhaseError: the phase is a nonlinear row map
            (:class:`~stochmix.engine.RowMap`: a prox, a compression, an adaptive step).
    """
    if isinstance(phase, RowMap):
        raise NonlinearPhaseError(
            f"phase {phase.label!r} applies a nonlinear row-wise map ({phase.name}); the "
            "exact operator exists only for linear phases"
        )
    _check_points(method)
    aff = affine_gradients(problem)
    m, d = layout.size, aff.dim
    if phase.size != m:
        raise ValueError(f"phase acts on {phase.size} rows but the layout has {m}")
    eye = sp.identity(d, format="csr")
    lin = sp.csr_array(sp.kron(phase.matrix(), eye, format="csr"))
    offset = np.zeros(m * d)
    if phase.clients.size and phase.inject is not None:
        clients = phase.clients
        c = clients.size
        coo = phase.inject.tocoo()
        inject = sp.csr_array((coo.data, (phase.rows[coo.row], coo.col)), shape=(m, c))
        kb = sp.csr_array(sp.kron(inject, eye, format="csr"))
        model_rows = layout.rows(method.model_block, clients + method.client_node)
        select = sp.csr_array((np.ones(c), (np.arange(c), model_rows)), shape=(c, m))
        ks = sp.csr_array(sp.kron(select, eye, format="csr"))
        if phase.samples is not None:  # sampled gradients, the draws fixed
            drawn = aff.sampled(clients, phase.samples)
            lin = lin + kb @ drawn.block(np.arange(c)) @ ks
            offset = -(kb @ drawn.linear.reshape(-1))
        else:
            lin = lin + kb @ aff.block(clients) @ ks
            offset = -(kb @ aff.linear[clients].reshape(-1))
    return AffineMap(lin, offset, (m, d))


def refuse_sampled(phase: Phase) -> None:
    """Refuse a phase with sampled gradients where gradients are the full ones (the
    per-round simulations and expectations): only :func:`phase_operator` and the maps
    built on it fix a draw."""
    if getattr(phase, "draws", None) is not None:
        raise NotImplementedError(
            f"phase {phase.label!r} takes sampled gradients (grad(S, samples=...)): its map "
            "depends on the draw; phase_operator and round_operator give it with the draw "
            "fixed, the simulations and expectations here take full gradients only"
        )


def _participants(participants, n: int) -> np.ndarray:
    """Sorted client indices from a boolean mask of shape (n,) or distinct indices."""
    if isinstance(participants, np.ndarray) and participants.dtype == np.bool_:
        return np.flatnonzero(as_bool_array(participants, "participants", shape=(n,)))
    return np.sort(as_client_indices(participants, n, "participants", distinct=True))


def round_operator(
    method: Method,
    problem,
    participants: Int[np.ndarray, " s"] | Bool[np.ndarray, " n"],
    r: int = 0,
    ctx: RunContext | None = None,
    *,
    probabilities=None,
) -> AffineMap:
    """The exact affine map of round ``r`` with the given participants (indices or a mask).

    Composes the round's phases (``method.round_phases(r, participants, ctx)``) in order. A
    fresh context is made as :func:`stochmix.run` makes it unless ``ctx`` is given; pass the
    same ``ctx`` for consecutive rounds of a method that learns during the run (FedAU), whose
    ``round_phases`` updates ``ctx.memory``. Unpacks as ``T, t``.
    """
    if ctx is None:
        ctx = run_context(method, problem, probabilities)
    elif not isinstance(ctx, RunContext):
        raise TypeError(f"ctx must be a RunContext (see run_context) or None, got {_show(ctx)}")
    aff = affine_gradients(problem)
    if aff.n_clients != ctx.n_clients or aff.dim != ctx.dim:
        raise ValueError(
            f"problem has {aff.n_clients} clients in dimension {aff.dim} but ctx has "
            f"{ctx.n_clients} in {ctx.dim}"
        )
    r = as_int(r, "r", minimum=0)
    idx = _participants(participants, ctx.n_clients)
    shape = (ctx.layout.size, ctx.dim)
    out = AffineMap.identity(shape[0] * shape[1], shape)
    for phase in method.round_phases(r, idx, ctx):
        if getattr(phase, "draws", None) is not None and ctx.seed is None:
            raise ValueError(
                f"round {r} of {method.name}: phase {phase.label!r} takes sampled gradients, "
                "drawn from the run's seed; give a ctx with it (ctx = run_context(method, "
                "problem); ctx.seed = the run's seed) to fix the draws"
            )
        if not phase.is_identity:
            out = phase_operator(phase, ctx.layout, method, aff).compose(out)
    return out


def _masks(masks, n: int, *, someone: bool = False) -> np.ndarray:
    """``masks`` as a (period, n) boolean array; with ``someone``, a pattern in which no
    client ever participates is refused (the method would never move)."""
    arr = as_bool_array(masks, "masks")
    if arr.ndim == 1:
        arr = arr[None, :]
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] != n:
        raise ValueError(f"masks must have shape (period, {n}), got {arr.shape}")
    if someone and not arr.any():
        raise ValueError(
            f"masks must let at least one client participate, got all-empty masks of shape "
            f"{arr.shape}: no client ever participates, so the method never moves"
        )
    return arr


def pattern_operator(
    method: Method,
    problem,
    masks: Bool[np.ndarray, "p n"],
    first_round: int = 0,
    ctx: RunContext | None = None,
    *,
    probabilities=None,
) -> AffineMap:
    """The map of rounds ``first_round, ..., first_round + P - 1`` whose participants are
    ``masks[r % P]`` (P = len(masks)): one period of a periodic participation pattern."""
    ctx = run_context(method, problem, probabilities) if ctx is None else ctx
    masks = _masks(masks, ctx.n_clients)
    first_round = as_int(first_round, "first_round", minimum=0)
    shape = (ctx.layout.size, ctx.dim)
    out = AffineMap.identity(shape[0] * shape[1], shape)
    for r in range(first_round, first_round + masks.shape[0]):
        out = round_operator(method, problem, masks[r % masks.shape[0]], r, ctx).compose(out)
    return out

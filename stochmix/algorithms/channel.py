"""Additive channel noise on the messages of any decentralized method."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from .._validate import as_float
from ..engine import RunContext
from ..engine.model.rowmap import RowMap
from .decentralized_base import DecentralizedMethod
from .wrapper import Wrapper

__all__ = [
    "ChannelNoise",
]


class ChannelNoise(Wrapper):
    r"""``method`` with additive Gaussian noise on every message its mixing sends.

    Wherever a phase of ``method`` mixes a whole block S with a matrix W (a term
    ``scale * W @ S`` of target block T), node i receives from each in-neighbour j != i the
    value ``S_j + n_ij`` with n_ij ~ N(0, sigma^2 I_d), independent across edges, source
    blocks, phases and rounds; self-loops are noiseless. So after the phase

    .. math::

        T_i \mathrel{+}= \text{scale} \sum_{j \ne i} W_{ij}\, n_{ij},

    and every term of the phase that reads the same transmission (the same S and W) sees
    the same noise. The noise is added by a nonlinear row map after the phase
    (:mod:`stochmix.engine.model.rowmap`): its draws come from the run's seed, the round and a
    label naming the phase and the source block (per edge, in the order of W's stored
    entries), so a reference can reproduce them and a resumed run draws the same.

    Everything else is ``method``'s: its blocks, points, outputs and checks. Under node
    activation an active node's pull is noisy as above (its row of W, the entries in
    that row's order); an activated push (push-sum, the tracker of push-pull) carries no
    noise yet.

    Args:
        method: a decentralized method (:class:`~stochmix.algorithms.DecentralizedMethod`).
        sigma: the noise's standard deviation per entry (0: ``method`` unchanged).
    """

    method: DecentralizedMethod

    def __init__(self, method: DecentralizedMethod, sigma):
        if not isinstance(method, DecentralizedMethod):
            raise TypeError(f"method must be a decentralized method, got {type(method).__name__}")
        super().__init__(method, f"{method.name} + channel noise")
        self.sigma = as_float(sigma, "sigma", nonnegative=True)

    def points(self, z, ctx: RunContext, clients: np.ndarray):
        return self.method.points(z, ctx, clients)

    def output(self, z, ctx: RunContext):
        return self.method.output(z, ctx)

    @property
    def checked_by_output(self) -> tuple[str, ...]:  # type: ignore[override]
        return self.method.checked_by_output

    @property
    def reports_node_average(self) -> bool:  # type: ignore[override]
        return self.method.reports_node_average

    def consensus_error(self, z, ctx: RunContext):
        return self.method.consensus_error(z, ctx)

    def node_models(self, z, ctx: RunContext):
        return self.method.node_models(z, ctx)

    def fingerprint(self) -> str:
        from .._fingerprint import digest

        return digest(type(self).__qualname__, self.sigma, self.method.fingerprint())

    def round_phases(self, r: int, participants: np.ndarray, ctx: RunContext) -> list:
        phases = self.method.round_phases(r, participants, ctx)
        if self.sigma == 0.0:
            return phases
        out = []
        for phase in phases:
            out.append(phase)
            form = None if isinstance(phase, RowMap) else phase.blockwise
            if form is None:
                continue
            for target in form.targets:
                for term in target.terms:
                    if term.kind == "mix":
                        out.append(self._noise(phase.label, target.block, term, r, ctx))
        return out

    def _noise(self, label: str, target: str, term, r: int, ctx: RunContext):
        """The row map adding ``scale * sum_{j != i} W_ij n_ij`` to every row of
        ``target``, with n drawn for the transmission of ``term.source`` by ``W``."""
        w, scale, sigma = term.rows_matrix(), float(term.coef), self.sigma
        received = received_noise_operator(w, term.select)

        def add_noise(values, info):
            draws = info.rng.standard_normal((w.nnz, values.shape[1]))
            return values + scale * sigma * (received @ draws)

        # (under node activation the rows of the active nodes, which receive)
        rows = np.arange(ctx.layout.block(target).rows) if term.select is None else term.select
        name = channel_label(label, term.source)
        return ctx.map(target, rows, add_noise, target, round=r, label=name)


def channel_label(phase_label: str, source: str) -> str:
    """The label (and so the random stream) of the noise on block ``source``'s
    transmission in a phase labelled ``phase_label``."""
    return f"{phase_label}: channel noise on {source}"


def received_noise_operator(w, nodes=None) -> sp.csr_array:
    """The (rows, nnz) matrix R with ``(R @ n)_i = sum_{j != i} W_ij n_e``, e the stored
    entry (i, j) of ``w`` (CSR order); self-loops get no noise. ``nodes``: the node of
    each row of ``w`` where it holds some rows of a matrix (an activated pull's rows A);
    by default row i is node i."""
    w = sp.csr_array(w)
    rows = np.repeat(np.arange(w.shape[0]), np.diff(w.indptr))
    node = rows if nodes is None else np.asarray(nodes, dtype=np.int64)[rows]
    weights = np.where(w.indices == node, 0.0, w.data)
    return sp.csr_array((weights, (rows, np.arange(w.nnz))), shape=(w.shape[0], w.nnz))

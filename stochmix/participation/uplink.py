"""Lost uploads: a participation process whose participants' uploads may not arrive."""

from __future__ import annotations

from collections.abc import Iterator

from .._validate import as_float, show
from ..engine.model.rowmap import map_generator
from ._record import Activation
from .base import ParticipationProcess

__all__ = [
    "UplinkDrops",
]

#: the label of the drops' random stream among a run's streams
DROPS_LABEL = "uplink drops"


class UplinkDrops(ParticipationProcess):
    """``process`` whose participants each lose their upload with probability ``p``,
    independently, *after* their local work.

    A round's record keeps the participants (they pulled the model and trained: their
    gradients count and their own state moves: FOCUS's trackers, SCAFFOLD's controls)
    and says whose uploads arrived (``received``); every federated method's server then
    treats the others as non-participants (MIFA's and FedStale's memories keep their old
    values). The cohorts are those of ``process`` with the same seed; the drops come from
    their own stream (the run's seed, label ``"uplink drops"``).

    Args:
        process: the participation process.
        p: the probability that a participant's upload is lost, in [0, 1).
    """

    #: runs refuse it for methods whose servers do not read the ``received`` set
    loses_uploads = True

    def __init__(self, process: ParticipationProcess, p: float):
        if not isinstance(process, ParticipationProcess):
            raise TypeError(f"process must be a participation process, got {show(process)}")
        self.process = process
        self.p = as_float(p, "p", nonnegative=True)
        if self.p >= 1.0:
            raise ValueError(f"p must be < 1 (every upload lost), got {self.p!r}")
        self.n_clients = process.n_clients

    @property
    def probabilities(self):
        """The wrapped process's marginals p_i: who works. An upload arrives with
        probability (1 - p) p_i, so weights built from p_i (``weights="unbiased"``,
        FedVARP's) are off by the factor 1 - p under drops."""
        return self.process.probabilities

    def _stream(self, rng):
        return self.process._stream(rng)

    def activations(self, seed=None) -> Iterator[Activation]:
        rng = map_generator(seed, 0, DROPS_LABEL)
        for record in self.process.activations(seed):
            nodes = record.nodes
            kept = nodes[rng.random(nodes.size) >= self.p]
            yield Activation(nodes, record.edges, record.time, received=kept)

    def __repr__(self) -> str:
        return f"UplinkDrops({self.process!r}, p={self.p!r})"

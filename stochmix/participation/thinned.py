"""The participation a run's method actually gets: the process, thinned by whatever else
drops nodes from its rounds.

A method that needs every node in every round (gradient tracking's doubly stochastic
mixing, decentralized ADMM, DLM, FedPD, GT-SVRG/SAGA/SARAH, Scaffnew) must refuse every
source of partial participation before any work, not only the process: a
:class:`~stochmix.timing.Clock`'s ``deadline`` (late clients are dropped) and
``availability`` (clients that are off are dropped), and lost uploads
(:class:`~stochmix.participation.UplinkDrops`). :func:`thinned` gives the run's
participation as the method sees it: the process itself when nothing else drops nodes,
else a :class:`Thinned` view whose marginals are unknown and which says it activates
nodes (``drops_nodes``), so that the method's ``check_participation`` refuses it as it
refuses any node activation, with an error naming what drops the nodes and its value.
"""

from __future__ import annotations

__all__ = [
    "Thinned",
    "thinned",
]


class Thinned:
    """``process`` with nodes dropped from its rounds by ``sources`` (a view for
    ``Method.check_participation``; it draws nothing).

    Attributes:
        process: the participation process.
        sources: what drops the nodes, each as ``argument=value`` (tuple of str).
    """

    #: node activation (a round may hold any subset of the process's nodes)
    activates = "nodes"
    #: whether some rounds may miss nodes the process drew (always: what the view is for)
    drops_nodes = True
    #: no closed-form marginals (they depend on the delays, the deadline, the drops)
    probabilities = None
    #: no recorded masks
    masks_array = None

    def __init__(self, process, sources: tuple[str, ...]):
        self.process = process
        self.sources = tuple(sources)

    @property
    def n_clients(self) -> int:
        """The process's number of clients N."""
        return int(self.process.n_clients)

    def __repr__(self) -> str:
        return f"{self.process!r} thinned by {' and '.join(self.sources)}"


def thinned(participation, clock=None):
    """``participation`` as the run's method gets it (see the module docstring): itself
    when neither ``clock`` (its ``deadline`` and ``availability``) nor lost uploads
    (``participation.loses_uploads``) drop nodes, else a :class:`Thinned` view naming each
    source and its value."""
    sources = []
    if clock is not None and getattr(clock, "deadline", None) is not None:
        sources.append(f"clock.deadline={clock.deadline!r}")
    if clock is not None and getattr(clock, "availability", None) is not None:
        sources.append(f"clock.availability={clock.availability!r}")
    if getattr(participation, "loses_uploads", False):
        sources.append(f"lost uploads (p={getattr(participation, 'p', '?')!r})")
    return Thinned(participation, tuple(sources)) if sources else participation

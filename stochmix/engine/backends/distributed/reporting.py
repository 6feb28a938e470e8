"""What a sharded run reports and refuses: the recorder's view of a method on a shard
(``_Reported``: a federated method's replicated server row; ``_NetworkAverage``: a
decentralized method's mean of its node models and consensus error, summed along the
shard's fixed tree), chosen by ``_reporter``, and ``_refuse``, the errors for what a
shard cannot run. See :mod:`stochmix.engine.backends.distributed`."""

from __future__ import annotations

from ...model.layout import Layout
from ...model.method import Method
from .shard import Shard

__all__: list[str] = []


class _Reported:
    """What the recorder asks of a federated method, on a shard: the server row of the
    model block (replicated), and no consensus error (federated methods have none)."""

    def __init__(self, method, row: int):
        self.method, self.row = method, row

    def output(self, z, ctx):
        return z[self.row]

    def consensus_error(self, z, ctx):
        return None


class _NetworkAverage:
    """What the recorder asks of a decentralized method, on a shard: the mean of the
    method's ``node_models`` over all nodes, shape (d,), and their mean squared distance
    to it (what :class:`~stochmix.algorithms.decentralized.DecentralizedMethod` reports
    on one process).

    Both are sums over the nodes taken per segment of the fixed grid and added as one
    binary tree (:meth:`Shard.reduce`): **the same bits on any number of ranks**. One
    process adds the same numbers in another order (NumPy's blocked and pairwise sums),
    so against the NumPy backend they agree to rounding (about 1e-15 relative), not bit
    for bit; the state itself is bit-identical."""

    def __init__(self, method, shard: Shard):
        self.method, self.shard = method, shard
        self._mean = None

    def _models(self, z):
        return self.method.node_models(z, self.shard.local_ctx)

    def output(self, z, ctx):
        shard = self.shard
        self._mean = shard.reduce(shard.segment_sums(self._models(z)), "output") / shard.n
        return self._mean

    def consensus_error(self, z, ctx):
        """Called after :meth:`output` for the same state (as the recorder does)."""
        shard = self.shard
        spread = ((self._models(z) - self._mean) ** 2).sum(axis=1)
        return float(shard.reduce(shard.segment_sums(spread), "consensus") / shard.n)


def _reports_network_average(method) -> bool:
    """Whether ``method`` reports the mean of its ``node_models``: a method with a node
    per row (``client_node`` 0) that declares ``reports_node_average`` (see
    :attr:`stochmix.engine.Method.reports_node_average`; a subclass may change the node
    models, as push-sum does, but not the output without declaring it again)."""
    return (
        getattr(method, "client_node", None) == 0
        and callable(getattr(method, "node_models", None))
        and bool(getattr(method, "reports_node_average", False))
        and not INSTANCE_REPORTS & vars(method).keys()
    )


#: report hooks that, set on a method's instance, a shard would not call (it averages the
#: node models and computes their spread itself): such a method is refused
INSTANCE_REPORTS = frozenset({"output", "consensus_error"})


def _server_output(method) -> bool:
    """Whether ``method`` reports its server row (:meth:`Method.output`, not rewritten on
    its class or set on the instance)."""
    return type(method).output is Method.output and "output" not in vars(method)


def _reporter(method, shard: Shard, layout: Layout):
    """The recorder's view of ``method`` on ``shard`` (see :func:`_refuse` for what is
    refused)."""
    if _server_output(method):
        return _Reported(method, shard.at(layout.start(method.model_block)))
    return _NetworkAverage(method, shard)


def _refuse(method, problem, shard: Shard) -> None:
    """Refuse, with an error naming the argument, what a shard cannot run."""
    from ...plan.gradients import pure_formula as _pure_formula

    name = type(method).__name__
    if not _server_output(method):
        if not _reports_network_average(method):
            raise NotImplementedError(
                f'backend="distributed": method {name} reports its own output; a shard '
                "reports the server row (federated methods, Method.output) or the mean of "
                "node_models over all nodes (decentralized methods: client_node 0, and "
                "output and consensus_error written with node_models)"
            )
        if shard.local_ctx is None:
            raise NotImplementedError(
                f'backend="distributed": method {name} is decentralized, and a shard runs '
                "decentralized methods whose every block has one row per node, at least "
                f"one node per rank ({shard.n} nodes on {shard.backend.size} ranks, blocks "
                f"{[(b.name, b.rows) for b in shard.layout.blocks]})"
            )
    if not _pure_formula(problem):
        raise ValueError(
            f'backend="distributed" needs gradients that are a pure formula of the data; '
            f"problem {type(problem).__name__}'s draw random numbers (each rank would draw "
            "its own)"
        )

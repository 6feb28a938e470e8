"""The kinds a configuration names and their factories: problems, federated and decentralized
methods, participation processes, graph sequences, the weight rules each method needs and
the message-drop keys of ``[graphs]``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import networkx as nx

from .. import algorithms, mixing, participation, problems
from ..engine import Method
from .parsing import DEFAULT_SEED, ConfigError

__all__ = [
    "ACTIVATIONS",
    "AVERAGING",
    "DECENTRALIZED",
    "DOUBLY_STOCHASTIC_RULE",
    "DROP_KEYS",
    "EVERY_CLIENT",
    "FEDERATED",
    "GRAPHS",
    "METHODS",
    "PROBLEMS",
    "PROCESSES",
    "RULE_NEEDS",
]

#: Problems: kind -> the class whose ``random(...)`` builds it from the table's other keys.
PROBLEMS: dict[str, Callable[..., problems.Problem]] = {
    "quadratic": problems.Quadratic.random,
    "least_squares": problems.LeastSquares.random,
    "logistic": problems.Logistic.random,
    "nonconvex_logistic": problems.NonconvexLogistic.random,
}

#: Federated methods: kind -> (constructor, arguments the kind fixes).
FEDERATED: dict[str, tuple[Callable[..., Method], dict[str, Any]]] = {
    "fedavg": (algorithms.FedAvg, {}),
    "fedau": (algorithms.FedAvg, {"weights": "fedau"}),
    "amplified_fedavg": (algorithms.AmplifiedFedAvg, {}),
    "fedstale": (algorithms.FedStale, {}),
    "fedvarp": (algorithms.FedVARP, {}),
    "mifa": (algorithms.MIFA, {}),
    "scaffold": (algorithms.SCAFFOLD, {}),
    "focus": (algorithms.FOCUS, {}),
    "fedavgm": (algorithms.FedAvgM, {}),
    "feddyn": (algorithms.FedDyn, {}),
    "scaffnew": (algorithms.Scaffnew, {}),
    "fedadam": (algorithms.FedAdam, {}),
    "fedyogi": (algorithms.FedYogi, {}),
    "fedadagrad": (algorithms.FedAdagrad, {}),
    "fedprox": (algorithms.FedProx, {}),
    "fednova": (algorithms.FedNova, {}),
    "fedbuff": (algorithms.FedBuff, {}),
    "fedasync": (algorithms.FedAsync, {}),
    "fedmid": (algorithms.FedMid, {}),
    "feddualavg": (algorithms.FedDualAvg, {}),
    "fedpd": (algorithms.FedPD, {}),
    "fed_lt": (algorithms.FedLT, {}),
}

#: Federated methods whose papers run every client in every round (Scaffnew) or draw
#: their own clients as updates arrive (FedBuff, FedAsync, from the ``[clock]``'s arrival
#: schedule): like the decentralized ones they take ``full`` participation only.
EVERY_CLIENT = ("scaffnew", "fedbuff", "fedasync", "fedpd")

#: Decentralized methods (they take the [graphs] sequence): kind -> (constructor, fixed).
DECENTRALIZED: dict[str, tuple[type[algorithms.DecentralizedMethod], dict[str, Any]]] = {
    "dgd": (algorithms.DGD, {}),
    "gradient_tracking": (algorithms.GradientTracking, {}),
    "push_pull": (algorithms.PushPull, {}),
    "push_sum": (algorithms.PushSum, {}),
    "extra": (algorithms.EXTRA, {}),
    "nids": (algorithms.NIDS, {}),
    "exact_diffusion": (algorithms.ExactDiffusion, {}),
    "d2": (algorithms.D2, {}),
    "push_diging": (algorithms.PushDIGing, {}),
    "choco": (algorithms.CHOCO, {}),
    "kgt": (algorithms.KGT, {}),
    "pg_extra": (algorithms.PGEXTRA, {}),
    "prox_nids": (algorithms.ProxNIDS, {}),
    "dlm": (algorithms.DLM, {}),
    "admm": (algorithms.DecentralizedADMM, {}),
    "led": (algorithms.LED, {}),
    "gt_svrg": (algorithms.GTSVRG, {}),
    "gt_saga": (algorithms.GTSAGA, {}),
    "gt_sarah": (algorithms.GTSARAH, {}),
    "relaxed_admm": (algorithms.RelaxedADMM, {}),
    "lt_admm": (algorithms.LTADMM, {}),
    "acc_dngd": (algorithms.AccDNGD, {}),
    "mudag": (algorithms.Mudag, {}),
    "dapg": (algorithms.DAPG, {}),
    "apapc": (algorithms.APAPC, {}),
    "opapc": (algorithms.OPAPC, {}),
    "ssda": (algorithms.SSDA, {}),
    "msda": (algorithms.MSDA, {}),
    "adpsgd": (algorithms.ADPSGD, {}),
}

#: Every method kind of ``[[methods]]``: :data:`FEDERATED` and :data:`DECENTRALIZED`.
METHODS: dict[str, tuple[Callable[..., Method], dict[str, Any]]] = {
    **FEDERATED,
    **DECENTRALIZED,
}

#: The weight-rule arguments of each decentralized method and the stochasticity their
#: matrices need, as the methods state it (``DecentralizedMethod.needs``): gradient
#: tracking averages (doubly stochastic), DGD needs row-stochastic weights, push-pull pulls
#: with a row- and pushes with a column-stochastic matrix, push-sum pushes.
RULE_NEEDS = {kind: dict(cls.needs) for kind, (cls, _) in DECENTRALIZED.items()}

#: Methods whose default rule is the graph's doubly stochastic one: they reach the
#: minimiser of the plain average of the clients' objectives only with it.
AVERAGING = (
    "dgd", "gradient_tracking", "extra", "nids", "exact_diffusion", "d2", "choco", "kgt",
    "pg_extra", "prox_nids", "led", "gt_svrg", "gt_saga", "gt_sarah", "acc_dngd", "mudag",
    "ssda", "msda", "apapc", "opapc", "dapg", "adpsgd",
)  # fmt: skip

_STOCHASTIC = {
    "doubly": mixing.is_doubly_stochastic,
    "row": mixing.is_row_stochastic,
    "column": mixing.is_column_stochastic,
}


# --------------------------------------------------------------------------- participation
def _bernoulli(n_clients, p=None, low=None, high=None, seed=DEFAULT_SEED, draws="fast"):
    """Bernoulli participation: ``p`` (one number or one per client), or each p_i drawn
    uniformly in ``[low, high]`` from ``seed``; ``draws`` as in :class:`Bernoulli`."""
    if p is not None:
        if low is not None or high is not None:
            raise ConfigError("participation.p: give p, or low and high, not both")
        return participation.Bernoulli(p, n_clients=n_clients, draws=draws)
    if low is None or high is None:
        raise ConfigError("participation: bernoulli needs p, or low and high")
    return participation.Bernoulli.heterogeneous(n_clients, low, high, seed=seed, draws=draws)


def _weighted(n_clients, weights, size):
    """``size`` clients a round drawn with probability proportional to ``weights``."""
    if not isinstance(weights, list) or len(weights) != n_clients:
        shown = len(weights) if isinstance(weights, list) else repr(weights)
        raise ConfigError(
            f"participation.weights must be a list of n_clients = {n_clients} numbers, got {shown}"
        )
    return participation.WeightedSample(weights, size)


#: Participation processes: kind -> the factory that builds one from the table's keys.
PROCESSES: dict[str, Callable[..., Any]] = {
    "full": participation.Full,
    "uniform_sample": participation.UniformSample,
    "weighted_sample": _weighted,
    "bernoulli": _bernoulli,
    "regularized": participation.Regularized,
    "periodic": participation.Periodic,
    "markov": participation.Markov,
}


def _random_edge(graph, weights=None, rate=None, mixing="pairwise", boyd=False):
    """One random edge of the ``[graphs]`` graph per tick: uniform, weighted (a list, one
    number per edge in sorted order), or ``boyd = true`` (Boyd et al.'s model: a node
    wakes at rate 1 and picks a neighbour)."""
    if boyd is True:
        if weights is not None:
            raise ConfigError("participation.weights: give weights or boyd = true, not both")
        return participation.RandomEdge.boyd(graph, rate=rate)
    if boyd is not False:
        raise ConfigError(f"participation.boyd must be true or false, got {boyd!r}")
    return participation.RandomEdge(graph, weights=weights, rate=rate, mixing=mixing)


def _poisson_clocks(n_clients, rates=1.0):
    """Each node's clock ticks at ``rates`` (one number, or one per node)."""
    return participation.PoissonClocks(rates, n_nodes=n_clients if _scalar(rates) else None)


def _one_peer_permutation(n_clients, mixing="pairwise"):
    """Each node receives from one peer, a uniformly random permutation per round."""
    return participation.OnePeerPermutation(n_clients, mixing=mixing)


def _scalar(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


#: Activation processes of decentralized methods (``[activation]``, or ``[participation]``
#: of a configuration of decentralized methods), beside every kind of :data:`PROCESSES`:
#: kind -> factory. Edge processes take the graph of ``[graphs]``' step 0.
ACTIVATIONS: dict[str, Callable[..., Any]] = {
    "poisson_clocks": _poisson_clocks,
    "random_edge": _random_edge,
    "random_matching": participation.RandomMatching,
    "one_peer_permutation": _one_peer_permutation,
}


# ----------------------------------------------------------------------------------- graphs
def _random_graphs(nodes, kind, p, seed, connected, static):
    sequence = mixing.RandomSequence(nodes, kind, p=p, seed=seed, connected=connected)
    return mixing.StaticSequence(sequence.graph(0), nodes) if static else sequence


def _one_peer_exponential(nodes):
    """Ying et al.'s one-peer exponential graph: time-varying, period ceil(log2 n)."""
    return mixing.OnePeerExponential(nodes)


def _directed_ring(nodes, shifts=(1,)):
    """Each node sends to ``i + shifts[k mod len]``: a directed ring by default."""
    return mixing.DirectedRingSequence(nodes, shifts)


def _erdos_renyi(nodes, p=None, seed=DEFAULT_SEED, connected=True, static=False):
    """A fresh undirected G(n, p) every step (the first one throughout if ``static``)."""
    return _random_graphs(nodes, "erdos_renyi", p, seed, connected, static)


def _random_directed(nodes, p=None, seed=DEFAULT_SEED, static=False):
    """A directed ring plus random directed edges, fresh every step (or ``static``)."""
    return _random_graphs(nodes, "random_directed", p, seed, True, static)


def _cycle(nodes):
    """The static undirected ring."""
    return mixing.StaticSequence(nx.cycle_graph(nodes), nodes)


def _complete(nodes):
    """The static complete graph."""
    return mixing.StaticSequence(nx.complete_graph(nodes), nodes)


#: Graph sequences of ``[graphs]``: kind -> the factory that builds one from the table's keys.
GRAPHS = {
    "one_peer_exponential": _one_peer_exponential,
    "directed_ring": _directed_ring,
    "erdos_renyi": _erdos_renyi,
    "random_directed": _random_directed,
    "cycle": _cycle,
    "complete": _complete,
}

#: The doubly stochastic rule of each graph kind (the default of the :data:`AVERAGING` kinds);
#: random directed graphs have none.
DOUBLY_STOCHASTIC_RULE = {
    "one_peer_exponential": "natural",
    "directed_ring": "natural",
    "erdos_renyi": "metropolis",
    "cycle": "metropolis",
    "complete": "metropolis",
}


#: The optional message-drop keys of ``[graphs]`` -> the argument of
#: :class:`~stochmix.mixing.MessageDrops` each one sets.
DROP_KEYS = {
    "drops": "probability",
    "drop_model": "model",
    "drop_p_good_to_bad": "p_good_to_bad",
    "drop_p_bad_to_good": "p_bad_to_good",
    "drop_in_good": "drop_in_good",
    "drop_in_bad": "drop_in_bad",
    "drop_symmetric": "symmetric",
    "drop_lost_weight": "lost_weight",
    "drop_seed": "seed",
}

"""Experiment configurations: a TOML file (or a dict) turned into problems, processes, graph
sequences and methods, with errors that name the key and the bad value.

A configuration::

    name = "focus-vs-fedavg"
    rounds = 500                 # >= 0 (0 records the starting point only)
    seeds = [0, 1, 2]            # or seed = 0; default [0]: the run seeds (participation)
    backend = "numpy"            # or "torch" (with device = "cuda" ...)
    compiled = "auto"            # numpy backend: true | false | "auto" (see stochmix.run)
    dtype = "float64"            # or "float32"
    metrics = ["distance", "objective", "gradient_norm", "consensus"]
    evaluate_every = "auto"      # or k: metrics that cost a pass over all clients every k rounds
    storage = "auto"             # or "full" | "compact": node rows nothing reads left out

    [problem]
    kind = "least_squares"       # quadratic | least_squares | logistic
    n_clients = 20
    dim = 10
    seed = 0                     # other keys go to the problem's random(...) generator
    regularizer = "l1"           # optional: f + r (l1 | elastic_net | group_lasso |
    reg_l1 = 0.1                 #   nonnegative | box; weights reg_l1, reg_l2,
                                 #   reg_weight, reg_groups, reg_low, reg_high)

    [participation]              # optional: full participation by default
    kind = "bernoulli"           # full | uniform_sample | weighted_sample | bernoulli |
    low = 0.1                    #   regularized | periodic | markov
    high = 0.9
    seed = 0                     # draws the p_i between low and high
    draws = "fast"               # uniform, bernoulli: or "legacy" (stochmix 0.1.0 streams)

    [[methods]]
    kind = "fedavg"              # see METHODS
    lr = 0.01                    # a list is a grid: every value runs, the best is reported
    local_steps = 5

    [[methods]]
    kind = "focus"
    lr = [1e-4, 3e-4, 1e-3]
    local_steps = 5

Decentralized methods (``dgd``, ``gradient_tracking``, ``push_pull``, ``push_sum``,
``extra``, ``nids``, ``exact_diffusion``, ``d2``, ``push_diging``, ``kgt``, ``choco``,
``led``, the variance-reduced ``gt_svrg``, ``gt_saga``, ``gt_sarah`` (finite sums), the
proximal ``pg_extra``, ``prox_nids``, the primal-dual ``admm``, ``dlm``, ``relaxed_admm``,
``lt_admm``, and the accelerated and optimal ``acc_dngd``, ``mudag``, ``dapg`` (composite),
``apapc``, ``opapc``, ``ssda``, ``msda``, and the asynchronous ``adpsgd``; ``form`` picks
a method's variant where it has several) mix over
the graph sequence of a ``[graphs]`` table. They run every node in every iteration by
default (participation ``full``); an ``[activation]`` table (``[participation]`` under
its name for them) activates part of the network: edge gossip (``random_edge``,
``random_matching``, ``one_peer_permutation``) keeps the mixing doubly
stochastic, node activation (``poisson_clocks`` or a kind of :data:`PROCESSES`) keeps pulls
row- and pushes column-stochastic only and is refused by the methods that need doubly
stochastic mixing (:data:`RULE_NEEDS`); the synchronous ``admm``, ``dlm`` and ``gt_*``
take ``full`` only, and ``adpsgd`` (one worker averaging with one neighbour per iteration)
``random_edge`` only::

    [graphs]
    kind = "erdos_renyi"         # one_peer_exponential | directed_ring | erdos_renyi |
                                 #   random_directed | cycle | complete (see GRAPHS)
    nodes = 16                   # default: problem.n_clients (must equal it)
    rule = "metropolis"          # optional: the weight rule of dgd / gradient_tracking /
                                 #   extra / nids / exact_diffusion / d2 / push_sum /
                                 #   push_diging (push_pull: row_rule, column_rule):
                                 #   natural | metropolis | row | column | fastest | fdla
                                 #   (mixing.RULES; fastest and fdla solve an SDP per
                                 #   distinct graph and need stochmix[analysis])
    p = 0.3                      # erdos_renyi and random_directed: edge probability,
    seed = 0                     #   the graphs' seed, static = true (one graph throughout)
    drops = 0.1                  # optional: message drops (stochmix.mixing.MessageDrops),
    drop_symmetric = true        #   a link's two directions together; drop_model =
    drop_seed = 0                #   "gilbert_elliott" takes drop_p_good_to_bad,
                                 #   drop_p_bad_to_good, drop_in_good, drop_in_bad instead
                                 #   of drops; drop_lost_weight = "receiver" | "sender"
    channel_noise = 0.01         # optional: N(0, 0.01^2) added to every message a
                                 #   method's mixing sends (algorithms.ChannelNoise)

By default dgd, gradient_tracking, extra, nids, exact_diffusion, d2, choco, kgt, led,
pg_extra, prox_nids, the variance-reduced and the accelerated methods (:data:`AVERAGING`)
take the graph's doubly stochastic weights
(:data:`DOUBLY_STOCHASTIC_RULE`), the others their own default rules; a rule whose matrices
are not what the method needs (:data:`RULE_NEEDS`) is refused.

Installed packages add methods, problems and participation processes under their own
kinds, through entry points (:mod:`stochmix.config.plugins`); a configuration names a kind,
never an import path.

**Every random choice has a seed, 0 by default** (:data:`DEFAULT_SEED`): the problem's
generator (``problem.seed``), heterogeneous Bernoulli probabilities
(``participation.seed``), random graph sequences (``graphs.seed``) and the participation
stream of each run (``seeds``; a periodic process without ``offset`` draws it from there).
:meth:`Experiment.resolved` writes the configuration back with every default and seed
filled in, and :func:`dumps` gives it as TOML that :func:`load` reads back to the same runs.
"""

from __future__ import annotations

from .experiment import Experiment, MethodSpec
from .parsing import DEFAULT_SEED, ConfigError
from .reader import default, default_table, load, parse
from .registry import (
    AVERAGING,
    DECENTRALIZED,
    DOUBLY_STOCHASTIC_RULE,
    DROP_KEYS,
    EVERY_CLIENT,
    FEDERATED,
    GRAPHS,
    METHODS,
    PROBLEMS,
    PROCESSES,
    RULE_NEEDS,
)
from .settings import TOP_LEVEL
from .writer import dumps

__all__ = [
    "AVERAGING",
    "DECENTRALIZED",
    "DEFAULT_SEED",
    "DOUBLY_STOCHASTIC_RULE",
    "DROP_KEYS",
    "EVERY_CLIENT",
    "FEDERATED",
    "GRAPHS",
    "METHODS",
    "PROBLEMS",
    "PROCESSES",
    "RULE_NEEDS",
    "TOP_LEVEL",
    "ConfigError",
    "Experiment",
    "MethodSpec",
    "default",
    "default_table",
    "dumps",
    "load",
    "parse",
]

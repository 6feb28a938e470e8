"""Small runs of every built-in method, replayed against trajectories recorded before the
engine's third generation (``trajectories.npz``, written by ``record.py``).

Each case is (name, method factory, participation factory, rounds). Problems are small
random quadratics (federated: N = 6 clients; decentralized: n = 6 peers), d = 3; every
federated case samples clients (empty rounds included), every decentralized case runs a
time-varying graph sequence. The recorded array of a case is its ``Result.server``
(rounds + 1, d) with, for decentralized methods, the consensus error as one more column
(the spread of the node models around the reported average).
"""

from __future__ import annotations

import numpy as np

from stochmix import algorithms as A
from stochmix.mixing import OnePeerExponential, RandomSequence
from stochmix.participation import Bernoulli, Full, UniformSample
from stochmix.problems import Quadratic

N = 6
DIM = 3
ROUNDS = 12


def problem():
    return Quadratic.random(N, DIM, seed=3)


def _lr(scale=0.3):
    return scale / problem().smoothness


def undirected():
    return RandomSequence(N, "erdos_renyi", seed=5)


def directed():
    return RandomSequence(N, "random_directed", seed=6)


def _federated(name, make, process=None):
    return (name, make, process or (lambda: Bernoulli(np.full(N, 0.4))), "federated")


def _decentralized(name, make):
    return (name, make, lambda: Full(N), "decentralized")


def cases():
    lr = _lr()
    fed = [
        _federated("FedAvg", lambda: A.FedAvg(lr, 3)),
        _federated("FedAvg-server-lr", lambda: A.FedAvg(lr, 2, server_lr=0.7)),
        _federated("FedAvg-uniform-sample", lambda: A.FedAvg(lr, 2), lambda: UniformSample(N, 2)),
        _federated(
            "AmplifiedFedAvg", lambda: A.AmplifiedFedAvg(lr, 2, amplification=1.5, period=3)
        ),
        _federated("FedAvgM", lambda: A.FedAvgM(lr, 2, beta=0.5)),
        _federated("FedAdam", lambda: A.FedAdam(lr, 2)),
        _federated("FedAdagrad", lambda: A.FedAdagrad(lr, 2)),
        _federated("FedYogi", lambda: A.FedYogi(lr, 2)),
        _federated("FedDyn", lambda: A.FedDyn(lr, 2, alpha=0.1)),
        _federated("FedProx", lambda: A.FedProx(lr, mu=0.1, local_steps=2)),
        _federated("FOCUS", lambda: A.FOCUS(lr / N, 2)),
        _federated("MIFA", lambda: A.MIFA(lr, 2)),
        _federated("SCAFFOLD", lambda: A.SCAFFOLD(lr, 2)),
        _federated("FedStale", lambda: A.FedStale(lr, 2, beta=0.5)),
        _federated("FedVARP", lambda: A.FedVARP(lr, 2)),
        _federated("Scaffnew", lambda: A.Scaffnew(lr, p=0.4, seed=1), lambda: Full(N)),
    ]
    dec = [
        _decentralized("DGD-atc", lambda: A.DGD(lr, undirected())),
        _decentralized("DGD-cta", lambda: A.DGD(lr, undirected(), form="cta")),
        _decentralized("DGD-decay", lambda: A.DGD(lr, undirected(), decay=0.5)),
        _decentralized("DGD-periodic", lambda: A.DGD(lr, OnePeerExponential(N), rule="natural")),
        _decentralized("GradientTracking-cta", lambda: A.GradientTracking(lr, undirected())),
        _decentralized(
            "GradientTracking-atc", lambda: A.GradientTracking(lr, undirected(), form="atc")
        ),
        _decentralized(
            "GradientTracking-periodic",
            lambda: A.GradientTracking(lr, OnePeerExponential(N), rule="natural"),
        ),
        _decentralized("PushPull-atc", lambda: A.PushPull(lr, directed())),
        _decentralized("PushPull-ab", lambda: A.PushPull(lr, directed(), form="ab")),
        _decentralized("PushSum", lambda: A.PushSum(lr, directed())),
        _decentralized("EXTRA", lambda: A.EXTRA(lr, undirected())),
        _decentralized("NIDS", lambda: A.NIDS(lr, undirected())),
        _decentralized("ExactDiffusion", lambda: A.ExactDiffusion(lr, undirected())),
        _decentralized("D2", lambda: A.D2(lr, undirected())),
        _decentralized("PushDIGing", lambda: A.PushDIGing(lr, directed())),
        _decentralized("ADD-OPT", lambda: A.PushDIGing(lr, directed(), form="add-opt")),
        _decentralized("CHOCO", lambda: A.CHOCO(lr, undirected(), gamma=0.3)),
        _decentralized(
            "ChannelNoise", lambda: A.ChannelNoise(A.GradientTracking(lr, undirected()), 0.01)
        ),
        _decentralized("KGT", lambda: A.KGT(lr, undirected(), local_steps=2)),
    ]
    return fed + dec


def trajectory(case, **run_options) -> np.ndarray:
    """The case's recorded array (see the module docstring)."""
    from stochmix import run

    name, make, process, kind = case
    method = make()
    metrics = ("consensus",) if kind == "decentralized" else ()
    result = run(method, problem(), process(), ROUNDS, seed=7, metrics=metrics, **run_options)
    columns = [np.asarray(result.server, dtype=np.float64)]
    if kind == "decentralized":
        columns.append(np.asarray(result.consensus, dtype=np.float64)[:, None])
    return np.column_stack(columns)

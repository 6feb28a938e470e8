"""Optimal decentralized methods: sqrt(kappa) against the lower bounds
====================================================================

How many gradient steps and communication rounds do decentralized methods need, as the
problem gets ill-conditioned and the graph gets slower to mix?

Scaman, Bach, Bubeck, Lee & Massoulié (ICML 2017, Theorem 2) prove that for L-smooth,
mu-strongly convex local functions (kappa = L / mu) and a gossip matrix with eigengap
gamma, every black-box method needs on the order of ``sqrt(kappa) log(1/eps)`` gradient
steps and ``sqrt(kappa / gamma) log(1/eps)`` communication rounds. Gradient tracking and
EXTRA need about ``kappa log(1/eps)`` iterations (Acc-DNGD, gradient tracking with
Nesterov momentum, proves kappa^(5/7) at its own tuning: its test shows it); the optimal
methods reach the bounds:
SSDA and MSDA (Scaman et al.), OPAPC (Kovalev, Salim & Richtárik 2020), Mudag (Ye, Luo,
Zhou & Zhang 2023), each in the library with a per-node reference and its paper's claim
as a test.

The problems are quadratics whose every local Hessian is ``diag(logspace(1, kappa))``
(so the local condition number is exactly kappa) with different centers, on a ring: one
sweep of kappa at a fixed ring, one sweep of ring sizes (gamma falls like 1/n^2) at a
fixed kappa. A run has reached the target when the nodes' root-mean-square distance to
x* is 1e-8 of its start. The left panel draws iterations (gradient steps) against kappa
with the gradient-step lower bound; the right one communication rounds (messages over
the ring's 2n directed edges) against 1/sqrt(gamma) with the communication lower bound,
both in log-log axes: a slope of 1/2 against kappa is sqrt(kappa). The theorem's bounds
carry small constants (1/16 of sqrt(kappa) ln(1/eps) gradient steps, and nothing for
kappa <= 256), so their orders with constant 1, sqrt(kappa) ln(1/eps) and
sqrt(kappa / gamma) ln(1/eps), are drawn too (dotted): the optimal methods run parallel to
them, gradient tracking and EXTRA steeper.

Run: python examples/optimal_methods.py  (writes optimal_methods.png; ``--quick``: fewer
and smaller settings, as the tests and the docs build run it)
"""

import sys
import warnings

import networkx as nx
import numpy as np

import stochmix as sm
from stochmix.analysis import communication_rounds_lower_bound, gradient_steps_lower_bound
from stochmix.mixing import StaticSequence
from stochmix.participation import Full
from stochmix.problems import Quadratic

#: Full size, and the ``--quick`` size the tests and the docs build run.
FULL = {"kappas": (10.0, 100.0, 1000.0), "sizes": (8, 16, 32), "n": 8, "kappa": 100.0}
QUICK = {"kappas": (10.0, 20.0), "sizes": (6, 10), "n": 6, "kappa": 10.0}
TOLERANCE = 1e-8


def hard_quadratic(n, kappa, d=4, seed=0):
    """Local Hessians diag(logspace(1, kappa)) (local condition number kappa), centers
    drawn at random: the nodes must agree on x*."""
    rng = np.random.default_rng(seed)
    return Quadratic(rng.normal(size=(n, d)), np.tile(np.logspace(0, np.log10(kappa), d), (n, 1)))


def methods(ring, problem):
    """The methods compared, each at its paper's tuning (the baselines at a safe step)."""
    from stochmix import algorithms as A

    L, mu = problem.smoothness, problem.strong_convexity
    w = ring.matrix(0, "metropolis").toarray()
    lambda2 = np.sort(np.linalg.eigvalsh(w))[-2]
    rounds = A.Mudag.paper_rounds(lambda2, L / mu)
    return {
        "gradient tracking": A.GradientTracking(0.2 / L, ring),
        "EXTRA": A.EXTRA(0.3 / L, ring),
        "Mudag": A.Mudag(1.0 / L, ring, mix_rounds=rounds, mu=mu),
        "SSDA": A.SSDA(None, ring),
        "MSDA": A.MSDA(None, ring),
        "APAPC": A.APAPC(None, ring),
        "OPAPC": A.OPAPC(None, ring),
    }


def to_target(method, problem, rounds):
    """(iterations, communication rounds) to TOLERANCE, or (nan, nan) within ``rounds``.
    Communication rounds: messages divided by those of one round over every edge."""
    n = problem.n_clients
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = sm.run(method, problem, Full(n), rounds, progress=False)
    error = np.sqrt(result.distance**2 + result.consensus) / result.distance[0]
    hit = np.flatnonzero(error <= TOLERANCE)
    if not hit.size:
        return np.nan, np.nan
    k = int(hit[0])
    return k, float(result.messages[: k + 1].sum()) / (2 * n)


def eigengap(n):
    """gamma = lambda_min^+(I - W) / lambda_max(I - W) of the ring's Metropolis W."""
    w = StaticSequence(nx.cycle_graph(n)).matrix(0, "metropolis").toarray()
    values = np.sort(np.linalg.eigvalsh(np.eye(n) - w))
    return values[1] / values[-1]


def main(kappas, sizes, n, kappa, out="optimal_methods.png"):
    """Both sweeps; returns {(sweep, value, method): (iterations, communication rounds)}
    and draws them with the lower bounds."""
    found = {}
    ring = StaticSequence(nx.cycle_graph(n))
    for k in kappas:
        problem = hard_quadratic(n, k)
        for name, method in methods(ring, problem).items():
            found["kappa", k, name] = to_target(method, problem, int(120 * k + 400))
    for size in sizes:
        problem = hard_quadratic(size, kappa)
        graph = StaticSequence(nx.cycle_graph(size))
        for name, method in methods(graph, problem).items():
            found["ring", size, name] = to_target(method, problem, int(20 * kappa * size + 400))
    for key, (steps, rounds) in sorted(found.items(), key=str):
        print(f"{key[0]:>5} {key[1]:>8g} {key[2]:<18} iterations {steps:>7} "
              f"communication rounds {rounds:>9.0f}")  # fmt: skip
    _draw(found, kappas, sizes, n, kappa, out)
    return found


def _draw(found, kappas, sizes, n, kappa, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted({key[2] for key in found})
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name in names:
        left.plot(kappas, [found["kappa", k, name][0] for k in kappas], "o-", label=name)
        right.plot([1 / np.sqrt(eigengap(s)) for s in sizes],
                   [found["ring", s, name][1] for s in sizes], "o-", label=name)  # fmt: skip
    # the bounds are on the objective gap over (mu / 2) ||x0 - x*||^2, which a distance
    # TOLERANCE of the start keeps below kappa TOLERANCE^2 (the gap is <= L/2 distance^2)
    root = np.array([1 / np.sqrt(eigengap(s)) for s in sizes])
    # the theorem's bound (zero for kappa <= 256: it says nothing there) and its order
    # with constant 1, sqrt(kappa) ln(1/eps) and sqrt(kappa / gamma) ln(1/eps)
    bound = [gradient_steps_lower_bound(k, k * TOLERANCE**2) for k in kappas]
    left.plot(kappas, np.where(np.array(bound) > 0, bound, np.nan), "k--",
              label="lower bound (Scaman et al. 2017, Thm 2)")  # fmt: skip
    left.plot(kappas, np.sqrt(kappas) * np.log(1 / TOLERANCE), "k:",
              label="sqrt(kappa) ln(1/eps)")  # fmt: skip
    eps = kappa * TOLERANCE**2
    bound = [communication_rounds_lower_bound(kappa, eigengap(s), eps) for s in sizes]
    right.plot(root, np.where(np.array(bound) > 0, bound, np.nan), "k--", label="lower bound")
    right.plot(root, np.sqrt(kappa) * root * np.log(1 / TOLERANCE), "k:",
               label="sqrt(kappa / gamma) ln(1/eps)")  # fmt: skip
    left.set(xscale="log", yscale="log", xlabel="kappa", ylabel="iterations to 1e-8",
             title=f"ring of {n}")  # fmt: skip
    right.set(xscale="log", yscale="log", xlabel="1 / sqrt(gamma) (rings of growing size)",
              ylabel="communication rounds to 1e-8", title=f"kappa = {kappa:g}")  # fmt: skip
    left.legend(fontsize=7)
    right.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


if __name__ == "__main__":
    main(**(QUICK if "--quick" in sys.argv else FULL))

"""Certified rates: certify, tune, and meet the worst case
=======================================================

Certified rates: certify, tune, and meet the worst case.

A rate that holds for every objective of a class, not one instance. For the class of
objectives whose parts are L-smooth and mu-strongly convex (kappa = L / mu = 10) and every
sequence of mixing matrices with ``||W_k - 11^T/n|| <= sigma``,
:func:`~stochmix.analysis.certify` proves a worst-case rate with a semidefinite program
built from the method's own phases, and :func:`~stochmix.analysis.tune` finds the step
that minimises it.

Left: the tuned certified rate of EXTRA, NIDS, gradient tracking (DIGing) and exact
diffusion against sigma (NIDS and exact diffusion coincide; a missing point: nothing is
certified at any step, their corrections assume one W while the class varies it). Right:
NIDS at its tuned step for sigma = 0.5; a search over the class finds its slowest
quadratic and mixing matrix (:func:`~stochmix.analysis.worst_quadratic`),
:func:`stochmix.run` runs it, and the measured error stays under the certificate's
envelope ``C rho^k`` (``C`` from the Lyapunov matrix's condition number).

Needs ``pip install "stochmix[analysis]"`` (cvxpy). Run: python
examples/certified_rates.py  (writes certified_rates.png; ``--quick``: a coarser sigma grid)
"""

import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import networkx as nx  # noqa: E402
import numpy as np  # noqa: E402

import stochmix as sm  # noqa: E402
from stochmix.algorithms import EXTRA, NIDS, ExactDiffusion, GradientTracking  # noqa: E402
from stochmix.analysis import certify, tune, worst_quadratic  # noqa: E402
from stochmix.mixing import StaticSequence  # noqa: E402
from stochmix.participation import Full  # noqa: E402

L, MU = 1.0, 0.1
#: Full size, and the ``--quick`` size the tests and the docs build run.
FULL = {"sigmas": tuple(np.round(np.linspace(0.05, 0.95, 10), 2)), "grid": 12, "trials": 100}
QUICK = {"sigmas": (0.3, 0.7), "grid": 6, "trials": 20}


def methods(graphs):
    """The four decentralized methods, at a placeholder step (tuned below)."""
    return {
        "EXTRA": EXTRA(0.1, graphs),
        "NIDS": NIDS(0.1, graphs),
        "gradient tracking": GradientTracking(0.1, graphs),
        "exact diffusion": ExactDiffusion(0.1, graphs),
    }


def main(sigmas=FULL["sigmas"], grid=FULL["grid"], trials=FULL["trials"],
         out="certified_rates.png"):  # fmt: skip
    """Tune every method at every sigma, then meet NIDS's certificate with its worst case;
    returns ``{"tuned": {name: [rate per sigma]}, "nids": (certified, measured)}``."""
    graphs = StaticSequence(nx.cycle_graph(6))  # any graph: the sigma-class does not read it
    tuned = {name: [] for name in methods(graphs)}
    for sigma in sigmas:
        for name, method in methods(graphs).items():
            best = tune(method, L=L, mu=MU, mixing=sigma, grid=grid)
            tuned[name].append(best.rate if best.certificate.certified else np.nan)
    print("tuned certified rate per iteration (L = 1, mu = 0.1)")
    print("sigma  " + "  ".join(f"{name:>17}" for name in tuned))
    for i, sigma in enumerate(sigmas):
        print(f"{sigma:5.2f}  " + "  ".join(f"{tuned[name][i]:17.6f}" for name in tuned))

    print(certify(NIDS(0.5, graphs), L=L, mu=MU, mixing=0.5))  # one step, certified
    best = tune(NIDS(0.1, graphs), L=L, mu=MU, mixing=0.5, grid=grid)
    certificate = best.certificate
    worst = worst_quadratic(NIDS(best.value, graphs), L=L, mu=MU, mixing=0.5, trials=trials)
    nodes = worst.problem.n_clients
    rounds = int(np.log(1e-11) / np.log(certificate.rate))  # the certificate's 1e-11
    result = sm.run(worst.method, worst.problem, Full(nodes), rounds, x0=np.ones(1),
                    metrics=("distance",), progress=False)  # fmt: skip
    error = np.asarray(result.distance) / result.distance[0]
    fit = np.flatnonzero(error > 1e-11)  # the measured rate: above rounding
    fit = fit[fit >= fit.size // 2]
    measured = float(np.exp(np.polyfit(fit, np.log(error[fit]), 1)[0]))
    p = certificate.lyapunov
    spread = max(float(np.sqrt(np.linalg.cond(m))) for m in p)
    print(
        f"NIDS, sigma = 0.5: tuned step {best.value:.4f}, certified rate {certificate.rate:.6f}; "
        f"slowest quadratic found: exact rate {worst.rate:.6f}, measured in a run {measured:.6f}"
    )

    fig, (left, right) = plt.subplots(1, 2, figsize=(9.5, 3.8))
    styles = {"EXTRA": "o-", "NIDS": "s--", "gradient tracking": "^-", "exact diffusion": "x:"}
    for name, rates in tuned.items():
        left.plot(sigmas, rates, styles[name], label=name, markersize=7 if name == "NIDS" else 5)
    left.set_xlabel("sigma = max ||W_k - 11^T/n||")
    left.set_ylabel("tuned certified rate")
    left.set_title("kappa = 10, every W_k of the class")
    left.legend(fontsize=8)
    k = np.arange(rounds + 1)
    right.semilogy(k, error[: rounds + 1], label="NIDS on the slowest quadratic found")
    right.semilogy(k, np.minimum(1.0, spread * certificate.rate**k), "--",
                   label=f"certificate C rho^k, rho = {certificate.rate:.4f}")  # fmt: skip
    right.set_xlabel("iteration")
    right.set_ylabel("distance / initial")
    right.set_title("sigma = 0.5, tuned step")
    right.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(f"wrote {out}")
    return {"tuned": tuned, "nids": (certificate.rate, measured, worst.rate)}


if __name__ == "__main__":
    main(**(QUICK if "--quick" in sys.argv else FULL))

"""A new method from scratch: FedProx
==================================

Write a new method from scratch as blocks + phases, run it, compare it with built-ins.

The method is FedProx (Li et al. 2020): FedAvg whose local steps add a proximal pull
mu (x_i - x_0) towards the server model. In matrix form, one round with participants S::

    x   <- A_S x                                              (pull)
    x_i <- (1 - gamma mu) x_i + gamma mu x_0 - gamma grad F_i(x_i),  i in S   (K times)
    x_0 <- (1/|S|) sum_{i in S} x_i                           (average)

Every line is a phase `Z <- M Z + B G` that touches only the rows of S and the server.
Run: python examples/custom_algorithm.py
"""

import numpy as np

import stochmix as sm
from stochmix.mixing import assign_rows, average_rows


class FedProx(sm.Method):
    """FedAvg with a proximal term mu/2 ||x - x_0||^2 in every local objective."""

    name = "FedProx"

    def __init__(self, lr, local_steps, mu):
        self.lr, self.local_steps, self.mu = lr, local_steps, mu

    def blocks(self, n_clients):
        return [sm.Block("x", n_clients + 1, init="model")]  # row 0 server, row i+1 client i

    def round_phases(self, r, participants, ctx):
        if participants.size == 0:
            return []  # nobody came: the server keeps its model
        nodes, n, lr = participants + 1, ctx.n_clients, self.lr
        pull = ctx.phase("pull").apply("x", "x", assign_rows(participants, n))
        local = (
            ctx.phase("proximal local step")
            .keep("x", nodes, 1.0 - lr * self.mu)  # (1 - gamma mu) x_i
            .combine("x", nodes, "x", 0, lr * self.mu)  # + gamma mu x_0
            .gradient("x", nodes, participants, -lr)  # - gamma grad F_i(x_i)
        )
        q = np.full(participants.size, 1.0 / participants.size)
        average = ctx.phase("average").apply("x", "x", average_rows(participants, q, n))
        return [pull.build(), *[local.build()] * self.local_steps, average.build()]


def main(rounds: int = 400, seed: int = 0) -> dict:
    n = 20
    problem = sm.problems.LeastSquares.random(
        n, 10, rows_per_client=20, heterogeneity=2.0, seed=seed
    )
    participation = sm.participation.Bernoulli.heterogeneous(n, 0.1, 0.9, seed=seed)
    lr = 0.5 / problem.smoothness
    methods = [
        FedProx(lr, local_steps=5, mu=1.0 * problem.smoothness),
        sm.algorithms.FedAvg(lr, local_steps=5),
        sm.algorithms.FOCUS(lr / n, local_steps=5),
    ]
    finals = {}
    print(f"{'method':>8}  {'final rel. error':>16}  {'linear rate':>11}")
    for method in methods:
        result = sm.run(method, problem, participation, rounds, seed=seed)
        finals[method.name] = float(result.relative_error[-1])
        print(f"{method.name:>8}  {finals[method.name]:16.2e}  {result.rate():11.4f}")
    return finals


if __name__ == "__main__":
    main()

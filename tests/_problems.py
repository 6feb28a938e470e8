"""Problems the tests share."""

import numpy as np

from stochmix.problems.base import Problem


class Flat(Problem):
    """n clients whose gradients vanish: decentralized methods then only mix (gossip)."""

    def __init__(self, n, d):
        super().__init__(n, d, data={"zero": np.zeros((n, 1))})

    def gradient_formula(self, xp, data, idx, x):
        return 0.0 * x

    def objective(self, x):
        return 0.0

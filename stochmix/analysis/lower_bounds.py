r"""Lower bounds for decentralized smooth strongly convex optimization over gossip (Theorem 2
of Scaman, Bach, Bubeck, Lee and Massoulié 2017).

The statement. Let alpha, beta > 0, kappa_l = beta / alpha and gamma in (0, 1]. There exist
a gossip matrix G of eigengap gamma(G) = lambda_{n-1}(G) / lambda_1(G) = gamma and
alpha-strongly convex, beta-smooth local functions f_i such that, for any t >= 0 and any
black-box procedure using G in which a local gradient step takes time 1 and a
communication round (one multiplication by G) time tau, every node i has

.. math::

    \bar f(\theta_{i,t}) - \bar f(\theta^\star) \ge \frac{3\alpha}{2}
    \Big(1 - \frac{16}{\sqrt{\kappa_l}}\Big)^{1 + \frac{t}{1 + \tau / (5\sqrt\gamma)}}
    \lVert\theta_{i,0} - \theta^\star\rVert^2,

f-bar the average of the f_i. Hence the time to reach precision epsilon is
Omega(sqrt(kappa_l) (1 + tau / sqrt(gamma)) ln(1/epsilon)), which MSDA
(:class:`~stochmix.algorithms.dual_accelerated.MSDA`) attains.

Here precision is measured relative to the start, ``eps`` = (f-bar(theta_{i,t}) -
f-bar(theta*)) / ((alpha / 2) ||theta_{i,0} - theta*||^2), so the bound reads 3 q^{1 + t /
c} <= eps with q = 1 - 16 / sqrt(kappa_l) and c = 1 + tau / (5 sqrt(gamma)), that is

.. math::

    t \ge T(\kappa_l, \gamma, \varepsilon, \tau) = \Big(1 + \frac{\tau}{5\sqrt\gamma}\Big)
    \, N(\kappa_l, \varepsilon),\qquad
    N(\kappa_l, \varepsilon) = \max\Big(0,\ \frac{\ln(3/\varepsilon)}{\ln(1/q)} - 1\Big).

A procedure that takes G gradient steps and C communication rounds one after another runs
for time G + C tau, and the bound holds for every tau: tau = 0 gives G >= N
(:func:`gradient_steps_lower_bound`) and tau -> infinity gives C >= N / (5 sqrt(gamma))
(:func:`communication_rounds_lower_bound`). The theorem says nothing for kappa_l <= 256
(q <= 0): the functions then return 0. Bounds are real numbers (an integer count is at
least their ceiling).

Using them. The gossip matrix of a library method that mixes with a symmetric doubly
stochastic W is G = I - W (:mod:`~stochmix.algorithms.dual_accelerated`), so gamma =
(1 - lambda_2(W)) / (1 - lambda_min(W)), the ratio of the two values that
:func:`~stochmix.algorithms.dual_accelerated.gossip_spectrum` returns (0.1464 for a ring of
8 nodes under Metropolis weights). A run measured by its distance to x* reaches precision
``eps = kappa r^2`` once that distance is r times its start (f-bar - f-bar* <= (beta / 2)
||theta - theta*||^2). The bounds are worst cases over the class: the hard instance lives
in l2 (infinite dimension); on one given finite problem a method may need fewer steps.
The order, the role of tau (a communication round costs tau, a gradient step 1) and gamma
(the normalised eigengap of the gossip matrix) are those of the paper's abstract
(O(sqrt(kappa_l) (1 + tau / sqrt(gamma)) ln(1/epsilon)) for MSDA, optimal).

Provenance. Only the paper's abstract could be read against this module (issue 43: the
stored copies of the paper and of its LaTeX source give the abstract alone, and no public
code or notes restating Theorem 2 were found): the order above, the roles of tau and
gamma and the eps dependence ln(1/eps) are checked; the constants 3 alpha / 2, 16 and 5
are the statement of Theorem 2 as recalled, not checked against the full text. The
functions' numbers depend on them (``RATE``, ``PREFACTOR``, ``SPREAD`` below).

References:
    - K. Scaman, F. Bach, S. Bubeck, Y. T. Lee and L. Massoulié, "Optimal algorithms for
      smooth and strongly convex distributed optimization in networks", ICML 2017
      (arXiv:1702.08704), Section 5, Theorem 2 and Corollary 2.
"""

from __future__ import annotations

import math

from .._validate import as_float

__all__ = [
    "communication_rounds_lower_bound",
    "decentralized_time_lower_bound",
    "gradient_steps_lower_bound",
]

#: the constants of Theorem 2: q = 1 - RATE / sqrt(kappa_l), the prefactor 3 alpha / 2
#: (3 in units of alpha / 2), and the 5 of tau / (5 sqrt(gamma))
RATE, PREFACTOR, SPREAD = 16.0, 3.0, 5.0


def _checked(kappa, eps) -> tuple[float, float]:
    kappa = as_float(kappa, "kappa")
    if not kappa >= 1.0:
        raise ValueError(f"kappa must be >= 1 (beta / alpha), got {kappa!r}")
    eps = as_float(eps, "eps", positive=True)
    return kappa, eps


def _gap(gamma) -> float:
    gamma = as_float(gamma, "gamma", positive=True)
    if gamma > 1.0:
        raise ValueError(f"gamma must be in (0, 1] (an eigengap ratio), got {gamma!r}")
    return gamma


def _steps(kappa: float, eps: float) -> float:
    """N(kappa, eps) of the module docstring."""
    q = 1.0 - RATE / math.sqrt(kappa)
    if q <= 0.0:
        return 0.0
    return max(0.0, math.log(PREFACTOR / eps) / -math.log(q) - 1.0)


def gradient_steps_lower_bound(kappa, eps) -> float:
    """The number of (sequential) local gradient steps below which no black-box procedure
    reaches precision ``eps`` on the hard instance of Theorem 2 (Scaman et al. 2017):
    N(kappa, eps) = max(0, ln(3 / eps) / ln(1 / (1 - 16 / sqrt(kappa))) - 1), the time
    bound with free communication (tau = 0). See the module docstring for the statement
    and the precision ``eps`` (relative to (alpha / 2) ||theta_0 - theta*||^2).

    Args:
        kappa: the local condition number kappa_l = beta / alpha >= 1 (0 is returned
            for kappa <= 256, where the theorem says nothing).
        eps: the precision, > 0.

    Returns:
        float: N >= 0.
    """
    kappa, eps = _checked(kappa, eps)
    return _steps(kappa, eps)


def communication_rounds_lower_bound(kappa, gamma, eps) -> float:
    """The number of (sequential) communication rounds, multiplications by the gossip
    matrix, below which no black-box procedure reaches precision ``eps`` on the hard
    instance of Theorem 2 (Scaman et al. 2017): N(kappa, eps) / (5 sqrt(gamma)), the time
    bound divided by tau as tau -> infinity. See the module docstring.

    Args:
        kappa: the local condition number kappa_l >= 1.
        gamma: the eigengap lambda_{n-1}(G) / lambda_1(G) of the gossip matrix, in (0, 1].
        eps: the precision, > 0.

    Returns:
        float: >= 0.
    """
    kappa, eps = _checked(kappa, eps)
    gamma = _gap(gamma)
    return _steps(kappa, eps) / (SPREAD * math.sqrt(gamma))


def decentralized_time_lower_bound(kappa, gamma, eps, tau=1.0) -> float:
    """The time T = (1 + tau / (5 sqrt(gamma))) N(kappa, eps) below which no black-box
    procedure reaches precision ``eps`` on the hard instance of Theorem 2 (Scaman et al.
    2017), a gradient step taking time 1 and a communication round time ``tau``. See the
    module docstring.

    Args:
        kappa: the local condition number kappa_l >= 1.
        gamma: the eigengap of the gossip matrix, in (0, 1].
        eps: the precision, > 0.
        tau: the time of a communication round, >= 0.

    Returns:
        float: T >= 0.
    """
    kappa, eps = _checked(kappa, eps)
    gamma = _gap(gamma)
    tau = as_float(tau, "tau", nonnegative=True)
    return (1.0 + tau / (SPREAD * math.sqrt(gamma))) * _steps(kappa, eps)

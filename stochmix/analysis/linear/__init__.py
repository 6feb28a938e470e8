"""Exact affine maps of the canonical recursion on problems whose gradients are affine.

When every client gradient is affine, ``grad F_i(x) = H_i x - c_i`` (:class:`Quadratic`:
``c_i = H_i z_i``; :class:`LeastSquares`: ``H_i = A_i^T A_i + reg I``, ``c_i = A_i^T b_i``),
every phase ``Z <- M Z + B G(X)`` of a method is an affine map of the state. With the
row-vector convention and ``Z`` (m, d) vectorised row-major, ``vec(Z)[i d + k] = Z[i, k]``:

    vec(Z+) = T vec(Z) + t,
    T = M (x) I_d + (B (x) I_d) blockdiag(H_c) (S (x) I_d),       t = -(B (x) I_d) vec(c),

where ``S`` selects, for each client ``c`` the phase asks about, the model row
``client_node + c`` of ``model_block`` (the engine's default gradient points), and
``blockdiag(H_c)`` holds the Hessians of those clients only. Everything is a SciPy sparse
matrix; a round (or a whole periodic pattern of rounds) is the composition of its phases.

What the maps give exactly:

* :func:`round_operator` and :func:`pattern_operator`: the map of one round / of one period
  of a participation pattern; they reproduce :func:`stochmix.run` to rounding.
* :func:`fixed_point_under_pattern`: where a method ends under a periodic pattern (FedAvg's
  biased end point, FOCUS's exact ``x_star``).
* :func:`periodic_rate`: the exact asymptotic rate under a periodic pattern.
* :func:`lyapunov_rate`: the almost-sure rate under a random participation process (top
  Lyapunov exponent of the random product of the rounds' linear parts), with a
  :class:`NoCommonFixedPointWarning` when the rounds share no fixed point (FedAvg: the rate
  is then that of differences between runs, not of convergence).

**Fixed directions.** Many methods conserve something: FOCUS and gradient tracking keep
``sum(y) - sum(g)`` (the tracking invariant) in every round, and a row no phase of a pattern
touches (a client that never participates) keeps its value. Each such quantity is an
eigenvalue 1 of ``T`` whatever the step size, so ``I - T`` is singular and the spectral radius
of ``T`` is 1 although the method converges. The error the method actually makes never has a
component there: it starts with the conserved quantities at their final value. So the
functions here (a) pick the fixed point on the slice of the starting state (``start=`` of
:meth:`AffineMap.fixed_point`), (b) measure rates on the complement of the fixed directions
(``exclude_unit=True``), and (c) run the Lyapunov recursion from errors the method can make
(``start="initial"``) with the conserved combinations projected out, since rounding would
otherwise excite them (:func:`conserved_quantities`); see each function.

**Modules.** :mod:`.gradients` (the affine gradients of a problem), :mod:`.maps` (the
:class:`AffineMap`, its fixed points and spectrum), :mod:`.operators` (the maps of phases,
rounds and patterns), :mod:`.periodic` (fixed points and rates under periodic patterns),
:mod:`.conserved` (conserved quantities), :mod:`.lyapunov` (rates under random
participation; its rounds built once, by templates where the method has them, in
:mod:`._rounds`). Every name is imported from here; the settings (``DENSE_LIMIT``,
``RANK_RTOL``, ``UNIT_ATOL``, ``CONSERVED_LIMIT``, ``CONSERVED_RTOL``,
``FIXED_POINT_RTOL``) set here are set where they are read (:mod:`stochmix.mixing._facade`).
"""

from __future__ import annotations

from ...mixing import _facade
from . import conserved, lyapunov, maps
from .conserved import CONSERVED_RTOL, conserved_quantities
from .gradients import AffineGradients, affine_gradients
from .lyapunov import (
    CONSERVED_LIMIT,
    FIXED_POINT_RTOL,
    LyapunovRate,
    NoCommonFixedPointWarning,
    lyapunov_rate,
)
from .maps import DENSE_LIMIT, RANK_RTOL, UNIT_ATOL, AffineMap, SingularMapError
from .operators import pattern_operator, phase_operator, round_operator, run_context
from .periodic import FixedPoint, PeriodicRate, fixed_point_under_pattern, periodic_rate

_facade.forward_settings(
    __name__,
    {
        "DENSE_LIMIT": maps,
        "RANK_RTOL": maps,
        "UNIT_ATOL": maps,
        "CONSERVED_RTOL": conserved,
        "CONSERVED_LIMIT": lyapunov,
        "FIXED_POINT_RTOL": lyapunov,
    },
)

__all__ = [
    "CONSERVED_LIMIT",
    "CONSERVED_RTOL",
    "DENSE_LIMIT",
    "FIXED_POINT_RTOL",
    "RANK_RTOL",
    "UNIT_ATOL",
    "AffineGradients",
    "AffineMap",
    "FixedPoint",
    "LyapunovRate",
    "NoCommonFixedPointWarning",
    "PeriodicRate",
    "SingularMapError",
    "affine_gradients",
    "conserved_quantities",
    "fixed_point_under_pattern",
    "lyapunov_rate",
    "pattern_operator",
    "periodic_rate",
    "phase_operator",
    "round_operator",
    "run_context",
]

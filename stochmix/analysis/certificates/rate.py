"""The search for the smallest certified rate: a bracketed root search on the SDP's optimum
below the rate, where the SDP gives that optimum, else bisection.

At rate rho the certificate's SDP (:mod:`~stochmix.analysis.certificates.lmi`) minimises
t subject to ``LMI(P, lambda, rho) <= t I``, ``P >= I``, ``lambda >= 0``, ``t >= -1``. Its
optimum ``t*(rho)`` does not increase with rho (the LMI's term ``-rho^2 F^T P F`` only
falls as rho grows, P > 0), is positive below the smallest certified rate ``rho*`` and
falls to 0 there; above it, the LMI being homogeneous in ``(P, lambda)``, it is the floor
-1, which says nothing of the distance to ``rho*``. So the search keeps a bracket
``[lo, hi]`` (lo: no certificate found; hi: a certificate found, checked on the full LMI)
and takes its next rate from the values below ``rho*``: each solve there gives ``t*`` and
``dt*/drho`` (the envelope theorem, from the primal iterate), and the next estimate of
``rho*`` is the root of the quadratic with the newest value and derivative and the
change of the derivative from the one before (Newton's step with one value). While the
estimate's correction (quadratic against Newton) is large, the next rate sits below the
estimate by twice that (another value, closer); once it is under the tolerance, the rates
``estimate + 1.2, + 0.4, - 0.4 tol (1 - lo)`` close the bracket, from above (a certified
solve stops at its first accepted iterate: a few steps warm; one near rho* that certifies
nothing runs until it stalls). A rate outside the bracket, or
no value, falls back to bisection. Stops as :func:`~stochmix.analysis.certificates.lmi.bisect_rate`
does, at ``hi - lo <= tol (1 - lo)``; every rate returned is one a verified solve
certifies. The solves start warm from the previous one's central path
(:meth:`~stochmix.analysis.certificates.structured.StructuredFeasibility.probe`): within
a few tolerances of rho* a warm solve can miss a certificate a cold one finds, so the rate
can exceed bisection's by a few tolerances (at most 3e-8 per period on the tests' small
instances at ``tol = 1e-7``), never fall below it by more than one.

On EXTRA over a ring then a star (a round without a shift symmetry), where the slowest
instance's rate is 1.5e-3 under the certified one, bisection takes 28 solves and this
search 5 or 6.
"""

from __future__ import annotations

import math

from .lmi import Candidates, Solution, bisect_rate

__all__ = ["find_rate"]


#: Newton steps at most for the solves that close the bracket once a certificate stands
#: within two tolerances above the estimated rate: a warm solve there that finds no
#: certificate otherwise runs until it stalls (about 20 steps, 8 s of EXTRA's 30 s at n =
#: 20); one that does find it takes about 6.
CLOSING_STEPS = 8

#: The optimum's value the search aims its solves below the rate at, when it wants another
#: value: nearer rho*, the solver no longer settles t* (nor proves it positive) reliably,
#: and values under 5% of this are not used.
SETTLED = 2e-5


def _estimate(values: list) -> tuple[float, float | None]:
    """The root of the model through the newest ``(rho, t, dt/drho)`` (with the change of
    the derivative from the latest value at least ``SETTLED / |dt/drho|`` below it: a
    quadratic, else Newton's line), and the model's correction over Newton's step (None
    without a second value)."""
    r1, t1, d1 = values[-1]
    newton = r1 - t1 / d1
    spacing = SETTLED / abs(d1)
    older = [v for v in values[:-1] if r1 - v[0] >= spacing]
    if not older:
        return newton, None
    r0, _, d0 = older[-1]
    curvature = (d1 - d0) / (r1 - r0)
    disc = d1 * d1 - 2.0 * curvature * t1
    if disc <= 0.0:
        return newton, None
    quadratic = r1 + 2.0 * t1 / (-d1 + math.sqrt(disc))
    return quadratic, abs(quadratic - newton)


def find_rate(
    feasibility: Candidates, tol: float, lower: float = 0.0
) -> tuple[float, Solution | None]:
    """The smallest certified rate in [0, 1] to ``tol`` relative to ``1 - rho``, as
    :func:`~stochmix.analysis.certificates.lmi.bisect_rate` (same arguments, same
    answer to the tolerance), by the root search of the module docstring when
    ``feasibility`` has ``probe(rho, limit=None) -> (Solution | None, (t, dt/drho) |
    None)`` (``limit``: Newton steps at most, None for the solver's own: the
    structured SDP), by bisection otherwise. ``lower`` (a rate no certificate beats) is
    the bracket's first lo; the first solves gallop up from it as bisection's do (``lower
    + 2^j tol (1 - lower) / 2``, j = 0, 1, 2: a rate tight at the floor takes one or two),
    until one certifies or gives a value (t* over 5% of ``SETTLED``)."""
    probe = getattr(feasibility, "probe", None)
    if probe is None:
        return bisect_rate(feasibility, tol, lower)
    lo, hi = 0.0, 1.0
    best: Solution | None = None
    values: list[tuple[float, float, float]] = []  # (rho, t*, dt*/drho) below rho*

    def at(rho: float, limit: int | None = None) -> bool:
        nonlocal lo, hi, best
        found, value = probe(rho, limit=limit)
        if found is not None:
            hi, best = rho, found
            return True
        lo = max(lo, rho)
        if value is not None and value[0] > 0.05 * SETTLED and value[1] < 0.0:
            values.append((rho, float(value[0]), float(value[1])))
            values.sort()
        return False

    if 0.0 < lower < 1.0:  # bisect_rate's gallop up from the floor, until a value
        lo, step = lower, 0.5 * tol * (1.0 - lower)
        for j in range(3):
            if lower + step * 2**j >= 1.0 or at(lower + step * 2**j) or values:
                break
    else:
        if not at(1.0):
            return 1.0, None
        if at(0.0):
            return 0.0, best
    streak = 0  # solves in a row that gave no new value
    for _ in range(64):
        width = tol * max(1.0 - lo, 1e-12)
        if hi - lo <= width:
            break
        known = len(values)
        trial = _next(values, lo, hi, width, streak)
        root = _estimate(values)[0] if values else math.nan
        # once a certificate stands within two tolerances above the estimate, what is left
        # is closing the bracket: a solve there certifies within a few warm steps or
        # finds nothing, so it is cut short (CLOSING_STEPS)
        closing = hi < 1.0 and hi - root <= 2.0 * width
        at(trial, CLOSING_STEPS if closing else None)
        streak = 0 if len(values) > known else streak + 1
    if best is None:
        return 1.0, None
    return hi, best


def _next(values: list, lo: float, hi: float, width: float, streak: int) -> float:
    """The next rate to solve at, strictly inside ``(lo, hi)`` (module docstring);
    ``streak``: how many solves in a row gave no new value (an estimate just outside the
    bracket then steps in from its end by ``0.8 tol (1 - lo)`` doubled each time; one far
    outside bisects)."""
    middle = 0.5 * (lo + hi)
    if not values:
        return middle
    root, correction = _estimate(values)
    if not math.isfinite(root):
        return middle
    last, spacing = values[-1][0], SETTLED / abs(values[-1][2])
    if correction is None:  # Newton's step alone: trusted to 5% of itself
        correction = 0.05 * abs(root - last)
    below = root - max(2.0 * correction, spacing)  # another value there, nearer rho*
    if correction <= 0.4 * width or below < last + 0.5 * (root - last):
        # close around the estimate from above: certified solves are the cheap ones
        candidates = [root + 1.2 * width, root + 0.4 * width, root - 0.4 * width]
    else:
        candidates = [below]
    step = 0.8 * width * 2.0**streak
    if root >= hi + 4.0 * width or root <= lo - 4.0 * width:
        return middle  # the estimate is far off: bisect
    if root >= hi - 0.1 * width:  # just above a certified rate: walk down
        candidates.append(hi - step)
    elif root <= lo + 0.1 * width:  # just below a rate with no certificate: walk up
        candidates.append(lo + step)
    for trial in candidates:
        if lo + 0.1 * width < trial < hi - 0.1 * width:
            return trial
    return middle

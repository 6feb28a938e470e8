"""Element-wise row kernels: the deterministic row maps a compiled program runs itself.

A :class:`~stochmix.engine.model.rowmap.RowMap` calls arbitrary Python once per round, so
it ends the run of node-local phases around it: every map gathers and scatters the rows
again. Most maps of the methods in the field are far simpler: the prox of an L1 or elastic
net term, a projection onto a box or the nonnegative orthant. Each rewrites every entry
of a row from the same entry and a few numbers of the round (the *round scalars*: the
prox step times the weight, the box's bounds). Such a map is a :class:`ElementwiseKernel`
here, and a row function that is one says so with a ``row_kernel`` attribute (see
:func:`kernel_of`); the builder then gives its phase a node-local form with one
:class:`~stochmix.engine.model.local_form.KernelTerm`, and the compiled programs apply it
inside the run, chunk by chunk or node by node, between the other phases' arithmetic. The
round scalars are coefficient values: bound per round, so a program is compiled once per
kernel, not once per step size.

The catalogue (``v`` one entry of the target's source; ``d``, ``m``, ``u`` the same entry
of further sources; the rest round scalars):

==================  ============================================  ============================
kernel              rule                                          used by
==================  ============================================  ============================
``shrink``          ``v - clip(v, -t, t)``                        prox of ``lam ||x||_1``
                                                                  (t = step lam)
``shrink_scaled``   ``(v - clip(v, -t, t)) / s``                  prox of the elastic net
                                                                  (s = 1 + step l2)
``clip``            ``min(max(v, lo), hi)``                       projection onto a box, onto
                                                                  x >= 0
``adam_moment``     ``b (v + a) + (1 - b) d^2``                   FedAdam's second moment
``yogi_moment``     ``w - (1 - b) d^2 sign(w - d^2)``,            FedYogi's second moment
                    ``w = v + a``
``adagrad_moment``  ``(v + a) + d^2``                             FedAdagrad's second moment
``adaptive_step``   ``v + eta m / (sqrt(u) + tau)``               the adaptive server step
==================  ============================================  ============================

A kernel of several sources (``sources`` > 1) reads the same entry of each: the second
moments read the moment and the pseudo-gradient, the server step the model, the first and
the second moment (``a`` is FedAdam's v_{-1}, added in the first update only: a round
scalar, 0 afterwards).

Each has a NumPy form (into preallocated buffers), a Torch form (any device) and a Numba
form (a helper of :mod:`stochmix._compiled` that the row-wise loop inlines), all computing
the same operations in the same order as the regularizer's own ``prox``, so a run gives
the same numbers whether a map or the program applies the kernel (bit for bit in float64
on the NumPy programs). A NaN entry stays NaN (the programs' checks see it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .round_scalars import RoundScalar

__all__ = ["KERNELS", "ElementwiseKernel", "kernel_of"]


def _shrink_numpy(v, t, *, out, tmp):
    np.clip(v, -t, t, out=tmp)
    np.subtract(v, tmp, out=out)


def _shrink_scaled_numpy(v, t, s, *, out, tmp):
    _shrink_numpy(v, t, out=out, tmp=tmp)
    np.divide(out, s, out=out)


def _clip_numpy(v, lo, hi, *, out, tmp):
    np.clip(v, lo, hi, out=out)


def _adam_moment_numpy(v, d, b, a, *, out, tmp):
    np.multiply(d, d, out=tmp)
    np.multiply(tmp, 1.0 - b, out=tmp)
    np.add(v, a, out=out)
    np.multiply(out, b, out=out)
    np.add(out, tmp, out=out)


def _yogi_moment_numpy(v, d, b, a, *, out, tmp):
    square = np.multiply(d, d)
    np.add(v, a, out=out)
    np.subtract(out, square, out=tmp)
    np.sign(tmp, out=tmp)
    np.multiply(square, 1.0 - b, out=square)
    np.multiply(square, tmp, out=tmp)
    np.subtract(out, tmp, out=out)


def _adagrad_moment_numpy(v, d, a, *, out, tmp):
    np.multiply(d, d, out=tmp)
    np.add(v, a, out=out)
    np.add(out, tmp, out=out)


def _adaptive_step_numpy(v, m, u, eta, tau, *, out, tmp):
    np.sqrt(u, out=tmp)
    np.add(tmp, tau, out=tmp)
    np.divide(np.multiply(m, eta), tmp, out=tmp)
    np.add(v, tmp, out=out)


def _adam_moment_torch(torch, v, d, b, a, *, out, tmp):
    torch.mul(d, d, out=tmp)
    tmp.mul_(1.0 - b)
    torch.add(v, a, out=out)
    out.mul_(b).add_(tmp)


def _yogi_moment_torch(torch, v, d, b, a, *, out, tmp):
    square = torch.mul(d, d)
    torch.add(v, a, out=out)
    torch.sub(out, square, out=tmp)
    tmp.sign_()
    square.mul_(1.0 - b)
    tmp.mul_(square)  # (commutative: the same rounding as square * sign)
    out.sub_(tmp)


def _adagrad_moment_torch(torch, v, d, a, *, out, tmp):
    torch.mul(d, d, out=tmp)
    torch.add(v, a, out=out)
    out.add_(tmp)


def _adaptive_step_torch(torch, v, m, u, eta, tau, *, out, tmp):
    torch.sqrt(u, out=tmp)
    tmp.add_(tau)
    torch.div(torch.mul(m, eta), tmp, out=tmp)
    torch.add(v, tmp, out=out)


def _shrink_torch(torch, v, t, *, out, tmp):
    torch.clamp(v, -t, t, out=tmp)
    torch.sub(v, tmp, out=out)


def _shrink_scaled_torch(torch, v, t, s, *, out, tmp):
    _shrink_torch(torch, v, t, out=out, tmp=tmp)
    out.div_(s)


def _clip_torch(torch, v, lo, hi, *, out, tmp):
    torch.clamp(v, lo, hi, out=out)


@dataclass(frozen=True)
class ElementwiseKernel:
    """One entry of the catalogue (see the module docstring).

    Attributes:
        name: the kernel's name (what a ``row_kernel`` attribute gives, and what a
            program's structure key holds).
        params: the names of its round scalars, in order.
        rule: the rule, in words, for messages and ``explain``.
        numpy: ``f(v, *more, *params, out=, tmp=)``: the new entries of ``v`` (and of
            the further sources ``more``, one array each, ``v``'s shape) into ``out``
            (``tmp`` a scratch buffer of ``v``'s shape; ``out`` may be ``v``).
        torch: the same with Torch: ``f(torch, v, *more, *params, out=, tmp=)``.
        numba: the name of the :mod:`stochmix._compiled` helper ``f(entry, *more,
            *params)`` that gives one new entry (inlined into the row-wise loop).
        faithful: per round scalar, the least value at which an entry is finite after
            the kernel exactly when it was before (when every scalar is at least its
            bound, a NaN or Inf in a kernel's output shows in its input: see
            :mod:`stochmix.engine.plan.schedule`); None: not so for any values (a
            projection maps an infinite entry to a bound; so for every kernel of several
            sources, whose further sources need not show in the output).
        sources: how many source arrays it reads (the target's first).
    """

    name: str
    params: tuple[str, ...]
    rule: str
    numpy: Callable
    torch: Callable
    numba: str
    faithful: tuple[float, ...] | None = None
    sources: int = 1

    def apply(self, v: np.ndarray, params, more=()) -> np.ndarray:
        """The kernel on a NumPy array (a new array; for single rows and tests); ``more``:
        the further sources' arrays."""
        out, tmp = np.empty_like(v), np.empty_like(v)
        self.numpy(v, *more, *params, out=out, tmp=tmp)
        return out


#: The element-wise kernels, by name.
KERNELS: dict[str, ElementwiseKernel] = {
    k.name: k
    for k in (
        ElementwiseKernel(
            "shrink",
            ("t",),
            "v - clip(v, -t, t)",
            _shrink_numpy,
            _shrink_torch,
            "shrink",
            faithful=(0.0,),  # t >= 0: |v - clip(v, -t, t)| <= |v|, Inf - t = Inf
        ),
        ElementwiseKernel(
            "shrink_scaled",
            ("t", "s"),
            "(v - clip(v, -t, t)) / s",
            _shrink_scaled_numpy,
            _shrink_scaled_torch,
            "shrink_scaled",
            faithful=(0.0, 1.0),  # t >= 0 and s >= 1: no larger in magnitude than v
        ),
        ElementwiseKernel(
            "clip", ("lo", "hi"), "min(max(v, lo), hi)", _clip_numpy, _clip_torch, "clip_entry"
        ),
        ElementwiseKernel(
            "adam_moment",
            ("b", "a"),
            "b (v + a) + (1 - b) d^2",
            _adam_moment_numpy,
            _adam_moment_torch,
            "adam_moment",
            sources=2,
        ),
        ElementwiseKernel(
            "yogi_moment",
            ("b", "a"),
            "w - (1 - b) d^2 sign(w - d^2), w = v + a",
            _yogi_moment_numpy,
            _yogi_moment_torch,
            "yogi_moment",
            sources=2,
        ),
        ElementwiseKernel(
            "adagrad_moment",
            ("a",),
            "(v + a) + d^2",
            _adagrad_moment_numpy,
            _adagrad_moment_torch,
            "adagrad_moment",
            sources=2,
        ),
        ElementwiseKernel(
            "adaptive_step",
            ("eta", "tau"),
            "v + eta m / (sqrt(u) + tau)",
            _adaptive_step_numpy,
            _adaptive_step_torch,
            "adaptive_step",
            sources=3,
        ),
    )
}


def kernel_of(function) -> tuple[str, tuple[float, ...]] | None:
    """``(name, round scalars)`` when the row function ``function`` is an element-wise
    kernel of the catalogue (its ``row_kernel`` attribute, a pair of a name of
    :data:`KERNELS` and that kernel's round scalars as finite-or-infinite floats, or None),
    else None. Anything else, or a pair that does not fit the catalogue, is a plain row
    map: nothing is trusted that the programs could not apply exactly."""
    found = getattr(function, "row_kernel", None)
    if not (isinstance(found, tuple) and len(found) == 2):
        return None
    name, params = found
    kernel = KERNELS.get(name) if isinstance(name, str) else None
    if kernel is None or not isinstance(params, tuple) or len(params) != len(kernel.params):
        return None
    values = []
    for p in params:
        if isinstance(p, bool) or not isinstance(p, (int, float, np.floating, np.integer)):
            return None
        if np.isnan(p):
            return None
        values.append(p if isinstance(p, RoundScalar) else float(p))  # (a rule kept)
    return name, tuple(values)

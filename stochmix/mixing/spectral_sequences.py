"""Spectral summaries of a time-varying sequence ``W_0, W_1, ...``: every step and products.

One matrix of a time-varying sequence says little about how the sequence mixes. The
one-peer exponential graph over n = 16 nodes (Ying et al., 2021) has period 4: step 0 is a
directed ring (SLEM 0.98), steps 1, 2, 3 are disconnected (2, 4, 8 cycles: SLEM 1, no
contraction at all), and yet ``W_3 W_2 W_1 W_0 = (1/n) 1 1^T`` averages exactly. So
:func:`sequence_spectrum` summarizes *every* step of a period and the product over the
period; for a sequence without a period (independent random graphs) it summarizes a sample
of steps and the products over consecutive windows of them, and
:meth:`SequenceSpectrum.statistics` gives their min / median / max.

Every step's matrix is first checked against what its weight rule promises
(:data:`RULE_CLAIMS`): ``"row"`` and ``"natural"`` (the graph's own weights, used as
``Z <- W Z``) row-stochastic, ``"column"`` column-stochastic, ``"metropolis"`` and
``"fastest"`` doubly stochastic, ``"fdla"`` rows and columns summing to one (its weights
may be negative). A matrix that breaks the promise is refused (``ValueError`` naming the rule, the
step and the first failing row or column) rather than summarized: the "spectral gap" of a
0/1 adjacency matrix is no statement about mixing.

References:
    B. Ying, K. Yuan, Y. Chen, H. Hu, P. Pan, W. Yin. Exponential graph is provably
    efficient for decentralized deep training. NeurIPS 2021.

    A. Nedić, A. Olshevsky. Distributed optimization over time-varying directed graphs.
    IEEE Transactions on Automatic Control 60(3), 2015 (products over windows of B steps).

    E. Seneta. Non-negative Matrices and Markov Chains, 2nd ed., Springer, 1981/2006,
    ch. 3-4 (backward products of stochastic matrices, coefficients of ergodicity).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._validate import as_int, choice
from .checks import (
    check_column_stochastic,
    check_columns_sum_to_one,
    check_doubly_stochastic,
    check_row_stochastic,
    check_rows_sum_to_one,
)
from .sequences import RULES
from .spectral import ATOL, METHODS, mixing_summary, product, summary_table

#: What each weight rule promises about every matrix it gives.
RULE_CLAIMS: Mapping[str, str] = {
    "natural": "row-stochastic",
    "metropolis": "doubly stochastic",
    "row": "row-stochastic",
    "column": "column-stochastic",
    "fastest": "doubly stochastic",
    "fdla": "rows and columns sum to one",
}
#: Number of sampled steps of a sequence without a period, by default.
STEPS = 100


def _check_sums_to_one(W, name: str, atol: float) -> None:
    """Raise ``ValueError`` naming ``name`` unless W's rows and columns sum to one."""
    check_rows_sum_to_one(W, name=name, atol=atol)
    check_columns_sum_to_one(W, name=name, atol=atol)


_CHECKS = {
    "row-stochastic": check_row_stochastic,
    "column-stochastic": check_column_stochastic,
    "doubly stochastic": check_doubly_stochastic,
    "rows and columns sum to one": _check_sums_to_one,
}
_STATISTICS = ("min", "median", "max")
_REDUCERS: dict[str, Callable[[np.ndarray], Any]] = {
    "min": np.min,
    "median": np.median,
    "max": np.max,
}
_NUMBERS = (
    "nnz",
    "spectral_radius",
    "slem",
    "spectral_gap",
    "ergodicity",
    "consensus_contraction",
)


def check_rule(W, rule: str, step: int, atol: float = ATOL) -> None:
    """Raise ``ValueError`` unless ``W``, step ``step``'s matrix under ``rule``, is
    stochastic in the sense :data:`RULE_CLAIMS` says ``rule`` promises.

    The message names the rule, the step and what fails (the first bad row or column sum,
    or the first negative entry), on one line.
    """
    rule = choice(rule, "rule", RULES)
    claim = RULE_CLAIMS[rule]
    try:
        _CHECKS[claim](W, name=f"rule={rule!r} at step {step}: W_{step}", atol=atol)
    except ValueError as error:
        if rule != "natural":
            raise
        raise ValueError(
            f"{error}; 'natural' uses the graph's own edge weights (missing = 1) as W and"
            " promises they are row-stochastic"
        ) from None


@dataclass(frozen=True)
class SequenceSpectrum:
    """Per-step and product summaries of a graph sequence under one weight rule.

    Attributes:
        rule: the weight rule (``"natural"``, ``"metropolis"``, ``"row"``, ``"column"``,
            ``"fastest"``, ``"fdla"``).
        n: number of nodes; every matrix is ``(n, n)``.
        period: the sequence's period, or ``None`` for a random sequence (then the steps
            are a sample).
        window: number of steps in each product.
        steps: one :func:`~stochmix.mixing.spectral.mixing_summary` dict per summarized
            step ``k`` (key ``"step"``: k), in order; ``k = 0 .. period - 1`` for a
            periodic sequence, ``k = 0 .. S - 1`` (S sampled steps) otherwise.
        products: one summary dict per product ``W_{s+L-1} ... W_{s+1} W_s`` (``W_s``
            applied first; keys ``"start"``: s, ``"length"``: L = ``window``); one product
            ``s = 0`` for a periodic sequence, the ``S // window`` disjoint windows
            ``s = 0, L, 2L, ...`` of the sample otherwise.
    """

    rule: str
    n: int
    period: int | None
    window: int
    steps: tuple[dict, ...]
    products: tuple[dict, ...]

    @property
    def sampled(self) -> bool:
        """True for a sequence without a period, whose steps are a sample."""
        return self.period is None

    def statistics(self, of: str = "steps") -> dict[str, dict]:
        """Min, median and max of every column over the steps (``of="steps"``) or the
        products (``of="products"``): see :func:`summary_statistics`."""
        of = choice(of, "of", ("steps", "products"))
        return summary_statistics(self.steps if of == "steps" else self.products)


def summary_statistics(summaries: Sequence[Mapping]) -> dict[str, dict]:
    """``{"min": ..., "median": ..., "max": ...}`` over several summary dicts.

    Each statistic is taken column by column (the "min" row's SLEM and gap come from
    different steps: min gap = 1 - max SLEM). Numbers (``nnz``, ``spectral_radius``,
    ``slem``, ``spectral_gap``, ``ergodicity``, ``consensus_contraction``) are reduced
    with ``numpy.min`` / ``median`` / ``max`` (the median of an even count is the mean of
    the middle two); a number that is ``None`` for some summary (does not apply there) is
    ``None``. Other keys (``n``, ``kind``, the stochasticity flags) keep their value when
    every summary agrees; otherwise ``kind`` is ``"mixed"`` and the others ``None``. Each
    dict also holds ``"count"``: ``len(summaries)``.
    """
    if not summaries:
        raise ValueError("summaries must hold at least one summary dict")
    keys = [key for key in summaries[0] if key not in ("step", "start", "length")]
    out = {name: {"count": len(summaries)} for name in _STATISTICS}
    for key in keys:
        values = [summary.get(key) for summary in summaries]
        for name in _STATISTICS:
            out[name][key] = _reduce(key, values, name)
    return out


def _reduce(key: str, values: list, name: str):
    """One statistic of one column (see :func:`summary_statistics`)."""
    if key in _NUMBERS:
        if any(value is None for value in values):
            return None
        result = _REDUCERS[name](np.asarray(values, dtype=float))
        return int(result) if key == "nnz" and name != "median" else float(result)
    if all(value == values[0] for value in values):
        return values[0]
    return "mixed" if key == "kind" else None


def _default_window(n: int, steps: int) -> int:
    """``ceil(log2 n)`` (at least 1, at most ``steps``): the period of the one-peer
    exponential graph over n nodes, a product length at which good sequences average."""
    return min(max(1, (n - 1).bit_length()), steps)


def sequence_spectrum(
    sequence,
    rule: str = "row",
    steps: int | None = None,
    window: int | None = None,
    *,
    method: str = "auto",
    atol: float = ATOL,
) -> SequenceSpectrum:
    """Spectral summaries of every step of a graph sequence, and of its products.

    Periodic sequence (``sequence.period`` = p): the steps ``k = 0 .. p-1``, one period,
    each summarized, and the product ``W_{L-1} ... W_1 W_0`` with ``L = window`` (default
    p: the period product, whose SLEM is the contraction per period).

    Sequence without a period (independent random graphs): the ``steps`` = S sampled steps
    ``k = 0 .. S-1`` (default :data:`STEPS`; the sample is the sequence's own, reproducible
    from its seed), and the ``S // L`` products over the disjoint windows ``[0, L), [L, 2L),
    ...`` with ``L = window`` (default ``ceil(log2 n)``, capped at S).

    Each summary is :func:`~stochmix.mixing.spectral.mixing_summary` of the matrix:
    ``spectral_radius`` rho = max ``|lambda|`` (1 for a stochastic matrix); ``slem``, the
    largest ``|lambda|`` once one eigenvalue 1 is removed (1 means no contraction: a
    disconnected or periodic step); ``spectral_gap`` = 1 - SLEM; ``ergodicity``,
    Dobrushin's coefficient (row-stochastic only); ``consensus_contraction``
    ``||W - 1 pi^T||_2``; ``kind``, ``n``, ``nnz``.

    Args:
        sequence: a :class:`~stochmix.mixing.sequences.GraphSequence` (``n_nodes``,
            ``period``, ``matrix(k, rule)``).
        rule: weight rule; every step's ``(n, n)`` matrix must be what the rule promises
            (:data:`RULE_CLAIMS`, checked to ``atol``).
        steps: number of sampled steps S >= 1, for sequences without a period only.
        window: product length L >= 1; at most S for a sequence without a period.
        method: ``"auto"``, ``"dense"`` or ``"sparse"`` for the eigen-solvers.
        atol: tolerance of the stochasticity checks.

    Returns:
        a :class:`SequenceSpectrum` (plain data; ``.statistics()`` gives min / median /
        max).

    Raises:
        ValueError: a rule the sequence's matrices do not satisfy (naming the rule, the
            step and the failing row, column or entry), or a bad ``steps`` / ``window``.
    """
    if not callable(getattr(sequence, "matrix", None)):
        raise TypeError(
            "sequence must be a GraphSequence (with matrix(k, rule)), got"
            f" {type(sequence).__name__}"
        )
    rule = choice(rule, "rule", RULES)
    choice(method, "method", METHODS)
    n, period = int(sequence.n_nodes), sequence.period
    count, window = _steps_and_window(n, period, steps, window)
    matrices = [_checked_matrix(sequence, k, rule, atol) for k in range(count)]
    per_step = tuple(
        {"step": k, **mixing_summary(W, method=method, atol=atol)} for k, W in enumerate(matrices)
    )
    starts = [0] if period is not None else range(0, count - window + 1, window)
    products = tuple(
        {
            "start": s,
            "length": window,
            **mixing_summary(
                product(matrices[k % count] for k in range(s, s + window)),
                method=method,
                atol=atol,
            ),
        }
        for s in starts
    )
    return SequenceSpectrum(rule, n, period, window, per_step, products)


def _steps_and_window(n: int, period, steps, window) -> tuple[int, int]:
    """The number of steps to summarize and the product length, validated."""
    if period is not None:
        if steps is not None:
            raise ValueError(
                f"steps is for sequences without a period; this one has period {period}"
                f" and all its steps are summarized, got steps={steps!r}"
            )
        count = as_int(period, "sequence.period", minimum=1)
        return count, period if window is None else as_int(window, "window", minimum=1)
    count = STEPS if steps is None else as_int(steps, "steps", minimum=1)
    if window is None:
        return count, _default_window(n, count)
    window = as_int(window, "window", minimum=1)
    if window > count:
        raise ValueError(f"window must be <= steps = {count}, got {window}")
    return count, window


def _checked_matrix(sequence, k: int, rule: str, atol: float):
    """``sequence.matrix(k, rule)``, refused unless it keeps the rule's promise."""
    W = sequence.matrix(k, rule)
    check_rule(W, rule, k, atol)
    return W


def sequence_table(spectra: SequenceSpectrum | Sequence[SequenceSpectrum], name: str = "") -> str:
    """A plain-text table of one or more :class:`SequenceSpectrum` (see ``summary_table``).

    Periodic: one line per step ``k=0 .. p-1`` and one ``period product`` line (``product``
    when the window is not the period). Sampled: ``step min`` / ``median`` / ``max`` lines
    over the steps and ``product min`` / ``median`` / ``max`` over the window products.
    Lines are labelled ``"<name> <what> (<rule>)"``, the rules one after the other.
    """
    if isinstance(spectra, SequenceSpectrum):
        spectra = [spectra]
    prefix = f"{name} " if name else ""
    rows: dict[str, Mapping] = {}
    for spectrum in spectra:
        rows.update(_table_rows(spectrum, prefix, f"({spectrum.rule})"))
    return summary_table(rows)


def _table_rows(spectrum: SequenceSpectrum, prefix: str, label: str) -> dict[str, Mapping]:
    """The labelled summary lines of one spectrum (see :func:`sequence_table`)."""
    rows: dict[str, Mapping] = {}
    if spectrum.sampled:
        for of, what in (("steps", "step"), ("products", "product")):
            stats = spectrum.statistics(of)
            for stat in _STATISTICS:
                rows[f"{prefix}{what} {stat} {label}"] = stats[stat]
        return rows
    for summary in spectrum.steps:
        rows[f"{prefix}k={summary['step']} {label}"] = summary
    what = "period product" if spectrum.window == spectrum.period else "product"
    rows[f"{prefix}{what} {label}"] = spectrum.products[0]
    return rows


def _step_range(first: int, last: int) -> str:
    return f"k={first}" if first == last else f"k={first}..{last}"


def _product_text(length: int, start: str = "0") -> str:
    """``W_(s+L-1) ... W_s`` written out for a window of ``length`` steps from ``start``."""

    def step(offset: int) -> str:
        if start == "0":
            return f"W_{offset}"
        return f"W_({start}+{offset})" if offset else f"W_{start}"

    if length == 1:
        return step(0)
    if length == 2:
        return f"{step(1)} {step(0)}"
    return f"{step(length - 1)} ... {step(0)}"


def describe(spectrum: SequenceSpectrum) -> str:
    """One line saying which steps and which products a :class:`SequenceSpectrum` covers."""
    L = spectrum.window
    p = spectrum.period
    if p is not None:  # not sampled
        what = "the period product" if L == p else "the product"
        return (
            f"period {p}: every step {_step_range(0, p - 1)} and {what} {_product_text(L)}"
            " (W_0 applied first)"
        )
    count, windows = len(spectrum.steps), len(spectrum.products)
    starts = [0, L, 2 * L][:windows] if windows <= 3 else [0, L, "...", (windows - 1) * L]
    plural = "s" if windows > 1 else ""
    return (
        f"no period: min / median / max of each column over {count} sampled steps"
        f" {_step_range(0, count - 1)}, and over the products {_product_text(L, 's')} of"
        f" {windows} disjoint window{plural} of {L} step{'s' if L > 1 else ''},"
        f" s = {', '.join(map(str, starts))}"
    )


__all__ = [
    "RULE_CLAIMS",
    "STEPS",
    "SequenceSpectrum",
    "check_rule",
    "describe",
    "sequence_spectrum",
    "sequence_table",
    "summary_statistics",
]

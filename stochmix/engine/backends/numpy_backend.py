"""The NumPy/SciPy backend: the stacked state as a NumPy array, phases applied with SciPy
sparse products (the sparse CPU backend).

Methods and phases are backend-free (indices and SciPy CSR coefficients); a backend turns
them into operations on its arrays.
"""

from __future__ import annotations

import threading

import numpy as np

from ..._pool import CORES, on_threads
from ..._validate import as_float_dtype, flag_or_choice
from ..codegen.combine_kernel import combine_kernel, push_kernel, rows_kernel, scatter_kernel
from ..model.blockwise import BlockwiseForm
from ..model.phase import Phase
from ..model.whole_block import Workspace, apply_blockwise_numpy, product_into
from .threads import resolve_threads

__all__ = ["NumpyBackend"]


class NumpyBackend:
    """State as a NumPy array; phases applied with SciPy sparse products.

    ``threads``: Torch's intra-op thread count during a run, for problems that compute
    with Torch (a :class:`~stochmix.problems.TorchModel`'s gradients): as
    :class:`TorchBackend`'s (default one thread, or ``$STOCHMIX_TORCH_THREADS``, or
    left alone under ``OMP_NUM_THREADS``/``MKL_NUM_THREADS``; ``0``: never touched), set
    when the run starts and restored when it ends. Torch is never imported for it.
    """

    name = "numpy"
    runs_local_phases = True  # node-local runs of phases go through the chunked path
    hands_off = True  # a whole-block phase may hand a block to the next (blockwise.chained)
    applies_row_subsets = True  # whole-block forms on some rows of their blocks (activation)
    #: a whole-block target's terms other than its products added by one compiled pass
    #: (:mod:`stochmix.engine.codegen.combine_kernel`, with Numba; the same bits)
    fused_combine = True
    applies_trip_counts = True  # repeated phases as one run limited to prefixes

    def __init__(self, dtype=np.float64, compiled="auto", threads=None):
        self.dtype = as_float_dtype(dtype)
        # node-local runs through Numba (see engine.rowwise)
        self.compiled = flag_or_choice(compiled, "compiled", ("auto",))
        self.threads = resolve_threads(threads)  # Torch's, set by run for the run

    def asarray(self, array: np.ndarray) -> np.ndarray:
        """``array`` as this backend's array type and dtype."""
        return np.asarray(array, dtype=self.dtype)

    def to_numpy(self, array) -> np.ndarray:
        """Back to a NumPy array."""
        return np.asarray(array)

    def apply(self, z: np.ndarray, phase: Phase, gradients) -> bool:
        """``z[rows] <- mix @ z + inject @ gradients`` in place; False if a new entry is
        not finite (the state is then left with the non-finite rows written)."""
        new = phase.mix @ z
        if phase.inject is not None:
            new += phase.inject @ gradients
        new = new.astype(z.dtype, copy=False)  # check what is stored (float32 overflows)
        z[phase.rows] = new
        return bool(np.isfinite(new.sum()))

    def run_products(self, z: np.ndarray, products: tuple) -> tuple:
        """The mixing products of a run of node-local phases, when it starts: ``matrix @
        z[rows]`` for each ``(matrix, rows)`` of ``products`` (one row per node of the run,
        SciPy's kernel, in ``z``'s dtype), into arrays kept from round to round (see
        :mod:`stochmix.engine.model.product_form`)."""
        kept = self.__dict__.setdefault("_products", {})
        thread = threading.get_ident()  # (runs on threads of their own may share a backend)
        if len(kept) > 64:
            kept.clear()
        out = []
        for k, (matrix, rows) in enumerate(products):
            values = z[rows]
            shape = (matrix.shape[0], z.shape[1])
            found = kept.get((thread, k))
            if found is None or found.shape != shape or found.dtype != z.dtype:
                found = kept[thread, k] = np.empty(shape, dtype=z.dtype)
            product_into(matrix, values, found)
            out.append(found)
        return tuple(out)

    def apply_blockwise(self, z: np.ndarray, phase: Phase, gradients) -> bool:
        """Apply a phase through its whole-block form (:attr:`Phase.blockwise`): each
        rewritten block T becomes ``sum scale * (W @ S) + sum coef * S + sum coef * G``
        (one SciPy product per mixed block, computed out of place from the old ``z``),
        then every T is written into its slice of ``z``. ``gradients``: shape (c, d), the
        gradients of ``phase.blockwise.clients``, or None. False if a new entry is not
        finite (as :meth:`apply`)."""
        handed = self.__dict__.setdefault("_handed", {})  # rows a phase hands to the next
        workspace = self.__dict__.get("_workspace")
        if workspace is None:  # arrays kept from round to round
            workspace = self._workspace = Workspace()
        return apply_blockwise_numpy(
            z,
            _whole_block_form(phase),
            gradients,
            handed=handed,
            workspace=workspace,
            fused=combine_kernel if self.fused_combine else None,
            rows_kernel=rows_kernel if self.fused_combine else None,
            scatter=scatter_kernel() if self.fused_combine else None,
            push=push_kernel() if self.fused_combine else None,
            split=on_threads if CORES > 1 else None,
        )


def _whole_block_form(phase: Phase) -> BlockwiseForm:
    """The whole-block form that ``apply_blockwise`` applies (the engine sends it only
    phases that have one)."""
    form = phase.blockwise
    if form is None:
        raise ValueError(f"apply_blockwise: {phase!r} has no whole-block form")
    return form

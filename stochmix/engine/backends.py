"""Array backends: where the stacked state lives and how a phase is applied to it.

Methods and phases are backend-free (indices and SciPy CSR coefficients); a backend turns
them into operations on its arrays. The NumPy/SciPy backend is the sparse CPU one.
"""

from __future__ import annotations

import numpy as np

from .._validate import choice
from .phase import Phase


class NumpyBackend:
    """State as a NumPy array; phases applied with SciPy sparse products."""

    name = "numpy"
    runs_local_phases = True  # node-local runs of phases go through the chunked path

    def __init__(self, dtype=np.float64, compiled="auto"):
        self.dtype = np.dtype(dtype)
        if self.dtype not in (np.float32, np.float64):
            raise ValueError(f"dtype must be float32 or float64, got {self.dtype}")
        if compiled not in (True, False, "auto"):
            raise ValueError(f'compiled must be True, False or "auto", got {compiled!r}')
        self.compiled = compiled  # node-local runs through Numba (see engine.rowwise)

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


class TorchBackend:
    """State as a Torch tensor on any device; phases applied dense or sparse.

    ``mixing="sparse"`` gathers the source rows a phase reads (``index_select``), scales
    them and adds them into the rewritten rows (``index_add_``): cost O(nnz d), for large
    node counts. ``mixing="dense"`` multiplies the phase's rewritten rows of M as a dense
    (k, m) matrix: one matmul, the fast path on a GPU for moderate node counts.
    ``"auto"`` takes dense on CUDA when the state has at most ``dense_limit`` rows, else
    sparse. The phases are the same objects as on the NumPy backend, so the same seed gives
    the same trajectory to rounding. (On CUDA ``index_add_`` adds in no fixed order, so
    repeated sparse runs agree to rounding, not bit for bit.)
    """

    name = "torch"

    def __init__(self, dtype=np.float64, device="cpu", mixing="auto", dense_limit=8192):
        import torch

        self.torch = torch
        self.device = _check_device(torch, device)
        if not isinstance(dtype, torch.dtype):
            dtype = {"float64": torch.float64, "float32": torch.float32}.get(np.dtype(dtype).name)
        self.dtype = dtype
        if self.dtype not in (torch.float64, torch.float32):
            raise ValueError(f"dtype must be float32 or float64, got {dtype}")
        self.mixing = choice(mixing, "mixing", ("auto", "dense", "sparse"))
        self.dense_limit = int(dense_limit)
        self._prepared: dict = {}

    def asarray(self, array: np.ndarray):
        return self.torch.as_tensor(np.asarray(array), dtype=self.dtype, device=self.device)

    def to_numpy(self, array) -> np.ndarray:
        if isinstance(array, np.ndarray):
            return array
        return array.detach().cpu().numpy()

    def _dense(self, size: int) -> bool:
        if self.mixing == "auto":
            return self.device.type == "cuda" and size <= self.dense_limit
        return self.mixing == "dense"

    def _operator(self, csr, dense: bool):
        t = self.torch
        if dense:
            return ("dense", t.as_tensor(csr.toarray(), dtype=self.dtype, device=self.device))
        local = np.repeat(np.arange(csr.shape[0]), np.diff(csr.indptr))
        return (
            "sparse",
            t.as_tensor(local, device=self.device),
            t.as_tensor(csr.indices.astype(np.int64), device=self.device),
            t.as_tensor(csr.data, dtype=self.dtype, device=self.device),
            csr.shape[0],
        )

    def _prepare(self, phase: Phase):
        key = id(phase)
        hit = self._prepared.get(key)
        if hit is not None and hit[0] is phase:
            return hit[1]
        dense = self._dense(phase.size)
        ops = (
            self.torch.as_tensor(phase.rows, device=self.device),
            self._operator(phase.mix, dense),
            None if phase.inject is None else self._operator(phase.inject, dense),
        )
        if len(self._prepared) > 4096:
            self._prepared.clear()
        self._prepared[key] = (phase, ops)
        return ops

    def _times(self, op, x):
        if op[0] == "dense":
            return op[1] @ x
        _, local, cols, vals, k = op
        out = self.torch.zeros((k, x.shape[1]), dtype=x.dtype, device=x.device)
        return out.index_add_(0, local, x.index_select(0, cols) * vals[:, None])

    def apply(self, z, phase: Phase, gradients) -> bool:
        rows, mix, inject = self._prepare(phase)
        new = self._times(mix, z)
        if inject is not None:
            new += self._times(inject, gradients)
        z[rows] = new
        return bool(self.torch.isfinite(new.sum()))


BACKENDS = ("numpy", "torch")


def _check_device(torch, device):
    """``device`` as a ``torch.device`` that exists here, or a ValueError naming it."""
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f'device must be a string such as "cpu" or "cuda:0", got {device!r}')
    try:
        found = torch.device(device)
    except RuntimeError as error:
        raise ValueError(f"device {device!r} is not a Torch device ({error})") from None
    if found.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r}: this Torch has no CUDA device available")
        if found.index is not None and found.index >= torch.cuda.device_count():
            raise ValueError(
                f"device {device!r}: only {torch.cuda.device_count()} CUDA device(s) here"
            )
    elif found.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {device!r}: MPS is not available here")
    return found


def make_backend(backend, dtype=np.float64, **options):
    """A backend from its name ("numpy", "torch") or an already built backend object.

    ``options`` go to the Torch backend (``device``, ``mixing``), or ``compiled`` to the
    NumPy backend."""
    if not isinstance(backend, str):
        if options:
            raise ValueError(
                f"options {sorted(options)} apply to a backend given by name; "
                f"set them on the {type(backend).__name__} object instead"
            )
        return backend
    choice(backend, "backend", BACKENDS)
    if backend == "torch":
        if options.pop("compiled", "auto") is True:
            raise ValueError('compiled=True needs backend="numpy" (Numba compiles NumPy code)')
        try:
            return TorchBackend(dtype, **options)
        except ImportError:
            raise ValueError(
                'backend="torch" needs PyTorch: pip install "stochmix[torch]"'
            ) from None
    compiled = options.pop("compiled", "auto")
    if options:
        raise ValueError(f"options {sorted(options)} apply to the torch backend only")
    return NumpyBackend(dtype, compiled)

"""NumPy arrays as Torch tensors on a device (the Torch backend and its node-local
programs share it)."""

from __future__ import annotations

import numpy as np

__all__ = ["to_tensor"]


def to_tensor(torch, array: np.ndarray, device, dtype=None):
    """A NumPy ``array`` as a tensor on ``device`` (in ``dtype`` when given): shared
    memory on the CPU, an asynchronous copy elsewhere (CUDA stages pageable memory before
    returning, so nothing waits for the device)."""
    array = np.asarray(array)
    if not array.flags.writeable or not array.flags.c_contiguous:
        array = np.array(array)
    out = torch.from_numpy(array)
    if dtype is not None and out.dtype != dtype:
        out = out.to(dtype)
    if device.type != "cpu":
        out = out.to(device, non_blocking=True)
    return out

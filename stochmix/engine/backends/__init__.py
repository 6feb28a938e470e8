"""Stage 4, backends: where a plan's items are applied (NumPy/SciPy, Torch, and the
distributed backend over ranks). Imports only the model, plan and codegen stages.
"""

from .names import BACKENDS, make_backend
from .numpy_backend import NumpyBackend
from .torch_backend import TorchBackend

__all__ = ["BACKENDS", "NumpyBackend", "TorchBackend", "make_backend"]

"""Stage 4, backends: where a plan's items are applied (NumPy/SciPy, Torch, and the
distributed backend over ranks). Imports only the model, plan and codegen stages.

:class:`TorchBackend` is imported when first used (``backend="torch"`` or the name): a
NumPy run never needs its module nor the code writer it imports.
"""

from typing import TYPE_CHECKING, Any

from ..._lazy import LazyExports
from .names import BACKENDS, make_backend
from .numpy_backend import NumpyBackend

if TYPE_CHECKING:  # imported on first use (below), named here for type checkers and IDEs
    from .torch_backend import TorchBackend

__all__ = ["BACKENDS", "NumpyBackend", "TorchBackend", "make_backend"]

_EXPORTS = LazyExports(__name__, {"TorchBackend": ".torch_backend"})


if not TYPE_CHECKING:  # hidden from type checkers, so that they flag a misspelt name

    def __getattr__(name: str) -> Any:
        return _EXPORTS.load(name)

    def __dir__() -> list[str]:
        return _EXPORTS.dir()

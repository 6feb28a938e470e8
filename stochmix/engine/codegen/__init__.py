"""Stage 3, code generation: one writer per target (NumPy programs, Numba's row-wise loop
and its row statements, Torch programs, the gossip kernel) and the caches of compiled
programs (in memory and on disk). Imports only the model and plan stages.
"""

__all__: list[str] = []

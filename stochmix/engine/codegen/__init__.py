"""Stage 3, code generation: one writer per target (NumPy programs, Numba's row-wise loop
and its row statements, Torch programs, the gossip kernel), the chunk runtime that applies
a program over a round's nodes, and the caches of compiled programs (in memory and on
disk). Imports only the model and plan stages.
"""

__all__: list[str] = []

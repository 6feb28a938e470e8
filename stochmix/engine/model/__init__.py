"""Stage 1, the method model: what a method writes.

State blocks and their layout, phases (the IR), the equation form and its expression
algebra, activation rewrites, nonlinear row maps, whole-block forms, the phase cache and
the traffic a phase costs. Imports no later stage.
"""

__all__: list[str] = []

"""Stage 2, planning: a round cut into segments, the plan templates reuse, the schedule of
a segment, which rows are live, the slow-path reasons and the backends' capabilities.
Imports only :mod:`stochmix.engine.model`.
"""

__all__: list[str] = []

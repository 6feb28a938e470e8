"""Stage 5, the run: the loop, its arguments, rounds, the recorder and its result,
checkpoints, progress, explanations and segment batching. May import every earlier stage.
"""

__all__: list[str] = []

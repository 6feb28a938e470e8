"""What a method that runs another one with something added shares: delegation."""

from __future__ import annotations

from ..engine import Method, RunContext

__all__ = [
    "Wrapper",
]


class Wrapper(Method):
    """A method that runs ``method`` with something added (noise on its messages, a lossy
    uplink): its name, model block, client node, blocks, start, participation and problem
    checks and whether it is proximal are the wrapped method's, and so is every attribute
    it does not define itself (``lr``, ``local_steps``, graphs, ...); so are the
    method's own ``points`` and ``output`` (on its class or set on its instance) where the
    wrapper's class does not define them."""

    def __init__(self, method: Method, name: str):
        self.method = method
        self.name = name
        self.model_block = method.model_block
        self.client_node = method.client_node
        self.proximal = method.proximal
        # where the wrapped method takes its gradients and what it reports, where they are
        # its own (on its class or its instance) and this class does not say them itself:
        # Method's would stand in for them, silently
        for hook in ("points", "output"):
            default = getattr(Method, hook)
            own = getattr(type(method), hook) is not default or hook in vars(method)
            if own and getattr(type(self), hook) is default:
                setattr(self, hook, getattr(method, hook))

    def __getattr__(self, name):  # lr, graphs, ... of the wrapped method
        if name == "method":
            raise AttributeError(name)
        return getattr(self.method, name)

    def blocks(self, n_clients: int):
        return self.method.blocks(n_clients)

    def start(self, ctx: RunContext) -> None:
        self.method.start(ctx)

    def check_participation(self, participation) -> None:
        self.method.check_participation(participation)

    def check_problem(self, problem) -> None:
        self.method.check_problem(problem)

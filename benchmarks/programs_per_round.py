"""How many segments (programs) a round of every built-in method is cut into, under its
usual participation, as ``stochmix.explain`` plans it (issue 42: "one program per round
for every built-in method").

Every method kind of the configuration registry (``stochmix.config.registry.METHODS``) is
built with a step of 0.05 / L and the arguments it needs besides (2 local steps for the
federated methods that take them; ``mu`` for the accelerated ones, 2 mixing rounds for
Mudag and DAPG; a LASSO for the proximal methods), on least squares with 40 clients (5
rows each, d = 5): the federated methods under ``UniformSample(40, 10)`` (every client for
those that run every client), the decentralized ones under ``Full(40)`` on a random
4-regular graph (AD-PSGD under its ``RandomEdge`` ticks). For each it prints the segments
of rounds 1-5 (round 0 may hold a method's start) and what each segment is, how many of them
wait at a barrier (``Segment.waits``: they mix rows that an earlier segment of the round
writes, so every node's rows must be written first), and flags the slow paths ``explain``
lists. A second count says which methods' steady rounds (round 5) run in the compiled
batches of the segment loop (:mod:`stochmix.engine.runner.segments`: the rounds of every
node of a small graph, after the first two of each plan key), one program for many
rounds. Nothing is timed.

Run: ``.venv/bin/python benchmarks/programs_per_round.py [--compiled true|false|auto]``
(a few seconds).
"""

from __future__ import annotations

import argparse
import warnings

import networkx as nx

import stochmix as sm
from stochmix.config.registry import DECENTRALIZED, EVERY_CLIENT, FEDERATED
from stochmix.mixing import StaticSequence
from stochmix.participation import Full, RandomEdge, UniformSample
from stochmix.problems import L1, Composite, LeastSquares

N = 40
PROXIMAL = {"fedmid", "feddualavg", "pg_extra", "prox_nids", "dapg"}
ARGUMENTS = {
    "mudag": {"mix_rounds": 2, "mu": 0.01},
    "dapg": {"mix_rounds": 2, "mu": 0.01},
    "acc_dngd": {"mu": 0.01},
    "fedbuff": {"buffer": 5, "concurrency": 10},
}
NO_LOCAL_STEPS = ("scaffnew", "fedpd", "fed_lt", "fedbuff", "fedasync")


def _setting(kind: str, problem, graph):
    """The method of ``kind``, its problem and its participation."""
    lr = 0.05 / problem.smoothness
    extra = dict(ARGUMENTS.get(kind, {}))
    target = Composite(problem, L1(0.01)) if kind in PROXIMAL else problem
    if kind in DECENTRALIZED:
        ctor, fixed = DECENTRALIZED[kind]
        method = ctor(lr, StaticSequence(graph), **fixed, **extra)
        return method, target, RandomEdge(graph) if kind == "adpsgd" else Full(N)
    ctor, fixed = FEDERATED[kind]
    if kind not in NO_LOCAL_STEPS:
        extra.setdefault("local_steps", 2)
    method = ctor(lr, **fixed, **extra)
    return method, target, Full(N) if kind in EVERY_CLIENT else UniformSample(N, 10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--compiled", choices=("true", "false", "auto"), default="true")
    args = parser.parse_args()
    compiled = {"true": True, "false": False, "auto": "auto"}[args.compiled]
    warnings.simplefilter("ignore")
    problem = LeastSquares.random(N, 5, 5, seed=0)
    graph = nx.random_regular_graph(4, N, seed=0)
    one = between = batched = one_or_batched = 0
    kinds = [*FEDERATED, *DECENTRALIZED]
    for kind in kinds:
        method, target, participation = _setting(kind, problem, graph)
        plan = sm.explain(method, target, participation, rounds=6, compiled=compiled, seed=0)
        counts = [len(p.segments) for p in plan.rounds[1:]]
        # programs between barriers: a segment that mixes rows an earlier one of the round
        # writes must wait for all of them (Segment.waits)
        free = [sum(not s.waits for s in p.segments) for p in plan.rounds[1:]]
        text = str(plan)
        slow = "" if "slow paths: none" in text else "  (slow paths listed)"
        one += max(counts) <= 1
        between += max(counts) > 1 and max(free) <= 1
        kinds_of = sorted({s.kind for p in plan.rounds[1:] for s in p.segments})
        span = f"{min(counts)}-{max(counts)}"
        barriers = max(c - f for c, f in zip(counts, free, strict=True))
        cut = f" ({barriers} after a barrier)" if barriers else ""
        in_batch = plan.rounds[-1].source == "batch"  # (the run's steady rounds)
        batched += in_batch
        one_or_batched += in_batch or max(counts) <= 1
        batch = "; in batches" if in_batch else ""
        print(f"{kind:18s} segments a round {span}{cut}: {', '.join(kinds_of)}{slow}{batch}")
    print(f"{one} of {len(kinds)} methods: one program a round")
    print(f"{between} more: one program between the barriers of a round (mixing rows it wrote)")
    print(
        f"{batched} methods run their steady rounds in the compiled batches of the segment "
        f"loop (one program for many rounds); {one_or_batched} of {len(kinds)} run one "
        "program a round or fewer"
    )


if __name__ == "__main__":
    main()

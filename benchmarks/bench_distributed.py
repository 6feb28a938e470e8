"""The ``distributed`` backend: time per round on 1 and 2 gloo ranks, bytes per rank and
round (counted at the process group and in closed form), and a projection to 64 ranks
(issue 14).

FedAvg and FOCUS (two local steps) on a diagonal quadratic over N clients in d dimensions,
Bernoulli participation p = 0.1 (about 0.1 N participants a round), ``metrics=("distance",)``
(O(d)). For each number of ranks R the job is spawned (``torch.multiprocessing``, gloo on
127.0.0.1) and every rank runs the same ``stochmix.run(..., backend="distributed")``; the
script reports

* seconds per round (median over rounds after the first two, rank 0's clock);
* bytes one rank put into the process group per round and bytes it got out (the backend
  counts what each collective passes: ``DistributedBackend.traffic``), and the closed
  form (:func:`stochmix.engine.backends.distributed.closed_form_bytes`: one (outer rows, d)
  array in, R - 1 of them out, plus the 8-byte finiteness flag);
* the planning each rank repeats (every rank plans the whole round: O(participants)),
  timed on one rank by planning the same rounds again;
* the gloo all_gather on 2 ranks: latency (one number), the (outer rows, d) sums, and
  bandwidth (8 MB).

Projection to R ranks: ``plan + (round - plan) / R + comm(R)`` with ``comm(R) = (R - 1) *
(latency + piece / bandwidth) + log2(R) * latency`` (a ring all_gather of the sums and an
all-reduce of the flag), from the measured 1-rank round, planning, and 2-rank collective.
On this machine both ranks share its cores (and other work), so the 2-rank time measures
overhead, not speed-up.

Decentralized section: gradient tracking (DIGing, the CTA form: two whole-block mixing
products a round, x and y) over ``--dec-n`` nodes in ``--dec-dim`` dimensions (defaults
10^5 and 10) on a static ring (metropolis weights) and on the one-peer exponential graph
(hop 2^(k mod tau) at step k), every node a diagonal quadratic. Reported: seconds per
round on 1 and 2 ranks (and on the NumPy backend, one process), and the halo bytes one
rank sends and receives per round, counted at the process group and in closed form: per
product, the remote rows its rows of W read (2 on a ring, ``min(m, h) - max(0, m + h -
n)`` at hop h for a rank of m nodes: :func:`~stochmix.engine.backends.distributed.ring_halo_rows`,
:func:`~stochmix.engine.backends.distributed.shift_halo_rows`) times d times 8 bytes. The rest of a
round's traffic is the network average (one (1, d) all_gather) and the finiteness flag.

Run: ``.venv/bin/python benchmarks/bench_distributed.py`` (about a minute; ``--n``,
``--dim``, ``--rounds``, ``--dec-n``, ``--dec-dim``, ``--dec-rounds`` to change the sizes;
decentralized times are medians over the rounds after the graph's first period, whose
rounds build and check the period's matrices once). Writes
``benchmarks/results-distributed.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import socket
import tempfile
import time
from pathlib import Path

import numpy as np

OUT = Path(__file__).with_name("results-distributed.json")
METHODS = ("FedAvg", "FOCUS")


def _setup(n, dim):
    import stochmix as sm
    from stochmix.participation import Bernoulli
    from stochmix.problems import Quadratic

    problem = Quadratic.random(n, dim, seed=0)
    participation = Bernoulli(np.full(n, 0.1))
    methods = {name: getattr(sm.algorithms, name)(0.002, local_steps=2) for name in METHODS}
    return problem, participation, methods


def _worker(rank, size, port, args, out):
    import torch.distributed as dist

    import stochmix as sm
    from stochmix.engine.backends.distributed import DistributedBackend

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=size)  # fmt: skip
    problem, participation, methods = _setup(args.n, args.dim)
    found = {}
    for name, method in methods.items():
        back = DistributedBackend()
        before = back.traffic.snapshot()
        res = sm.run(method, problem, participation, args.rounds, seed=0, backend=back,
                     metrics=("distance",), progress=False)  # fmt: skip
        after = back.traffic.snapshot()
        sent, received, calls = (a - b for a, b in zip(after, before, strict=True))
        per_round = np.diff(res.wall_time)[2:]
        outer = _outer_rows(method, problem, participation)
        found[name] = {
            "seconds_per_round": float(np.median(per_round)),
            "sent_per_round": sent / args.rounds,
            "received_per_round": received / args.rounds,
            "collectives_per_round": calls / args.rounds,
            "outer_rows": outer,
            "server_digest": float(np.sum(res.server[-1] * np.arange(1, args.dim + 1))),
        }
    if size == 2:  # the collective alone
        piece = np.zeros((found["FOCUS"]["outer_rows"], args.dim))
        found["collective"] = _time_all_gather(back, piece)
    found["decentralized"] = {graph: _decentralized(graph, args) for graph in DECENTRALIZED_GRAPHS}
    if rank == 0:
        Path(out, f"{size}.json").write_text(json.dumps(found))
    dist.destroy_process_group()


DECENTRALIZED_GRAPHS = ("ring", "one-peer exponential")


def _graphs(graph: str, n: int):
    import networkx as nx

    import stochmix as sm

    if graph == "ring":
        return sm.mixing.StaticSequence(nx.cycle_graph(n)), "metropolis"
    return sm.mixing.OnePeerExponential(n), "row"


def _decentralized(graph: str, args) -> dict:
    """Gradient tracking on ``graph`` on this rank: time per round, halo bytes per round
    (measured and closed form, this rank's) and the final average's digest."""
    import stochmix as sm
    from stochmix.engine.backends.distributed import (
        DistributedBackend,
        ring_halo_rows,
        shift_halo_rows,
    )
    from stochmix.problems import Quadratic

    n, dim, rounds = args.dec_n, args.dec_dim, args.dec_rounds
    problem = Quadratic.random(n, dim, seed=0)
    sequence, rule = _graphs(graph, n)
    method = sm.algorithms.GradientTracking(0.05, sequence, rule=rule)
    back = DistributedBackend()
    res = sm.run(method, problem, sm.participation.Full(n), rounds, seed=0, backend=back,
                 metrics=("distance",), progress=False)  # fmt: skip
    halo = back.traffic.by_kind.get("halo", [0, 0, 0])
    m = back.shard.hi - back.shard.lo
    if back.size == 1:
        rows = 0
    elif graph == "ring":
        rows = rounds * ring_halo_rows(n, m)
    else:
        rows = sum(shift_halo_rows(n, m, -sequence.shift(r)) for r in range(rounds))
    closed = 2 * rows * dim * 8 / rounds  # two products (x and y) a round
    # steady state: the rounds after the graph's first period (whose rounds build, check
    # and plan each matrix of the period once)
    first = max(2, getattr(sequence, "period", 1) or 1)
    return {
        "seconds_per_round": float(np.median(np.diff(res.wall_time)[first:])),
        "first_period_seconds": float(res.wall_time[first]),
        "halo_sent_per_round": halo[0] / rounds,
        "halo_received_per_round": halo[1] / rounds,
        "halo_closed_form_per_round": closed,
        "sent_per_round": back.traffic.sent / rounds,
        "received_per_round": back.traffic.received / rounds,
        "collectives_per_round": back.traffic.calls / rounds,
        "plans_built": back.shard.plans_built,
        "distance": [float(res.distance[0]), float(res.distance[-1])],
        "average_digest": float(np.sum(res.server[-1] * np.arange(1, dim + 1))),
    }


def _outer_rows(method, problem, participation) -> int:
    """The aggregates of a round's node-local run (what each rank sends)."""
    import stochmix as sm
    from stochmix.engine.codegen.cache import program_for
    from stochmix.engine.model.layout import Layout
    from stochmix.engine.plan import round_plan

    n = problem.n_clients
    ctx = sm.RunContext(Layout(method.blocks(n)), n, problem.dim, participation.probabilities)
    method.start(ctx)
    phases = method.round_phases(0, np.arange(0, n, 7), ctx)
    plan = round_plan.plan_round(phases, sm.engine.NumpyBackend(), method, ctx)
    return sum(
        len(program_for(p.structure).outer_rows)
        for p in plan
        if isinstance(p, round_plan.LocalStep)
    )


def _time_all_gather(back, piece, repeats=200) -> dict:
    seconds = {}
    large = np.zeros(1 << 20)  # 8 MB: the bandwidth
    for array, key in ((np.zeros(1), "latency"), (piece, "piece"), (large, "large")):
        back.all_gather(array)
        times = 20 if array is large else repeats
        start = time.perf_counter()
        for _ in range(times):
            back.all_gather(array)
        seconds[key] = (time.perf_counter() - start) / times
    latency = seconds["latency"]
    bandwidth = large.nbytes / max(seconds["large"] - latency, 1e-9)
    return {"latency": latency, "piece_seconds": seconds["piece"], "bandwidth": bandwidth}


def _plan_seconds(args, name) -> float:
    """Seconds per round of planning alone (what every rank repeats), on one process."""
    import stochmix as sm
    from stochmix.engine.model.layout import Layout
    from stochmix.engine.plan.planner import RoundPlanner

    problem, participation, methods = _setup(args.n, args.dim)
    method = methods[name]
    n = problem.n_clients
    ctx = sm.RunContext(Layout(method.blocks(n)), n, problem.dim, participation.probabilities)
    method.start(ctx)
    planner = RoundPlanner(method, sm.engine.NumpyBackend(compiled=False), ctx)
    stream = participation.participants(0)
    rounds = [np.asarray(next(stream)) for _ in range(args.rounds)]
    start = time.perf_counter()
    for r, parts in enumerate(rounds):
        planner.plan(r, parts)
    return (time.perf_counter() - start) / len(rounds)


def _spawn(size, args, out):
    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_worker, args=(size, port, args, out), nprocs=size, join=True)
    return json.loads(Path(out, f"{size}.json").read_text())


def project(round_1: float, plan: float, collective: dict, piece_bytes: int, ranks: int) -> float:
    """Seconds per round on ``ranks`` ranks (see the module docstring)."""
    latency, bandwidth = collective["latency"], collective["bandwidth"]
    comm = (ranks - 1) * (latency + piece_bytes / bandwidth) + math.log2(ranks) * latency
    return plan + (round_1 - plan) / ranks + comm


def main() -> None:
    from stochmix.engine.backends.distributed import closed_form_bytes

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20000)
    parser.add_argument("--dim", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--dec-n", type=int, default=100000)
    parser.add_argument("--dec-dim", type=int, default=10)
    parser.add_argument("--dec-rounds", type=int, default=60)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out:
        found = {size: _spawn(size, args, out) for size in (1, 2)}
    collective = found[2].pop("collective")
    rows = []
    for name in METHODS:
        one, two = found[1][name], found[2][name]
        assert one["server_digest"] == two["server_digest"], "1 and 2 ranks differ"
        closed = closed_form_bytes(one["outer_rows"], args.dim, 2)
        plan = _plan_seconds(args, name)
        piece = one["outer_rows"] * args.dim * 8
        projected = {
            r: project(one["seconds_per_round"], plan, collective, piece, r)
            for r in (1, 2, 4, 8, 16, 32, 64)
        }
        rows.append({"method": name, "one": one, "two": two, "closed_form_2": closed,
                     "plan_seconds": plan, "projected_seconds": projected})  # fmt: skip
    print(f"N = {args.n}, d = {args.dim}, p = 0.1 ({args.n // 10} participants a round), "
          f"{args.rounds} rounds, {os.cpu_count()} cores shared by every rank")  # fmt: skip
    print(f"gloo all_gather on 2 ranks: latency {collective['latency'] * 1e6:.0f} us, "
          f"{collective['bandwidth'] / 1e9:.2f} GB/s")  # fmt: skip
    head = (f"{'method':8} {'ms/round 1':>10} {'ms/round 2':>10} {'plan ms':>8} "
            f"{'sent B':>8} {'recv B':>8} {'closed sent/recv':>17} {'coll/rd':>7}")  # fmt: skip
    print(head)
    for row in rows:
        one, two, closed = row["one"], row["two"], row["closed_form_2"]
        print(f"{row['method']:8} {one['seconds_per_round'] * 1e3:10.2f} "
              f"{two['seconds_per_round'] * 1e3:10.2f} {row['plan_seconds'] * 1e3:8.2f} "
              f"{two['sent_per_round']:8.0f} {two['received_per_round']:8.0f} "
              f"{closed['sent']:>8}/{closed['received']:<8} "
              f"{two['collectives_per_round']:7.1f}")  # fmt: skip
    print("projected ms/round (measured 1-rank compute / R + replicated planning + ring comm):")
    for row in rows:
        cells = "  ".join(f"R={r}: {t * 1e3:.2f}" for r, t in row["projected_seconds"].items())
        print(f"  {row['method']:8} {cells}")
    decentralized = _decentralized_table(found, args)
    OUT.write_text(json.dumps({"machine": platform.platform(), "cores": os.cpu_count(),
                               "n": args.n, "dim": args.dim, "rounds": args.rounds,
                               "collective": collective, "rows": rows,
                               "decentralized": decentralized}, indent=1))  # fmt: skip
    print(f"written {OUT}")


def _numpy_seconds(graph: str, args) -> float:
    """Seconds per round of the same gradient tracking run on the NumPy backend (one
    process, no torch.distributed), median after the graph's first period."""
    import stochmix as sm
    from stochmix.problems import Quadratic

    n = args.dec_n
    sequence, rule = _graphs(graph, n)
    method = sm.algorithms.GradientTracking(0.05, sequence, rule=rule)
    res = sm.run(method, Quadratic.random(n, args.dec_dim, seed=0), sm.participation.Full(n),
                 args.dec_rounds, seed=0, metrics=("distance",), progress=False)  # fmt: skip
    first = max(2, getattr(sequence, "period", 1) or 1)
    return float(np.median(np.diff(res.wall_time)[first:]))


def _decentralized_table(found: dict, args) -> dict:
    """Print and return the decentralized section (1 and 2 ranks, rank 0's counts)."""
    print(f"\ngradient tracking (CTA), n = {args.dec_n} nodes, d = {args.dec_dim}, "
          f"{args.dec_rounds} rounds (ms/round: median after the first period)")  # fmt: skip
    print(f"{'graph':22} {'numpy ms':>8} {'ms/round 1':>10} {'ms/round 2':>10} "
          f"{'halo sent B':>11} {'halo recv B':>11} {'closed form':>11} {'all B in/out':>13} "
          f"{'plans':>5}")  # fmt: skip
    out = {}
    for graph in DECENTRALIZED_GRAPHS:
        one, two = found[1]["decentralized"][graph], found[2]["decentralized"][graph]
        assert one["average_digest"] == two["average_digest"], "1 and 2 ranks differ"
        assert two["halo_received_per_round"] == two["halo_closed_form_per_round"]
        numpy = _numpy_seconds(graph, args)
        print(f"{graph:22} {numpy * 1e3:8.2f} {one['seconds_per_round'] * 1e3:10.2f} "
              f"{two['seconds_per_round'] * 1e3:10.2f} {two['halo_sent_per_round']:11.0f} "
              f"{two['halo_received_per_round']:11.0f} "
              f"{two['halo_closed_form_per_round']:11.0f} "
              f"{two['sent_per_round']:6.0f}/{two['received_per_round']:<6.0f} "
              f"{two['plans_built']:5d}")  # fmt: skip
        out[graph] = {"numpy_seconds_per_round": numpy, "one": one, "two": two}
    return out


if __name__ == "__main__":
    main()

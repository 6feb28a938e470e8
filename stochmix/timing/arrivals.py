r"""The arrival schedule of buffered asynchronous aggregation (FedBuff, FedAsync), as an
event simulation over the clients' time model.

``concurrency`` = C clients train at once. At time 0 C clients are drawn and pull the
server model (version 0). A task of client i with K_i local steps lasts
``latency + K_i * per_step`` seconds (:class:`~stochmix.timing.TimeModel`). Events:

* The tasks that finish at the earliest time t arrive together, in the order they were
  launched. Each arriving update joins the buffer with its staleness tau = (server
  version now) - (version its client pulled); when the buffer holds ``buffer`` = M
  updates the server applies them (a *round*: version + 1) and the buffer empties.
* Then, for each update that arrived at t, a new client is drawn and launched: it pulls
  the server model as it is now (after the flushes at t) and its version.
* A new client is drawn uniformly among the clients neither training nor waiting in the
  buffer (a client whose update waits is drawn again only once the server applied it).

With M = C and every task equally long, each round's C arrivals are the cohort that
pulled the previous round's model: synchronous FedAvg on those cohorts. The schedule
is exact event by event, and vectorized where it matters: one compiled loop (Numba,
where available) over the events, the random numbers drawn in blocks. Ties between equal
finish times are broken by launch order.

Round r's record (:class:`~stochmix.participation.Activation`) holds the clients whose
updates round r applies (``nodes``, sorted), their ``staleness`` and local ``steps``, the
clients ``launched`` after round r's update and before round r + 1's (they pull round
r's model), and the round's ``time``. Clients launched before round 0 pull the starting
point, which every client row already holds.
"""

from __future__ import annotations

import functools
from typing import no_type_check

import numpy as np

from .._validate import as_int
from ..engine.model.rowmap import map_generator
from ..participation._record import Activation

__all__ = [
    "ARRIVALS_LABEL",
    "arrival_records",
]

#: the label of the schedule's random stream among a run's streams
ARRIVALS_LABEL = "arrivals"
TASK_BLOCK = 1 << 14  # tasks whose random numbers are drawn at once


@no_type_check  # compiled by Numba: no runtime type checks wrapped around it
def _simulate(want, buffer, free, where, heap, slots, bufs, state, now, u, latency, per_step,
              steps, speeds, client_steps, out_client, out_stale, out_steps, out_time,
              launch_client, launch_version, launch_duration):  # fmt: skip
    """Advance the simulation until ``want`` rounds are out (or the task draws run out).

    ``slots`` (C, 5) int64: per training slot its task, client, pulled version and steps;
    ``now`` (C + 1,) float: each slot's finish time, the last entry the current time;
    ``heap`` (C,): the slots in flight as a binary heap by (finish time, task), those
    freed and waiting to be relaunched past its end; ``bufs`` (M, 3): the buffered
    arrivals (client, staleness, steps); ``free[:n_free]`` the clients that may be drawn,
    ``where`` their positions; ``state``: version, buffered, pending launches, next task,
    draws used, heap size, free clients, launches written. Returns the rounds written."""
    version, buffered, pending, task = state[0], state[1], state[2], state[3]
    used, h_size, n_free, launches = state[4], state[5], state[6], state[7]
    C = heap.size
    t = now[C]
    out = 0
    while True:
        if pending > 0:  # launch a client on a slot the last arrivals freed
            if used >= u.size:
                break  # more task draws needed
            slot = heap[h_size]
            pick = min(int(u[used] * n_free), n_free - 1)
            client = free[pick]
            last = free[n_free - 1]
            free[pick] = last
            where[last] = pick
            free[n_free - 1] = client
            where[client] = n_free - 1
            n_free -= 1
            k = steps[used] if client_steps.size == 0 else client_steps[client]
            speed = 1.0 if speeds.size == 0 else speeds[client]
            duration = latency[used] + k * per_step[used] * speed
            now[slot] = t + duration
            launch_duration[launches] = duration
            slots[slot, 0] = task
            slots[slot, 1] = client
            slots[slot, 2] = version
            slots[slot, 3] = k
            launch_client[launches] = client
            launch_version[launches] = version
            launches += 1
            task += 1
            used += 1
            pending -= 1
            i = h_size  # sift the slot up the heap
            h_size += 1
            while i > 0:
                parent = (i - 1) >> 1
                a = heap[parent]
                b = heap[i]
                if now[a] < now[b] or (now[a] == now[b] and slots[a, 0] < slots[b, 0]):
                    break
                heap[parent] = b
                heap[i] = a
                i = parent
            continue
        if out >= want:
            break
        # the tasks that finish first arrive together, in launch order
        t = now[heap[0]]
        while h_size > 0 and now[heap[0]] == t:
            slot = heap[0]
            h_size -= 1
            heap[0] = heap[h_size]
            heap[h_size] = slot  # freed: waits past the heap's end to be relaunched
            i = 0
            while True:  # sift the moved slot down
                child = 2 * i + 1
                if child >= h_size:
                    break
                right = child + 1
                if right < h_size:
                    a = heap[right]
                    b = heap[child]
                    if now[a] < now[b] or (now[a] == now[b] and slots[a, 0] < slots[b, 0]):
                        child = right
                a = heap[child]
                b = heap[i]
                if now[a] < now[b] or (now[a] == now[b] and slots[a, 0] < slots[b, 0]):
                    heap[child] = b
                    heap[i] = a
                    i = child
                else:
                    break
            pending += 1
            bufs[buffered, 0] = slots[slot, 1]
            bufs[buffered, 1] = version - slots[slot, 2]
            bufs[buffered, 2] = slots[slot, 3]
            buffered += 1
            if buffered == buffer:  # the server applies the buffer: one round
                out_time[out] = t
                for j in range(buffer):
                    c = bufs[j, 0]
                    out_client[out * buffer + j] = c
                    out_stale[out * buffer + j] = bufs[j, 1]
                    out_steps[out * buffer + j] = bufs[j, 2]
                    free[n_free] = c  # may be drawn again
                    where[c] = n_free
                    n_free += 1
                out += 1
                version += 1
                buffered = 0
    now[C] = t
    state[0], state[1], state[2], state[3] = version, buffered, pending, task
    state[4], state[5], state[6], state[7] = used, h_size, n_free, launches
    return out


@functools.cache
def _simulator():
    """The event loop, compiled by Numba where it is installed (imported on first use,
    so that importing stochmix does not load Numba); else the plain loop, which gives the
    same schedule."""
    try:
        import numba
    except ImportError:  # pragma: no cover
        return _simulate
    return numba.njit(cache=True, nogil=True)(_simulate)


def arrival_records(
    n_clients, concurrency, buffer, time_model, local_steps, seed, block=64, log=None
):
    """The rounds of an asynchronous run as :class:`~stochmix.participation.Activation`
    records (see the module docstring), forever.

    Args:
        n_clients: N.
        concurrency: C, the clients training at once (C + M <= N).
        buffer: M, the updates per round.
        time_model: the clients' :class:`~stochmix.timing.TimeModel`.
        local_steps: an int K, a :class:`~stochmix.algorithms.ClientSteps` (K_i per
            client) or a :class:`~stochmix.algorithms.RandomSteps` (drawn per task).
        seed: the run's seed (the draws use the label :data:`ARRIVALS_LABEL`).
        block: rounds simulated per compiled call.
        log: a list to which every launched task's ``(client, duration)`` is appended, in
            launch order (for a per-task replay of the schedule).
    """
    n = as_int(n_clients, "n_clients", minimum=1)
    C = as_int(concurrency, "concurrency", minimum=1)
    M = as_int(buffer, "buffer", minimum=1, maximum=C)
    if C + M > n + 1:
        raise ValueError(
            f"concurrency + buffer must be <= n_clients + 1 = {n + 1} (a launch needs a "
            f"client neither training nor buffered), got {C} + {M}"
        )
    time_model.check_clients(n)
    if hasattr(local_steps, "check_clients"):
        local_steps.check_clients(n)
    simulate = _simulator()
    rng = map_generator(seed, 0, ARRIVALS_LABEL)
    client_steps = np.zeros(0, np.int64)
    if hasattr(local_steps, "steps"):  # K_i per client
        client_steps = np.asarray(local_steps.steps, np.int64)
    speeds = np.zeros(0) if time_model.speeds is None else time_model.speeds
    free = np.arange(n, dtype=np.int64)
    where = np.arange(n, dtype=np.int64)
    heap = np.arange(C, dtype=np.int64)  # every slot freed: C launches at time 0
    slots = np.zeros((C, 4), np.int64)
    bufs = np.zeros((M, 3), np.int64)
    now = np.zeros(C + 1)
    state = np.array([0, 0, C, 0, 0, 0, n, 0], np.int64)

    def draws(count):
        u = rng.random(count)
        latency, per_step = time_model.draw(rng, count)
        if isinstance(local_steps, (int, np.integer)):
            k = np.full(count, int(local_steps), np.int64)
        elif client_steps.size:
            k = np.zeros(count, np.int64)
        else:
            k = local_steps.draw(rng, count)
        return u, latency, per_step, k

    u, latency, per_step, k = draws(max(TASK_BLOCK, 2 * C))
    rows = block + C // M + 2  # rounds one call may write (several may end at one instant)
    launched: dict[int, list] = {}  # version -> arrays of the clients launched pulling it
    waiting: list = []  # rounds whose launches are not all known yet
    r = 0
    while True:
        out_client = np.zeros(rows * M, np.int64)
        out_stale = np.zeros(rows * M, np.int64)
        out_steps = np.zeros(rows * M, np.int64)
        out_time = np.zeros(rows)
        launch_client = np.zeros(rows * M + C, np.int64)
        launch_version = np.zeros(rows * M + C, np.int64)
        launch_duration = np.zeros(rows * M + C)
        state[7] = 0
        done = 0
        while done < block:
            done += simulate(
                block - done, M, free, where, heap, slots, bufs, state, now, u, latency,
                per_step, k, speeds, client_steps, out_client[done * M :],
                out_stale[done * M :], out_steps[done * M :], out_time[done:], launch_client,
                launch_version, launch_duration,
            )  # fmt: skip
            if state[4] >= u.size:  # the block of task draws is spent: draw the next
                u, latency, per_step, k = draws(u.size)
                state[4] = 0
        count = int(state[7])
        if log is not None:
            log.extend(
                zip(launch_client[:count].tolist(), launch_duration[:count].tolist(), strict=True)
            )
        # launches come in time order, so their versions never decrease: one slice each
        versions = launch_version[:count]
        cuts = np.flatnonzero(np.diff(versions)) + 1
        for start, stop in zip(np.r_[0, cuts], np.r_[cuts, count], strict=True):
            if stop > start:
                launched.setdefault(int(versions[start]), []).append(launch_client[start:stop])
        for j in range(done):
            part = slice(j * M, (j + 1) * M)
            waiting.append((out_client[part], out_stale[part], out_steps[part], out_time[j]))
        # round r's record is complete once round r + 1 happened: its launches are known
        version = int(state[0])
        while waiting and r + 1 < version:
            clients, stale, steps, time = waiting.pop(0)
            order = np.argsort(clients, kind="stable")
            pulled = launched.pop(r + 1, [np.zeros(0, np.int64)])
            yield Activation(
                clients[order],
                time=float(time),
                steps=steps[order],
                staleness=stale[order],
                launched=np.sort(np.concatenate(pulled)),
            )
            r += 1

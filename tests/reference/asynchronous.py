"""Buffered and unbuffered asynchronous aggregation, as an event-driven simulation over
virtual time with a heap: FedBuff and FedAsync written per task.

References:

* FedBuff: J. Nguyen, K. Malik, H. Zhan, A. Yousefpour, M. Rabbat, M. Malek, D. Huba,
  "Federated learning with buffered asynchronous aggregation", AISTATS 2022
  (arXiv:2106.06639). Clients train from the model they pulled and send the change
  local - pulled; the server sums the (staleness-weighted) changes in a buffer and, once M
  of them are in, steps by the server learning rate times their mean, then empties the
  buffer.
* FedAsync: C. Xie, S. Koyejo, I. Gupta, "Asynchronous federated optimization"
  (arXiv:1903.03934). Every arrival mixes the server model with the local model,
  x <- (1 - alpha_t) x + alpha_t x_local with alpha_t = alpha * s(staleness). The paper's
  local solver minimises f_i plus a proximal term rho/2 ||x - x_pulled||^2; here rho = 0
  (plain local gradient steps).

Conventions (the same for both):

* Task j trains on client ``launches[j]``; it is in flight for ``durations[j]`` virtual
  seconds from its launch to its arrival. ``local_steps`` is K for every task, or one K
  per task. A task's local model is its pulled model after K steps
  x <- x - lr * grad f_i(x).
* At time 0 tasks 0..C-1 (C = ``concurrency``) launch and pull the server model, version 0.
* Then repeatedly: t = the earliest finish time in flight; every task finishing at exactly
  t is processed, in increasing task index. For each, staleness
  tau = (server version now) - (version it pulled), i.e. the number of server updates made
  since it pulled; an update computed on the latest model has tau = 0. Then one new task
  per arrival at t launches (next task indices, in order), after all arrivals at t and the
  server updates they caused, pulling the current server model and version; it finishes at
  t + durations[task]. A client may not have two tasks in flight at once.
* One iteration = one server update (version += 1). FedBuff: delta = s(tau) *
  (local - pulled) goes into the buffer; when it holds M = ``buffer`` deltas,
  x <- x + server_lr * (1/M) * sum(deltas). FedAsync: every arrival is an update.
* ``staleness``: None means s = 1; otherwise a callable tau -> float, e.g.
  :func:`constant`, :func:`polynomial`, :func:`hinge`.
* Returns (models, times) after ``rounds`` server updates: models (rounds + 1, dim) with
  x0 first, times (rounds + 1,) with 0 first, the virtual time of each server update.

Staleness functions, as defined in the FedAsync paper (there written s(t - tau) with t
the server epoch and tau the epoch of the pulled model):
constant s = 1; polynomial s_a = (staleness + 1)^(-a); hinge s_{a,b} = 1 for
staleness <= b, else 1 / (a (staleness - b) + 1). In the paper's Algorithm 1 the server's
epoch counter t is the index of the model being produced, so an update computed on the
latest model x_{t-1} is evaluated at t - tau = 1, whereas ``tau`` here is 0 for it; pass
``lambda tau: s(tau + 1)`` to use that numbering. For FedBuff the usual staleness weight
is the polynomial with a = 1/2, s(tau) = 1 / sqrt(1 + tau): pass ``polynomial(0.5)``.
"""

import heapq

import numpy as np


def constant():
    """s(tau) = 1."""
    return lambda tau: 1.0


def polynomial(a):
    """s(tau) = (tau + 1)^(-a)."""
    return lambda tau: float(tau + 1) ** (-a)


def hinge(a, b):
    """s(tau) = 1 if tau <= b, else 1 / (a (tau - b) + 1)."""

    def s(tau):
        if tau <= b:
            return 1.0
        return 1.0 / (a * (tau - b) + 1.0)

    return s


def _steps_of(local_steps, task):
    if np.ndim(local_steps) == 0:
        return int(local_steps)
    return int(local_steps[task])


def _local_model(problem, client, pulled, lr, k):
    x = np.array(pulled, dtype=float)
    for _ in range(k):
        x = x - lr * problem.gradients(np.array([client]), x[None, :])[0]
    return x


def _simulate(problem, x0, lr, local_steps, concurrency, launches, durations, rounds, on_arrival):
    """The event loop shared by both methods.

    ``on_arrival(x, pulled, local, tau)`` returns the new server model, or None when the
    arrival does not (yet) change it (a FedBuff buffer that is not full).
    """
    assert concurrency >= 1 and rounds >= 0
    x = np.array(x0, dtype=float)
    version = 0
    models = [x.copy()]
    times = [0.0]
    heap = []  # (finish time, task index)
    pulled_model = {}  # task -> model it pulled
    pulled_version = {}  # task -> server version it pulled
    in_flight = set()  # clients with a task in flight
    next_task = 0

    def launch(now):
        nonlocal next_task
        j = next_task
        if j >= len(launches):
            return  # no tasks left to launch: fewer in flight from now on
        client = int(launches[j])
        assert client not in in_flight, f"client {client} launched while already in flight"
        in_flight.add(client)
        pulled_model[j] = x.copy()
        pulled_version[j] = version
        heapq.heappush(heap, (now + float(durations[j]), j))
        next_task += 1

    for _ in range(concurrency):
        launch(0.0)

    while version < rounds:
        assert heap, "no task in flight before the requested number of server updates"
        t = heap[0][0]
        arrived = []
        while heap and heap[0][0] == t:
            arrived.append(heapq.heappop(heap)[1])
        arrived.sort()  # the heap already yields equal times by task index; be explicit
        for j in arrived:
            client = int(launches[j])
            in_flight.remove(client)
            pulled = pulled_model.pop(j)
            local = _local_model(problem, client, pulled, lr, _steps_of(local_steps, j))
            tau = version - pulled_version.pop(j)
            new_x = on_arrival(x, pulled, local, tau)
            if new_x is not None:
                x = new_x
                version += 1
                models.append(x.copy())
                times.append(t)
                if version == rounds:
                    break
        if version == rounds:
            break
        for _ in arrived:
            launch(t)
    return np.array(models), np.array(times)


def fedbuff(
    problem,
    x0,
    lr,
    local_steps,
    server_lr,
    buffer,
    concurrency,
    launches,
    durations,
    rounds,
    staleness=None,
):
    """FedBuff: returns (models (rounds + 1, dim), times (rounds + 1,))."""
    s = staleness if staleness is not None else constant()
    assert buffer >= 1
    deltas = []

    def on_arrival(x, pulled, local, tau):
        deltas.append(s(tau) * (local - pulled))
        if len(deltas) < buffer:
            return None
        total = np.zeros_like(x)
        for delta in deltas:
            total += delta
        deltas.clear()
        return x + server_lr * total / buffer

    return _simulate(
        problem, x0, lr, local_steps, concurrency, launches, durations, rounds, on_arrival
    )


def fedasync(
    problem,
    x0,
    lr,
    local_steps,
    alpha,
    concurrency,
    launches,
    durations,
    rounds,
    staleness=None,
):
    """FedAsync: returns (models (rounds + 1, dim), times (rounds + 1,))."""
    s = staleness if staleness is not None else constant()

    def on_arrival(x, pulled, local, tau):
        a = alpha * s(tau)
        return (1.0 - a) * x + a * local

    return _simulate(
        problem, x0, lr, local_steps, concurrency, launches, durations, rounds, on_arrival
    )

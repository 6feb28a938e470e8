"""Baselines the engine is measured against.

Everything here is plain NumPy, written against the problem's data arrays, never against
``stochmix`` internals:

* ``Loop*`` — per-client loops the way research code is written: a Python loop over the
  round's participants, each copying the server model and doing its K local steps with
  NumPy on its own d-vector (FOCUS keeps each client's last gradient, as in the authors'
  Algorithm 1 and in ``tests/reference/focus.py``).
* ``Kernel*`` — hand-written batched NumPy kernels of one round for the diagonal quadratic
  F_i(x) = 1/2 (x - z_i)^T diag(h_i) (x - z_i): gather the participants' rows, K vectorized
  local steps, aggregate. Written for speed: preallocated buffers, in-place ufuncs, and the
  participants processed in chunks whose working set fits in cache (``chunk_bytes``; the
  best value is measured by ``tune_chunk`` — chunking pays at d = 100 and d = 1000).
  FOCUS keeps its tracker and gradient memories ``Y`` and ``G`` as (N, d) arrays and
  gathers / scatters the participants' rows of both every round.
* ``ls_gradients`` — the least-squares gradients of a set of clients in one batched call
  (gather the clients' A_i, b_i and two batched contractions), the floor for a round whose
  cost is its gradients.

Every baseline advances with ``round(participants)`` and exposes the server model as
``.server``; ``run_masks`` feeds one the masks of a participation process exactly as
``stochmix.run`` does (``process.masks(seed)``, one mask per round), so the two can be
compared row by row (:func:`check_against_engine`).
"""

from __future__ import annotations

import time

import numpy as np

import stochmix as sm
from stochmix.algorithms import FOCUS, FedAvg

# ---------------------------------------------------------------------------- problems


class DiagQuadData:
    """The arrays of a diagonal quadratic: ``centers`` Z (N, d), ``hessians`` H (N, d)."""

    kind = "quadratic"

    def __init__(self, problem):
        self.centers = np.ascontiguousarray(problem.centers)
        self.hessians = np.ascontiguousarray(problem.hessians)
        if self.hessians.shape != self.centers.shape:
            raise ValueError("DiagQuadData needs a diagonal quadratic")
        self.n, self.dim = self.centers.shape

    def grad(self, i, x):
        """grad F_i(x) for one client (research-code style)."""
        return self.hessians[i] * (x - self.centers[i])


class LeastSquaresData:
    """Least squares with every client holding ``rows`` rows: A (N, rows, d), b (N, rows).

    ``problem()`` builds the matching :class:`stochmix.problems.LeastSquares`.
    """

    kind = "least_squares"

    def __init__(self, n_clients, dim, rows, seed=0, noise=0.1, heterogeneity=1.0):
        rng = np.random.default_rng(seed)
        self.n, self.dim, self.rows = int(n_clients), int(dim), int(rows)
        truth = rng.standard_normal(dim) + heterogeneity * rng.standard_normal((n_clients, dim))
        self.a = rng.standard_normal((n_clients, rows, dim))
        self.b = np.einsum("nkd,nd->nk", self.a, truth)
        self.b += noise * rng.standard_normal((n_clients, rows))

    def problem(self):
        return sm.problems.LeastSquares(self.a, self.b)

    def grad(self, i, x):
        """grad F_i(x) = A_i^T (A_i x - b_i) for one client (research-code style)."""
        a = self.a[i]
        return a.T @ (a @ x - self.b[i])


def ls_gradients(a, b, clients, points, chunk=32):
    """All of ``clients``' least-squares gradients in one batched call.

    Row t is A_c^T (A_c x_t - b_c) with c = clients[t]; ``a`` (N, n, d), ``b`` (N, n),
    ``points`` (m, d). Gathers the clients' data and does two batched matrix-vector
    products, ``chunk`` clients at a time so that the gathered A_c stay in cache (32 was
    the fastest of 8..128 and of no chunking, for n = 50, d = 100; batched ``matmul`` beat
    ``einsum`` there).
    """
    out = np.empty(points.shape)
    for s in range(0, clients.size, chunk):
        c = clients[s : s + chunk]
        ac = np.take(a, c, axis=0)
        r = np.matmul(ac, points[s : s + chunk, :, None])[:, :, 0]
        r -= np.take(b, c, axis=0)
        out[s : s + chunk] = np.matmul(r[:, None, :], ac)[:, 0, :]
    return out


# ---------------------------------------------------------------------------- per-client loops


class LoopFedAvg:
    """FedAvg, one participant at a time (uniform weights, server step ``server_lr``)."""

    def __init__(self, data, lr, local_steps, x0=None, server_lr=1.0):
        self.data, self.lr, self.k, self.eta = data, lr, local_steps, server_lr
        self.server = np.zeros(data.dim) if x0 is None else np.array(x0, dtype=float)

    def round(self, participants):
        if len(participants) == 0:
            return
        total = np.zeros_like(self.server)
        for i in participants:
            x = self.server.copy()
            for _ in range(self.k):
                x = x - self.lr * self.data.grad(i, x)
            total += x
        self.server = self.server + self.eta * (total / len(participants) - self.server)


class LoopFOCUS:
    """FOCUS per client, following the authors' Algorithm 1 (and tests/reference/focus.py):
    each client keeps the gradient it computed last; the server keeps x and its tracker y."""

    def __init__(self, data, lr, local_steps, x0=None):
        self.data, self.lr, self.k = data, lr, local_steps
        self.server = np.zeros(data.dim) if x0 is None else np.array(x0, dtype=float)
        self.tracker = np.zeros(data.dim)
        self.stored = np.zeros((data.n, data.dim))  # row i: client i's last gradient

    def round(self, participants):
        for i in participants:
            x = self.server.copy()
            y = np.zeros_like(x)
            for k in range(self.k):
                if k > 0:
                    x = x - self.lr * y
                g = self.data.grad(i, x)
                y = y + g - self.stored[i]
                self.stored[i] = g
            self.tracker = self.tracker + y
        self.server = self.server - self.lr * self.tracker


# ---------------------------------------------------------------------------- batched kernels

DEFAULT_CHUNK_BYTES = 1 << 18


def _chunk_rows(chunk_bytes, dim, arrays):
    if not chunk_bytes:
        return None
    return max(8, int(chunk_bytes) // (8 * dim * arrays))


class KernelFedAvg:
    """One FedAvg round on a diagonal quadratic, hand-vectorized.

    Per chunk of participants: gather h and z, start every row at the server model, K
    steps ``x -= lr * h * (x - z)`` in place, add the rows up. Client models are not
    stored (FedAvg overwrites them at the next pull), so this is the least a round can do.
    """

    arrays = 4  # h, z, x, tmp

    def __init__(
        self,
        data: DiagQuadData,
        lr,
        local_steps,
        x0=None,
        server_lr=1.0,
        chunk_bytes=DEFAULT_CHUNK_BYTES,
    ):
        self.h, self.z = data.hessians, data.centers
        self.lr, self.k, self.eta = float(lr), int(local_steps), float(server_lr)
        self.dim = data.dim
        self.server = np.zeros(data.dim) if x0 is None else np.array(x0, dtype=float)
        self.set_chunk(chunk_bytes)

    def set_chunk(self, chunk_bytes):
        self.chunk_bytes = chunk_bytes
        self.chunk = _chunk_rows(chunk_bytes, self.dim, self.arrays)
        self._bufs = {}

    def _buffers(self, rows):
        buf = self._bufs.get(rows)
        if buf is None:
            buf = self._bufs[rows] = tuple(np.empty((rows, self.dim)) for _ in range(self.arrays))
        return buf

    def round(self, participants):
        m = participants.size
        if m == 0:
            return
        step = self.chunk or m
        hb, zb, xb, tb = self._buffers(min(step, m))
        acc = np.zeros(self.dim)
        lr = self.lr
        for lo in range(0, m, step):
            idx = participants[lo : lo + step]
            c = idx.size
            h, z, x, t = hb[:c], zb[:c], xb[:c], tb[:c]
            np.take(self.h, idx, axis=0, out=h)
            np.take(self.z, idx, axis=0, out=z)
            h *= lr  # lr * h once per round instead of once per step
            x[...] = self.server
            for _ in range(self.k):
                np.subtract(x, z, out=t)
                t *= h
                x -= t
            acc += x.sum(axis=0)
        self.server += self.eta * (acc / m - self.server)


class KernelFOCUS:
    """One FOCUS round on a diagonal quadratic, hand-vectorized, with the clients' tracker
    and gradient memories as (N, d) arrays ``Y`` and ``G``.

    Per chunk of participants: gather h, z, y, g; x = server model; K times
    (x -= lr y after the first), grad = h (x - z), y += grad - g, g = grad; add y into the
    server tracker; scatter g back and zero the participants' y (collect). Then
    x_0 -= lr y_0.
    """

    arrays = 6  # h, z, y, g, x, tmp

    def __init__(
        self, data: DiagQuadData, lr, local_steps, x0=None, chunk_bytes=DEFAULT_CHUNK_BYTES
    ):
        self.h, self.z = data.hessians, data.centers
        self.lr, self.k = float(lr), int(local_steps)
        self.dim = data.dim
        self.server = np.zeros(data.dim) if x0 is None else np.array(x0, dtype=float)
        self.tracker = np.zeros(data.dim)
        self.Y = np.zeros((data.n, data.dim))
        self.G = np.zeros((data.n, data.dim))
        self.set_chunk(chunk_bytes)

    set_chunk = KernelFedAvg.set_chunk
    _buffers = KernelFedAvg._buffers

    def round(self, participants):
        m = participants.size
        lr = self.lr
        if m:
            step = self.chunk or m
            hb, zb, yb, gb, xb, tb = self._buffers(min(step, m))
            for lo in range(0, m, step):
                idx = participants[lo : lo + step]
                c = idx.size
                h, z, y, g, x, t = hb[:c], zb[:c], yb[:c], gb[:c], xb[:c], tb[:c]
                np.take(self.h, idx, axis=0, out=h)
                np.take(self.z, idx, axis=0, out=z)
                np.take(self.Y, idx, axis=0, out=y)
                np.take(self.G, idx, axis=0, out=g)
                x[...] = self.server
                for k in range(self.k):
                    if k:
                        np.multiply(y, lr, out=t)
                        x -= t
                    np.subtract(x, z, out=t)
                    t *= h  # t = grad
                    y += t
                    y -= g
                    g, t = t, g  # g <- grad without a copy
                self.tracker += y.sum(axis=0)
                self.G[idx] = g
                self.Y[idx] = 0.0
        self.server -= lr * self.tracker


class KernelFOCUSNoY(KernelFOCUS):
    """KernelFOCUS without the (N, d) tracker memory: a client's tracker is zero at the
    start of every participation (collect empties it), so a specialised kernel can drop
    ``Y``. Reported for information only; the target compares against :class:`KernelFOCUS`."""

    arrays = 6

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.Y = None

    def round(self, participants):
        m = participants.size
        lr = self.lr
        if m:
            step = self.chunk or m
            hb, zb, yb, gb, xb, tb = self._buffers(min(step, m))
            for lo in range(0, m, step):
                idx = participants[lo : lo + step]
                c = idx.size
                h, z, y, g, x, t = hb[:c], zb[:c], yb[:c], gb[:c], xb[:c], tb[:c]
                np.take(self.h, idx, axis=0, out=h)
                np.take(self.z, idx, axis=0, out=z)
                np.take(self.G, idx, axis=0, out=g)
                y[...] = 0.0
                x[...] = self.server
                for k in range(self.k):
                    if k:
                        np.multiply(y, lr, out=t)
                        x -= t
                    np.subtract(x, z, out=t)
                    t *= h
                    y += t
                    y -= g
                    g, t = t, g
                self.tracker += y.sum(axis=0)
                self.G[idx] = g
        self.server -= lr * self.tracker


# ---------------------------------------------------------------------------- drivers


def run_masks(baseline, process, seed, rounds, record=False, x_star=None, warmup=0):
    """Advance ``baseline`` through ``warmup + rounds`` masks of ``process.masks(seed)``.

    Mask drawing and ``np.flatnonzero`` are included, as in the engine's loop. The first
    ``warmup`` rounds are not timed (first touches of fresh buffers). Returns
    (seconds of the timed rounds, servers or None, distances or None).
    """
    masks = process.masks(seed)
    servers = [baseline.server.copy()] if record else None
    dist = [] if x_star is not None else None
    if dist is not None:
        dist.append(np.linalg.norm(baseline.server - x_star))
    t0 = time.perf_counter()
    for r in range(warmup + rounds):
        if r == warmup:
            t0 = time.perf_counter()
        baseline.round(np.flatnonzero(next(masks)))
        if record:
            servers.append(baseline.server.copy())
        if dist is not None:
            dist.append(np.linalg.norm(baseline.server - x_star))
    seconds = time.perf_counter() - t0
    return seconds, (np.array(servers) if record else None), (np.array(dist) if dist else None)


def engine_method(name, lr, local_steps):
    return FedAvg(lr, local_steps) if name == "FedAvg" else FOCUS(lr, local_steps)


def check_against_engine(
    baseline, method, problem, process, seed, rounds=4, rtol=1e-9, backend="numpy"
):
    """Largest |baseline - engine| over the server trajectories of ``rounds`` rounds,
    relative to the largest change of the engine's server model over those rounds; raises
    AssertionError above ``rtol``."""
    res = sm.run(
        method, problem, process, rounds, seed=seed, metrics=(), progress=False, backend=backend
    )
    _, servers, _ = run_masks(baseline, process, seed, rounds, record=True)
    # relative to how far the engine's server model moved, so a slow method is checked too
    scale = float(np.abs(res.server - res.server[0]).max()) or 1.0
    err = float(np.abs(servers - res.server).max()) / scale
    if not err <= rtol:
        raise AssertionError(
            f"{type(baseline).__name__} differs from stochmix.run({method!r}) by {err:.3g} "
            f"(relative) over {rounds} rounds"
        )
    return err


def tune_chunk(make, process, seed, rounds=3, candidates=(None, 1 << 16, 1 << 18, 1 << 20)):
    """The ``chunk_bytes`` among ``candidates`` with the fastest rounds (min of 2 tries)."""
    best, best_t = None, np.inf
    timings = {}
    for cb in candidates:
        t = min(run_masks(make(cb), process, seed, rounds)[0] for _ in range(2))
        timings[cb] = t
        if t < best_t:
            best, best_t = cb, t
    return best, timings


# ---------------------------------------------------------------------------- floors


def read_floor(arrays, runs, threads=2, ahead=16):
    """Seconds per round to read every participant's row of each of ``arrays`` (N, d) and
    nothing else: a Numba loop over the participants in ``threads`` parts that sums the
    rows, asking for the rows ``ahead`` participants on as the engine's compiled loop does
    (``stochmix.engine.codegen.rowwise.AHEAD``; 0: no prefetching), timed like the engine (``runs``
    is a list of runs, each a list of per-round participant arrays never read before; the
    minimum over runs of the mean time per round). The least any round that needs those
    bytes can take. None without Numba."""
    try:
        import numba

        from stochmix._compiled import prefetch_read
    except ImportError:
        return None

    @numba.njit(parallel=True, nogil=True)
    def read(a, b, idx, parts, out):
        m = idx.shape[0]
        for p in numba.prange(parts):
            total = 0.0
            hi = m * (p + 1) // parts
            for t in range(m * p // parts, hi):
                if ahead and t + ahead < hi:
                    prefetch_read(a, idx[t + ahead])
                    prefetch_read(b, idx[t + ahead])
                i = idx[t]
                for j in range(a.shape[1]):
                    total += a[i, j] + b[i, j]
            out[p] += total

    if len(arrays) % 2:
        arrays = [*arrays, arrays[-1]]
    out = np.zeros(threads)
    pairs = [(arrays[k], arrays[k + 1]) for k in range(0, len(arrays), 2)]
    read(pairs[0][0], pairs[0][1], runs[0][0][:8], threads, out)  # compile
    best = np.inf
    for rounds in runs:
        t0 = time.perf_counter()
        for participants in rounds:
            for a, b in pairs:
                read(a, b, participants, threads, out)
        best = min(best, (time.perf_counter() - t0) / len(rounds))
    return best

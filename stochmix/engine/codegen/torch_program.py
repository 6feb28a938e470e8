"""Runs of node-local phases compiled to straight-line Torch code (any device).

The Torch dialect of :class:`~stochmix.engine.codegen.program.LocalProgram`: the same plan (which
buffer holds which block after each phase, what is done in place, what must be checked
for NaN and Inf), written as Torch calls on preallocated device buffers:

* gather: ``torch.index_select(z, 0, rows, out=buffer)``;
* arithmetic in place (``mul_``, ``add_``, ``sub_``, ``copy_``, ``addcmul_``; a
  coefficient per node is a ``(c, 1)`` column tensor, a single row of the state a
  zero-copy ``expand`` of its snapshot);
* reductions into outer rows: ``acc[row].addmv_(buffer.t(), weights)``;
* scatter: ``z.index_copy_(0, rows, buffer)``.

Nothing in a run reads a value back to the host. NaN and Inf are caught the way the NumPy
program catches them (column sums of every value that must be checked carry a NaN or Inf
on), but the sums are added into one device vector, the *round flag*, that the backend
reads once when the round ends
(:meth:`~stochmix.engine.backends.torch_backend.TorchBackend.end_round`):
one host synchronisation per round instead of one per phase. A program used on its own
(no flag given) reads its flag when the run ends.

On the CPU the nodes are processed in chunks of :data:`CPU_BUFFER_BYTES` working set
(larger than the NumPy program's: a Torch call costs a few microseconds, a NumPy call one);
on other devices in one chunk. The generated code names no device: the same program runs
on the CPU and on CUDA.

The rest of a round is the NumPy program's chunk runtime
(:class:`~stochmix.engine.codegen.chunks.ChunkRuntime`): the same snapshot, chunk sizes,
node rows, and finish (outer rows from their sums and the snapshot, then the tail), with
the tensor operations of :class:`TorchRows`. Only the chunk loop is Torch's own: it passes
device buffers, the round flag and the row movers, on one thread.

Arithmetic is the NumPy program's up to rounding: ``out += c * src`` is one ``add_`` with
``alpha`` (which may fuse the multiply-add) and sums over nodes are matrix-vector products,
so the two backends agree to rounding, not bit for bit.
"""

from __future__ import annotations

import threading

import numpy as np

from ..model.kernels import KERNELS
from ..model.phase import LocalForm
from .chunks import MIN_CHUNK_ROWS, RowOps
from .program import LocalProgram, ProgramCache
from .tensors import to_tensor

# A chunk's working set on the CPU (buffers + gathered problem data). Measured at d = 10
# and 100, N = 10^5 and 10^6 (FedAvg, FOCUS): 1 MB chunks pay Torch's per-call overhead
# too often; 8 MB and whole rounds were within noise of 4 MB.
CPU_BUFFER_BYTES = 1 << 22


class TorchProgram(LocalProgram):
    """One run structure as Torch code; see the module docstring.

    Args:
        forms: the run's local forms, in order.
        model_block: where gradients are taken.
        tail: how many of the last forms only set single rows from single rows.
    """

    chunk_budget = CPU_BUFFER_BYTES  # on the CPU; other devices run a round in one chunk

    def __init__(
        self,
        forms: list[LocalForm],
        model_block: str,
        tail: int = 0,
        *,
        zero: frozenset = frozenset(),
        scratch: frozenset = frozenset(),
        levels: tuple = (),
    ):
        import torch

        self.torch = torch
        super().__init__(forms, model_block, tail, zero=zero, scratch=scratch, levels=levels)
        self._local_buffers = threading.local()

    def _compile(self, source: str):
        namespace = {
            "torch": self.torch,
            **{f"K_{k}": kernel.torch for k, kernel in KERNELS.items()},
        }
        exec(compile(source, f"<stochmix torch program {id(self):x}>", "exec"), namespace)
        return namespace["chunk"]

    # ------------------------------------------------------------------ Torch statements
    def _finish(self, w, stores, check) -> str:
        for slot, var in stores:  # var: the buffer's name (None: the rows become zero)
            if var is None:
                w.emit(f"clear(z, r{slot})")
            else:
                w.emit(f"scatter(z, r{slot}, {str(var)})")
        for var in check:
            w.emit(f"chk.addmv_({var}.t(), ones)")
        head = self._chunk_head(w, CHUNK_PARAMETERS)
        for k, row in enumerate(self.singles):
            head.append(f"    S{k} = snap[{row}].expand(c, -1)")
        return "\n".join(head + w.lines) + "\n"

    def _gather(self, w, var: str, slot: int) -> None:
        w.emit(f"gather({self._gathered_from(slot)}, r{slot}, {var})")

    def _gradient(self, w, x: str | None) -> None:
        w.emit(f"g = grad_fn({x if x is not None else 'torch.zeros_like(tmp)'})")

    def _reduce(self, w, row: int, src: str, kind: str, slot: int) -> None:
        if kind == "array":
            w.vectors.add(slot)
            w.emit(f"acc[{row}].addmv_({src}.t(), v{slot})")
        elif kind == "one":
            w.emit(f"acc[{row}].addmv_({src}.t(), ones)")
        else:
            w.emit(f"acc[{row}].addmv_({src}.t(), ones, alpha=co[{slot}])")

    def _check(self, w, var: str) -> None:
        w.emit(f"chk.addmv_({var}.t(), ones)")

    def _single(self, row: int) -> str:
        return f"S{self.singles.index(row)}"

    def _coef(self, w, kind: str, slot: int) -> str:
        if kind == "array":
            w.columns.add(slot)
            return f"a{slot}"
        return f"co[{slot}]"

    def _zero(self, w, out: str) -> None:
        w.emit(f"{out}.zero_()")

    def _negate(self, w, out: str) -> None:
        w.emit(f"{out}.neg_()")

    def _scale(self, w, out: str, c: str) -> None:
        w.emit(f"{out}.mul_({c})")

    def _copy(self, w, out: str, src: str) -> None:
        w.emit(f"{out}.copy_({src})")

    def _multiply(self, w, out: str, src: str, c: str) -> None:
        w.emit(f"torch.mul({src}, {c}, out={out})")

    def _add(self, w, out: str, src: str) -> None:
        w.emit(f"{out}.add_({src})")

    def _subtract(self, w, out: str, src: str) -> None:
        w.emit(f"{out}.sub_({src})")

    def _add_scaled(self, w, out: str, src: str, c: str, scratch: str) -> None:
        if c.startswith("a"):  # a (c, 1) column of per-node coefficients
            w.emit(f"{out}.addcmul_({src}, {c})")
        else:
            w.emit(f"{out}.add_({src}, alpha={c})")

    def _kernel(self, w, out: str, sources: list, name: str, coefs: list) -> None:
        w.emit(f"K_{name}(torch, {', '.join(map(str, [*sources, *coefs]))}, out={out}, tmp=tmp)")

    # ------------------------------------------------------------------ execution
    def _buffer_set(self, rows: int, d: int, dtype, worker=0) -> dict:
        """The calling thread's buffers for at least ``rows`` rows of ``d`` entries of
        ``dtype`` on ``worker`` (a device); grown (by a quarter more) when too small."""
        own: dict = self._local_buffers.__dict__  # (d, dtype, worker) -> buffers
        key = (d, dtype, worker)
        bufs = own.get(key)
        if bufs is None or bufs["rows"] < rows:
            if len(own) > 8:
                own.clear()
            t = self.torch
            cap = max(rows, MIN_CHUNK_ROWS) if bufs is None else max(rows, bufs["rows"] * 5 // 4)
            bufs = {
                "rows": cap,
                "blocks": [
                    t.empty((cap, d), dtype=dtype, device=worker)
                    for _ in range(2 * len(self.blocks))
                ],
                "tmp": t.empty((cap, d), dtype=dtype, device=worker),
                "ones": t.ones(cap, dtype=dtype, device=worker),
            }
            own[key] = bufs
        return bufs

    def run(
        self,
        z,
        nodes,
        layout,
        coefs: tuple,
        clients,
        bind,
        data_per_row: int,
        workers: int = 1,
        whole: bool = False,
        extents: tuple = (),
        flag=None,
        views: tuple = (),
        products: tuple = (),
    ) -> bool:
        """Apply the run to the tensor ``z`` in place (see
        :meth:`LocalProgram.run <stochmix.engine.codegen.program.LocalProgram.run>`). The column
        sums of every value to check are added into ``flag`` (a device vector of ``d``
        entries) and True is returned; without a ``flag`` the run reads its own and
        returns False if a written entry is not finite. ``workers`` is ignored: Torch
        spreads each call over its own threads."""
        t = self.torch
        d, dtype, device = z.shape[1], z.dtype, z.device
        own_flag = flag is None
        if own_flag:
            flag = t.zeros(d, dtype=dtype, device=device)
        ops = TorchRows(t, flag)
        snap = self.snapshot(z, ops=ops)
        acc = ops.sums(z, self.outer_rows)
        co = tuple(
            c
            if type(c) is float
            else float(c)
            if np.ndim(c) == 0
            else to_tensor(t, c, device, dtype)
            for c in coefs
        )
        cpu = device.type == "cpu"
        if nodes.size:
            size = nodes.size
            step, _ = self._split(size, d, z.element_size(), data_per_row, 1, whole or not cpu)
            io = _cpu_io(z) if cpu else _TORCH_IO
            index = nodes if cpu else to_tensor(t, nodes, device)
            if cpu and self.needs_gradients and _is_bind_clients(bind):
                bind = _through_numpy(bind, t)
            rows = self.node_rows(index, layout, views, products)
            bufs = self._buffer_set(min(step, size), d, dtype, device)
            blocks, tmp, ones = bufs["blocks"], bufs["tmp"], bufs["ones"]
            for lo, hi in self._bounds(size, step, extents):
                grad_fn = bind(clients[lo:hi], z) if self.needs_gradients else None
                on = tuple(hi <= e for e in extents)
                self._function(
                    z, rows, lo, hi, hi - lo, co, blocks, tmp, ones, grad_fn, snap, acc, flag,
                    *io, on, rows.products,
                )  # fmt: skip
        self._settle(z, acc, snap, co, None, ops)
        if own_flag:
            return bool(t.isfinite(flag).all())
        return True


class TorchRows(RowOps):
    """The row operations of :meth:`~stochmix.engine.codegen.chunks.ChunkRuntime.finish`
    and the snapshot on tensors, for one run: the outer rows' sums are rows of one device
    matrix, and finiteness is added into the run's ``flag`` (read once a round) instead of
    being read back, so both checks return True."""

    def __init__(self, torch, flag):
        self.torch, self.flag = torch, flag

    def copy(self, row):
        return row.clone()

    def sums(self, z, rows) -> dict:
        block = self.torch.zeros((len(rows), z.shape[1]), dtype=z.dtype, device=z.device)
        return {r: block[k] for k, r in enumerate(rows)}

    def zeros(self, z):
        return self.torch.zeros(z.shape[1], dtype=z.dtype, device=z.device)

    def put(self, z, row: int, value) -> None:
        z[row].copy_(value)

    def add_scaled(self, out, src, c) -> None:
        out.add_(src, alpha=c)

    def kernel(self, name: str, row, params: list, more=()):
        out, tmp = self.torch.empty_like(row), self.torch.empty_like(row)
        KERNELS[name].torch(self.torch, row, *more, *params, out=out, tmp=tmp)
        return out

    def rows_finite(self, z, rows: list) -> bool:
        for r in rows:
            self.flag.add_(z[r])
        return True

    def finite(self, value) -> bool:
        self.flag.add_(value)
        return True


CHUNK_PARAMETERS = (
    "z", "rows", "lo", "hi", "c", "co", "B", "tmp_full", "ones_full", "grad_fn", "snap",
    "acc", "chk", "gather", "scatter", "clear", "on", "P",
)  # fmt: skip
"""The arguments of a generated chunk function: the state, the rows of the run's nodes
per block slot (a NumPy array on the CPU, a device tensor elsewhere), the chunk
``nodes[lo:hi]`` of ``c`` rows, the coefficient values (numbers, or device tensors per
node), the buffers, the gradient function, the snapshots of single rows (row -> tensor),
the outer rows' sums (row -> vector), the round flag, and the three row movers
``gather(z, rows, out)``, ``scatter(z, rows, value)`` and ``clear(z, rows)`` of the device
(see :func:`_cpu_io`), per extent of the run whether the chunk lies inside it, and the
run's mixing products (one row per node of the run)."""


def _index_select(z, rows, out):
    _torch().index_select(z, 0, rows, out=out)


def _index_copy(z, rows, value):
    z.index_copy_(0, rows, value)


def _index_fill(z, rows):
    z.index_fill_(0, rows, 0.0)


_TORCH_IO = (_index_select, _index_copy, _index_fill)


def _torch():
    import torch

    return torch


def _cpu_io(z) -> tuple:
    """The row movers on the CPU, through NumPy views of the tensors' memory (shared, no
    copy): ``np.take`` gathers rows about 3x faster than ``torch.index_select`` at d = 10,
    and writing rows as single opaque elements scatters them 2x faster than
    ``index_copy_`` (measured with one thread). Other devices use the Torch calls."""
    state = z.numpy()
    if not state.flags.c_contiguous:  # pragma: no cover - the engine's state is contiguous
        return _TORCH_IO
    row = np.dtype((np.void, state.shape[1] * state.itemsize))
    whole = state.view(row)[:, 0]

    def gather(source, rows, out):  # (the state, or a run's mixing product)
        array = state if source is z else source.numpy()
        np.take(array, rows, axis=0, out=out.numpy(), mode="clip")

    def scatter(z, rows, value):
        whole[rows] = value.numpy().view(row)[:, 0]

    def clear(z, rows):
        state[rows] = 0.0

    return gather, scatter, clear


def _is_bind_clients(bind) -> bool:
    """Whether ``bind`` is a problem's ``bind_clients`` (a pure formula of its data)."""
    return getattr(bind, "__name__", None) == "bind_clients" and hasattr(bind, "__self__")


def _through_numpy(bind, torch):
    """On the CPU, a problem's gradient formula bound to NumPy views of the tensors'
    memory (shared, no copy): the same formula and numbers as through Torch, without the
    array-API wrapper's cost per call (its ``take`` of the clients' data took a quarter of
    a FOCUS round at N = 10^6, d = 10)."""

    def numpy_bind(clients, like):
        formula = bind(clients, like.numpy())
        return lambda x: torch.from_numpy(formula(x.numpy()))

    return numpy_bind


PROGRAMS = 64  # Torch programs kept (one per structure)
_PROGRAMS = ProgramCache(PROGRAMS)


def torch_program(program: LocalProgram) -> TorchProgram:
    """The Torch twin of the NumPy ``program`` (same structure), built once per structure."""
    key = program.key if program.key is not None else id(program)
    return _PROGRAMS.built(
        key,
        lambda: TorchProgram(
            program.forms,
            program.model,
            program.tail_length,
            zero=program.zero,
            scratch=program.scratch,
            levels=program.levels,
        ),
    )


__all__ = ["TorchProgram", "TorchRows", "torch_program"]

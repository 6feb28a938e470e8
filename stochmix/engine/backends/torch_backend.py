"""The Torch backend: the stacked state as a tensor on any device, phases applied with
dense or sparse Torch products, node-local programs in Torch's dialect.
"""

from __future__ import annotations

import hashlib
import threading
import warnings
from collections import OrderedDict

import numpy as np

from ..._validate import as_float_dtype, choice
from ..codegen.tensors import to_tensor
from ..model.phase import Phase
from .numpy_backend import _whole_block_form
from .threads import resolve_threads

__all__ = ["CACHE_ENTRIES", "TorchBackend"]


class TorchBackend:
    """State as a Torch tensor on any device; phases applied dense or sparse.

    Runs of node-local phases (most of a federated round) are compiled once per structure
    into Torch code (:class:`~stochmix.engine.codegen.torch_program.TorchProgram`): the
    participants' rows are gathered into device buffers, every phase of the run is applied
    to them with in-place Torch calls, and they are scattered back. Other phases go through
    :meth:`apply`: ``mixing="sparse"`` multiplies the phase's rewritten rows of M as a
    ``torch.sparse_csr`` matrix, cost O(nnz d), for large node counts; ``mixing="dense"``
    as a dense (k, m) matrix: one matmul, the fast path on a GPU for moderate node counts.
    ``"auto"`` takes dense on CUDA when the state has at most ``dense_limit`` rows, else
    sparse, and turns whole-block products sparse for good once the cache cannot hold a
    sequence's dense operators (one was dropped and needed again: a periodic sequence of
    n = 10^4 rebuilt 0.8 GB operators every round on an H200). Operators are cached by
    their content (a phase rebuilt each round with the same matrix reuses its tensors), up
    to ``cache_bytes`` of device memory.

    NaN and Inf: every rewritten value is summed into one device vector per round, read
    once when the round ends (:meth:`end_round`): one host synchronisation per round.

    Threads (CPU only): :func:`stochmix.run` sets Torch's intra-op threads
    (``torch.set_num_threads``) to ``threads`` for the run and puts back the count it
    found when the run ends, returns or raises (:mod:`stochmix.engine.backends.threads`); building
    the backend sets nothing. ``threads=None`` (default) takes ``$STOCHMIX_TORCH_THREADS``
    when set, else leaves a count the user chose through ``OMP_NUM_THREADS``/
    ``MKL_NUM_THREADS`` alone, else uses **one** thread: a round is memory-bound
    element-wise work on chunks that gains little from more threads, and Torch's OpenMP
    threads spin-wait for each other whenever the cores are shared (on a busy 2-core
    machine, FOCUS at N = 10^5, d = 100 took 160-1300 ms a round with 2 threads and 28-33
    ms with 1, NumPy 23-30 ms; a metric's 1000 x 100 mean took 19 ms). ``threads=n`` uses
    n (a dedicated machine with large dense mixing or a compute-bound TorchModel);
    ``threads=0`` never touches Torch's setting. On other devices nothing is set.
    :attr:`threads` holds the count runs use (None: Torch's setting, untouched).

    The phases are the same objects as on the NumPy backend, so the same seed gives the
    same trajectory to rounding. The code is device-agnostic: nothing is read back to the
    host inside a round but the finiteness flag at its end.
    """

    name = "torch"
    runs_local_phases = True  # node-local runs go through TorchProgram (local_program)
    applies_trip_counts = True  # repeated phases as one run limited to prefixes

    def __init__(
        self,
        dtype=np.float64,
        device="cpu",
        mixing="auto",
        dense_limit=8192,
        threads=None,
        cache_bytes=1 << 30,
    ) -> None:
        import torch

        self.torch = torch
        self.device = _check_device(torch, device)
        if not isinstance(dtype, torch.dtype):
            dtype = {"float64": torch.float64, "float32": torch.float32}[as_float_dtype(dtype).name]
        self.dtype = dtype
        if self.dtype not in (torch.float64, torch.float32):
            raise ValueError(f"dtype must be float32 or float64, got {dtype}")
        self.mixing = choice(mixing, "mixing", ("auto", "dense", "sparse"))
        self.dense_limit = int(dense_limit)
        self.cache_bytes = int(cache_bytes)
        self.threads = resolve_threads(threads, self.device)  # set by run, for the run
        self._operators: OrderedDict = OrderedDict()  # content key -> tensors
        self._operator_bytes = 0
        self._dense_built: dict[int, bool] = {}  # see _dense_thrashes
        self._thrashed = False
        self._round = threading.local()  # the round's finiteness flag, per thread

    def asarray(self, array: np.ndarray):
        return self.torch.as_tensor(np.asarray(array), dtype=self.dtype, device=self.device)

    def to_numpy(self, array) -> np.ndarray:
        if isinstance(array, np.ndarray):
            return array
        return array.detach().cpu().numpy()

    # ------------------------------------------------------------------ rounds
    def local_program(self, program):
        """The Torch program of ``program``'s structure, bound to this backend's round
        flag (what :func:`~stochmix.engine.backends.dispatch.execute` runs for a node-local run)."""
        twin = getattr(program, "_torch_twin", None)  # found without hashing its key
        if twin is None:
            from ..codegen.torch_program import torch_program

            twin = program._torch_twin = torch_program(program)
        return _Bound(twin, self)

    def _flag(self, like):
        flag = getattr(self._round, "flag", None)
        if flag is None or flag.shape[0] != like.shape[1] or flag.device != like.device:
            flag = self._round.flag = self.torch.zeros(
                like.shape[1], dtype=like.dtype, device=like.device
            )
        return flag

    def begin_round(self) -> None:
        """Start a round: its finiteness flag is zero."""
        flag = getattr(self._round, "flag", None)
        if flag is not None:
            flag.zero_()

    def end_round(self) -> bool:
        """Whether every value the round wrote is finite (one read from the device)."""
        flag = getattr(self._round, "flag", None)
        return flag is None or bool(self.torch.isfinite(flag).all())

    # ------------------------------------------------------------------ general phases
    def _dense(self, size: int) -> bool:
        if self.mixing == "auto":
            return self.device.type == "cuda" and size <= self.dense_limit
        return self.mixing == "dense"

    def _operator(self, csr, dense: bool):
        t = self.torch
        if dense:
            return t.as_tensor(csr.toarray(), dtype=self.dtype, device=self.device)
        indptr, indices = csr.indptr, csr.indices
        if indptr.dtype != indices.dtype or indptr.dtype not in (np.int32, np.int64):
            indptr, indices = indptr.astype(np.int64), indices.astype(np.int64)
        crow = to_tensor(t, indptr, self.device)
        col = to_tensor(t, indices, self.device)
        val = to_tensor(t, csr.data, self.device, self.dtype)
        with warnings.catch_warnings():  # "sparse CSR support is in beta": once, noise
            warnings.simplefilter("ignore", UserWarning)
            return t.sparse_csr_tensor(crow, col, val, size=csr.shape, check_invariants=False)

    def _cached(self, key, build, counted: bool = True):
        """``build()``, kept under ``key`` (least recently used first out, within
        :attr:`cache_bytes` and :data:`CACHE_ENTRIES` entries). A key holding an object
        keeps that object alive, so keys by identity stay valid while cached."""
        hit = self._operators.get(key)
        if hit is not None:
            self._operators.move_to_end(key)
            return hit[0]
        ops = build()
        size = sum(_tensor_bytes(op) for op in _tensors(ops)) if counted else 0
        while self._operators and (
            self._operator_bytes + size > self.cache_bytes or len(self._operators) >= CACHE_ENTRIES
        ):
            _, (_, _, old) = self._operators.popitem(last=False)
            self._operator_bytes -= old
        if size <= self.cache_bytes:
            self._operators[key] = (ops, key, size)
            self._operator_bytes += size
        return ops

    def _prepare(self, phase: Phase):
        """(rows, mix, inject) as tensors. The same phase object (a plan reused by the run
        loop) finds its tensors by identity; a phase rebuilt with the same content by a
        hash of its sparse rows, where building costs more than hashing (dense operators,
        devices other than the CPU; sparse operators on the CPU share the phase's NumPy
        memory and cost next to nothing to build)."""
        dense = self._dense(phase.size)

        def build():
            if not dense and self.device.type == "cpu":
                return self._build(phase, dense)
            key = ("content", dense, _content_key(phase))
            return self._cached(key, lambda: self._build(phase, dense))

        # the same tensors as the content entry's: not counted twice
        return self._cached(("phase", dense, _Identity(phase)), build, counted=False)

    # ------------------------------------------------------------------ whole blocks
    def _matrix(self, matrix):
        """A whole-block mixing matrix (SciPy CSR) as a tensor, dense or sparse per
        :attr:`mixing` (``"auto"``: dense on CUDA up to ``dense_limit`` nodes), cached by
        the matrix object (a sequence that repeats its matrices builds each once)."""
        dense = self._dense(matrix.shape[1]) and not (
            self.mixing == "auto" and self._dense_thrashes(matrix)
        )
        return self._cached(
            ("matrix", dense, _Identity(matrix)), lambda: self._operator(matrix, dense)
        )

    def _dense_thrashes(self, matrix) -> bool:
        """Whether ``mixing="auto"`` gives up dense whole-block products: once the cache
        has dropped a dense operator that was needed again (a periodic sequence whose
        period's dense operators exceed :attr:`cache_bytes`, which would otherwise rebuild
        every operator every round: O(n^2) a round against O(nnz)), or when one operator
        alone exceeds it. Sparse from then on, for this backend's runs."""
        if self._thrashed:
            return True
        key = ("matrix", True, _Identity(matrix))
        if key in self._operators:
            return False
        rows, cols = matrix.shape
        itemsize = 8 if self.dtype == self.torch.float64 else 4
        seen = self._dense_built  # id -> built densely before (an id may be reused: the
        # worst a stale one does is to take sparse products, with the same numbers)
        if rows * cols * itemsize > self.cache_bytes or id(matrix) in seen:
            self._thrashed = True
            return True
        if len(seen) >= 4 * CACHE_ENTRIES:
            seen.clear()
        seen[id(matrix)] = True
        return False

    def run_products(self, z, products: tuple) -> tuple:
        """The mixing products of a run of node-local phases, when it starts: ``matrix @
        z[rows]`` for each ``(matrix, rows)`` of ``products`` (one row per node of the
        run), each matrix a tensor as whole-block products take it (:meth:`_matrix`)."""
        return tuple((self._matrix(matrix) @ z[rows]).contiguous() for matrix, rows in products)

    def apply_blockwise(self, z, phase: Phase, gradients) -> bool:
        """Apply a phase through its whole-block form (:attr:`Phase.blockwise`), as
        ``NumpyBackend.apply_blockwise`` does: each rewritten block T becomes ``sum scale *
        (W @ S) + sum coef * S + sum coef * G`` (one sparse or dense product per mixed
        block, computed from the old ``z``), then every T is written into its slice of
        ``z``. ``gradients``: the gradients of ``phase.blockwise.clients`` (a tensor), or
        None. The new values of the targets the form checks (:attr:`BlockwiseForm.order`)
        are added into the round's flag; returns True."""
        form = _whole_block_form(phase)
        new = []
        for target in form.targets:
            only = target.terms[0] if len(target.terms) == 1 else None
            if (
                only is not None
                and only.kind == "grad"
                and np.ndim(only.coef) == 0
                and only.coef == 1.0
                and not _shares_memory(gradients, z)
            ):
                new.append(gradients)  # T <- G: written below, no copy needed
                continue
            acc = None
            grads = []
            for term in target.terms:
                if term.kind == "grad":
                    grads.append(term)  # after the state's terms, as NumPy adds them
                    continue
                source = z[term.rows]
                if term.kind == "mix":
                    product = self._matrix(term.matrix) @ source
                    if term.coef != 1.0:
                        product.mul_(term.coef)
                    acc = product if acc is None else acc.add_(product)
                else:
                    acc = self._scaled_add(acc, source, term.coef)
            for term in grads:
                acc = self._scaled_add(acc, gradients, term.coef)
            if acc is None:
                span = target.rows
                rows = span.stop - span.start if isinstance(span, slice) else len(span)
                acc = self.torch.zeros((rows, z.shape[1]), dtype=z.dtype, device=z.device)
            new.append(acc)
        flag = self._flag(z)
        checked = {t.block for t, _, check in form.order if check}
        for target, acc in zip(form.targets, new, strict=True):
            z[target.rows] = acc
            if target.block in checked:
                flag.add_(acc.sum(0))
        return True

    def _scaled_add(self, acc, values, coef):
        """``acc + coef * values``, in place into ``acc`` (a new tensor when ``acc`` is
        None, never ``values`` itself); ``coef`` a number or one value per row."""
        if np.ndim(coef):
            coef = to_tensor(self.torch, coef, values.device, values.dtype)[:, None]
            return values * coef if acc is None else acc.addcmul_(values, coef)
        if coef == 1.0:
            return values.clone() if acc is None else acc.add_(values)
        if coef == -1.0:
            return values.neg() if acc is None else acc.sub_(values)
        return values * coef if acc is None else acc.add_(values, alpha=coef)

    def _build(self, phase: Phase, dense: bool):
        return (
            to_tensor(self.torch, phase.rows, self.device),
            self._operator(phase.mix, dense),
            None if phase.inject is None else self._operator(phase.inject, dense),
        )

    def apply(self, z, phase: Phase, gradients) -> bool:
        """``z[rows] <- mix @ z + inject @ gradients`` in place. The new rows are added
        into the round's flag (see :meth:`end_round`); returns True."""
        rows, mix, inject = self._prepare(phase)
        new = mix @ z
        if inject is not None:
            new += inject @ gradients
        z.index_copy_(0, rows, new)
        self._flag(z).add_(new.sum(0))
        return True


CACHE_ENTRIES = 512  # operators a Torch backend keeps (besides its byte budget)


class _Identity:
    """A cache key by identity that keeps its object alive (its id stays unique)."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other) -> bool:
        return isinstance(other, _Identity) and other.obj is self.obj


def _shares_memory(a, b) -> bool:
    """Whether tensors ``a`` and ``b`` live in the same storage."""
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _tensors(ops):
    """The tensors in a cached entry (a tensor, or a tuple holding tensors and None)."""
    if isinstance(ops, tuple):
        return [op for op in ops if op is not None]
    return [ops]


class _Bound:
    """A Torch program run with its backend's round flag (see TorchBackend.local_program)."""

    __slots__ = ("program", "backend")

    def __init__(self, program, backend):
        self.program, self.backend = program, backend

    def run(self, z, *args, **kwargs) -> bool:
        return self.program.run(z, *args, flag=self.backend._flag(z), **kwargs)


def _content_key(phase: Phase) -> tuple:
    """What a phase's operators are made of, hashed: equal keys, equal operators."""
    digest = hashlib.blake2b(digest_size=16)
    parts = [phase.rows, phase.mix.indptr, phase.mix.indices, phase.mix.data]
    if phase.inject is not None:
        parts += [phase.inject.indptr, phase.inject.indices, phase.inject.data]
    for part in parts:
        part = np.ascontiguousarray(part)
        digest.update(str((part.dtype.str, part.shape)).encode())
        digest.update(part.data.cast("B"))
    return (phase.size, phase.mix.shape, digest.digest())


def _tensor_bytes(tensor) -> int:
    if not tensor.is_sparse_csr:
        return tensor.numel() * tensor.element_size()
    return sum(
        t.numel() * t.element_size()
        for t in (tensor.crow_indices(), tensor.col_indices(), tensor.values())
    )


def _check_device(torch, device):
    """``device`` as a ``torch.device`` that exists here, or a ValueError naming it."""
    if not isinstance(device, (str, torch.device)):
        raise TypeError(f'device must be a string such as "cpu" or "cuda:0", got {device!r}')
    try:
        found = torch.device(device)
    except RuntimeError as error:
        raise ValueError(f"device {device!r} is not a Torch device ({error})") from None
    if found.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"device {device!r}: this Torch has no CUDA device available")
        if found.index is not None and found.index >= torch.cuda.device_count():
            raise ValueError(
                f"device {device!r}: only {torch.cuda.device_count()} CUDA device(s) here"
            )
    elif found.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device {device!r}: MPS is not available here")
    return found

"""Phases that are not linear: a row-wise function applied to some rows of a block.

Every other phase is ``Z <- M Z + B G``. A :class:`RowMap` is the one general way out of
that form: it rewrites rows ``rows`` of one target block with

    target[rows] <- f(source_1[rows_1], ..., source_k[rows_k], info=MapInfo)

where ``f`` is a :class:`RowFunction` **vectorized over rows**: it receives arrays of
shape (k, d) (a source given a single row arrives as (1, d) and broadcasts) and returns
the k new rows, shape (k, d). A prox, a compression operator, an adaptive server step are
such functions. All sources are read from the state before the target is written, as in
every phase.

Randomness. ``info.rng`` is a :class:`numpy.random.Generator` derived *counter-based*
from the run's seed, the round and the phase's label (:func:`map_generator`):

    SeedSequence(entropy, spawn_key=(*spawn_key, MAP_STREAM, round, crc32(label)))

where ``entropy``/``spawn_key`` are those of the run's seed (an integer seed s gives
entropy s and no spawn key). No generator state is carried from round to round, so a
checkpointed run resumes with the same draws and the participation stream (drawn from the
seed itself) is untouched; a per-node reference reproduces the draws with the same
expression. Give two maps of one round different labels to draw independently.

Engine. A map whose function is an element-wise kernel of the catalogue
(:mod:`stochmix.engine.model.kernels`: a prox of L1 or the elastic net, a projection onto a
box; its ``row_kernel`` attribute says so) reading the same nodes' rows of one block has a
node-local form, and the compiled programs apply it inside the run of phases around it.
The planner puts no other map inside a run of node-local phases (it has no
:class:`~stochmix.engine.model.phase.LocalForm`, so runs are cut at it) nor on the whole-block
path; :func:`~stochmix.engine.backends.dispatch.execute` applies it with :func:`apply_map`: the
source rows are gathered, moved to NumPy (``backend.to_numpy``: on the Torch backend the
rows go to the host and back; ``f`` always sees NumPy float arrays), ``f`` is called
once, and its result is scattered into the target rows (``backend.asarray``). The compiled
(Numba) and Torch programs never see a map. A non-finite result stops the run as any
other phase does.

Analysis. A map has no matrix: :attr:`RowMap.mix`, :meth:`RowMap.matrix` and the exact
operators of :mod:`stochmix.analysis.linear` raise :class:`NonlinearPhaseError`.
"""

from __future__ import annotations

import zlib
from functools import cached_property, partial
from typing import Protocol, runtime_checkable

import numpy as np

from .kernels import KERNELS, kernel_of
from .layout import Layout
from .local_form import KernelTerm, LocalForm
from .phase import Phase
from .traffic import map_traffic

__all__ = [
    "MAP_STREAM",
    "MapInfo",
    "NonlinearPhaseError",
    "RowFunction",
    "RowMap",
    "apply_map",
    "call_map",
    "map_generator",
    "seed_sequence",
]

#: The first spawn-key entry of every map generator: keeps map draws apart from any other
#: use of the run's seed (the participation stream uses the seed itself).
MAP_STREAM = 0x726F776D  # "rowm"


class NonlinearPhaseError(ValueError):
    """Something that needs a phase's matrix met a nonlinear :class:`RowMap`."""


class MapInfo:
    """What a :class:`RowFunction` may know besides its source rows.

    Attributes:
        rows: the target block's rows being rewritten (block-local), shape (k,).
        round: the round the phase belongs to.
        label: the phase's label.
        problem: the run's problem (a prox needs it); None outside a run.
        rng: a generator for this map and round (see :func:`map_generator`), made on
            first use.
    """

    def __init__(self, rows, round: int, label: str, problem, seed_sequence):
        self.rows = rows
        self.round = round
        self.label = label
        self.problem = problem
        self._seed = seed_sequence

    @cached_property
    def rng(self) -> np.random.Generator:
        return map_generator(self._seed, self.round, self.label)


@runtime_checkable
class RowFunction(Protocol):
    """``f(*sources, info) -> new rows``: each source an array of shape (k, d) (or (1, d)
    for a single row), the result of shape (k, d); vectorized over rows, no Python loop
    over them. It must not modify its inputs. An optional ``name`` attribute names it in
    messages."""

    def __call__(self, *sources: np.ndarray, info: MapInfo) -> np.ndarray: ...


def label_key(label: str) -> int:
    """The spawn-key entry of a label (CRC-32 of its UTF-8 bytes)."""
    return zlib.crc32(label.encode("utf-8"))


def seed_sequence(seed) -> np.random.SeedSequence:
    """The SeedSequence behind a run's seed (see :func:`stochmix._validate.as_seed`): an
    integer s gives ``SeedSequence(s)``; a SeedSequence is used as is; a Generator or
    BitGenerator gives the SeedSequence it was made from (nothing is drawn from it);
    None (or a generator without one) a fresh random one."""
    if isinstance(seed, np.random.SeedSequence):
        return seed
    if isinstance(seed, np.random.Generator):
        seed = seed.bit_generator
    if isinstance(seed, np.random.BitGenerator):
        found = getattr(seed, "seed_seq", None) or getattr(seed, "_seed_seq", None)
        return found if isinstance(found, np.random.SeedSequence) else np.random.SeedSequence()
    return np.random.SeedSequence(seed)


def map_generator(seed, round: int, label: str) -> np.random.Generator:
    """The generator of map ``label`` in round ``round`` of a run with ``seed`` (an
    integer, a SeedSequence, ...: see :func:`seed_sequence`)::

        SeedSequence(entropy, spawn_key=(*spawn_key, MAP_STREAM, round, crc32(label)))
    """
    root = seed_sequence(seed)
    key = (*root.spawn_key, MAP_STREAM, int(round), label_key(label))
    return np.random.default_rng(np.random.SeedSequence(root.entropy, spawn_key=key))


def _function_name(function) -> str:
    return str(
        getattr(function, "name", None)
        or getattr(function, "__name__", None)
        or type(function).__name__
    )


def _local_rows(rows) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    return rows


class RowMap(Phase):
    """``target[rows] <- function(source_1[rows_1], ..., info=...)``: a nonlinear phase
    (see the module docstring).

    Args:
        layout: the run's layout.
        target: the block written.
        rows: its block-local rows, distinct, shape (k,).
        function: a :class:`RowFunction`.
        sources: each a block name (the same ``rows`` of that block) or ``(block,
            rows)`` with rows of shape (k,) or a single row (passed as (1, d)).
        round: the round the phase belongs to (seeds ``info.rng``).
        label: names the phase (and its random stream within the round).

    Attributes:
        name: the function's name (its ``name`` or ``__name__``).
    """

    nonlinear = True

    def __init__(
        self,
        layout: Layout,
        target: str,
        rows,
        function: RowFunction,
        *sources,
        round: int,
        label: str = "map",
    ):
        if not callable(function):
            raise TypeError(f"function must be callable, got {type(function).__name__}")
        local = _local_rows(rows)
        block = layout.block(target)
        if local.size and (local.min() < 0 or local.max() >= block.rows):
            raise ValueError(f"rows of {target!r} must be in [0, {block.rows}), got {local}")
        increasing = local.size < 2 or bool((local[1:] > local[:-1]).all())  # O(k), usual
        if not increasing and np.unique(local).size != local.size:
            raise ValueError(f"rows of {target!r} must be distinct")
        self.target = target
        self.target_rows = local
        self.function = function
        self.name = _function_name(function)
        self.round = int(round)
        specs = []
        for src in sources:
            name, src_rows = (src, local) if isinstance(src, str) else src
            src_rows = _local_rows(src_rows)
            if src_rows.size not in (1, local.size):
                raise ValueError(
                    f"source {name!r} has {src_rows.size} rows; expected {local.size} or 1"
                )
            specs.append((name, src_rows))
        self._layout = layout
        self._specs = tuple(specs)
        #: ``(name, round scalars)`` when the function is an element-wise kernel that the
        #: compiled programs apply inside a run (see :mod:`stochmix.engine.model.kernels`)
        self.kernel = kernel_of(function)
        super().__init__(
            layout.size, None, self._kernel_form(layout), label, empty=local.size == 0,
            traffic=partial(map_traffic, layout, target, local, self._specs),
        )  # fmt: skip

    @cached_property
    def sources(self) -> tuple:
        """``(block, block rows, state rows)`` of each source, in order."""
        return tuple((name, rows, self._layout.rows(name, rows)) for name, rows in self._specs)

    @cached_property
    def z_rows(self) -> np.ndarray:
        """The rewritten rows of the stacked state."""
        return self._layout.rows(self.target, self.target_rows)

    def _kernel_form(self, layout: Layout) -> LocalForm | None:
        """The node-local form of an element-wise kernel read from the same nodes' rows of
        as many source blocks as it takes (``target[nodes] <- kernel(source[nodes],
        ...)``), else None."""
        if self.kernel is None or not self.target_rows.size:
            return None
        kernel, params = self.kernel
        if len(self._specs) != KERNELS[kernel].sources:
            return None
        nodes = self.target_rows + layout.first_node(self.target)
        if int(nodes.min()) < 0:  # (a server row: no node)
            return None
        for name, rows in self._specs:
            if rows.size != nodes.size or not np.array_equal(rows + layout.first_node(name), nodes):
                return None
        names = [name for name, _ in self._specs]
        term = KernelTerm(self.target, names[0], kernel, params, tuple(names[1:]))
        return LocalForm(nodes, (self.target,), (), (), (), None, (), (term,))

    def _refuse(self, *_):
        raise NonlinearPhaseError(
            f"phase {self.label!r} applies a nonlinear row-wise map ({self.name}); the exact "
            "operator exists only for linear phases"
        )

    @property
    def _triplets(self):  # type: ignore[override]
        self._refuse()

    @property
    def rows(self) -> np.ndarray:  # type: ignore[override]
        """The rewritten rows of the stacked state."""
        return self.z_rows

    @property
    def clients(self) -> np.ndarray:  # type: ignore[override]
        """No gradients: an empty array."""
        return np.zeros(0, dtype=np.int64)

    @property
    def mix(self):  # type: ignore[override]
        self._refuse()

    @property
    def inject(self):  # type: ignore[override]
        self._refuse()

    def matrix(self):
        self._refuse()

    def gradient_matrix(self, n_clients: int):
        self._refuse()

    @property
    def blockwise(self):  # type: ignore[override]
        return None

    def __repr__(self) -> str:
        return f"RowMap({self.label!r}, {self.name}, {self.target}[{self.target_rows.size} rows])"


def apply_map(z, phase: RowMap, backend, problem, seed) -> bool:
    """Apply ``phase`` to ``z`` in place (see the module docstring); False if a new value
    is not finite. ``seed``: the run's seed sequence (``RunContext.seed_sequence``)."""
    # to_numpy and asarray: members every backend has (stochmix.protocols.BackendLike)
    if isinstance(z, np.ndarray):  # np.take: about 3x faster than z[rows] on many rows
        args = [np.take(z, rows, axis=0) for _, _, rows in phase.sources]
    else:
        args = [np.asarray(backend.to_numpy(z[rows])) for _, _, rows in phase.sources]
    new = call_map(phase, args, problem, seed, z.shape[1])
    finite = bool(np.isfinite(new).all())
    z[phase.z_rows] = backend.asarray(new)
    return finite


def call_map(phase: RowMap, args: list, problem, seed, dim: int) -> np.ndarray:
    """``phase``'s function on its source rows ``args`` (NumPy arrays, in the order of
    ``phase.sources``): the new target rows, shape (k, ``dim``), checked."""
    info = MapInfo(phase.target_rows, phase.round, phase.label, problem, seed)
    new = np.asarray(phase.function(*args, info=info))
    expected = (phase.target_rows.size, dim)
    if new.shape != expected:
        raise ValueError(
            f"map {phase.name!r} of phase {phase.label!r} returned shape {new.shape}, "
            f"expected {expected}"
        )
    return new

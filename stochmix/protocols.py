"""The contracts :func:`stochmix.run` relies on, declared once as ``typing.Protocol`` s.

A problem, a participation process or a backend need not inherit from any stochmix class:
an object with the members below works (structural typing). The library's own classes
(:class:`stochmix.problems.Problem`, the processes of :mod:`stochmix.participation`,
:class:`stochmix.engine.NumpyBackend` and ``TorchBackend``) satisfy them, and ``run``
checks its arguments against them before any work (``isinstance`` works: they are
``runtime_checkable``; it checks that the members exist, not their signatures).

**Problem** (:class:`ProblemLike`): ``n_clients`` (N), ``dim`` (d) and
``gradients(clients, points)``: row t of the result is grad F_{clients[t]}(points[t]),
shape (m, d), in the array type, device and dtype of ``points`` (a NumPy array, or a Torch
tensor on the torch backend); ``clients`` is an int64 array of indices in ``[0, N)``, any
order, repeats allowed, possibly empty. Optional, used where present:

* ``x_star`` (the minimiser, shape (d,), or None), ``f_star``, ``objective(x)``,
  ``objective_gap(x)``, ``gradient(x)`` (the full gradient), ``closed_form_metrics``: the
  run's metrics (see :mod:`stochmix.engine.recorder`);
* ``fingerprint()``: a string identifying the problem's data (checkpoints);
* ``reseed(seed)``, ``rng_state()``, ``set_rng_state(state)``: stochastic gradients that
  restart with the run's seed and are saved in checkpoints;
* ``row_gradient(dtype)`` and ``pure_gradients``: the compiled path (see
  :meth:`stochmix.problems.Problem.row_gradient`);
* ``chunk_cost()``: array elements one client's gradient touches (chunk sizes and the
  metrics' schedule; ``dim`` when absent).

**Participation** (:class:`MaskParticipation` or :class:`IndexParticipation`, together
:data:`ParticipationLike`): ``n_clients``, ``probabilities`` (each client's marginal
probability of taking part in a round, shape (N,), or None when unknown) and either
``masks(seed)``, an endless iterator of boolean masks of shape (N,), one per round, or
``participants(seed)``, the same rounds as sorted int64 indices (preferred when both
exist: no N-long mask per round). The same seed must give the same rounds.

**Backend** (:class:`BackendLike`): ``name`` (a string, written into the Result),
``asarray(array)`` (a NumPy array as the backend's array), ``to_numpy(array)`` and
``apply(z, phase, gradients)``: ``z[phase.rows] <- phase.mix @ z + phase.inject @
gradients`` in place, returning False when a new entry is not finite. Optional:
``dtype``; ``compiled`` and ``runs_local_phases`` (the chunked and compiled paths of
:mod:`stochmix.engine.execute`); ``apply_blockwise(z, phase, gradients)`` (whole-block
phases, :mod:`stochmix.engine.blockwise`; with ``hands_off = True`` the plan may give it
a phase that hands a block to the next, :func:`stochmix.engine.blockwise.chained`);
``local_program(program)`` (the backend's own emitter of node-local runs) and
``begin_round()`` / ``end_round()`` (one finiteness check per round), as the Torch backend
has them; ``threads``, Torch's intra-op thread count during its runs (None: left alone;
absent: ``$STOCHMIX_TORCH_THREADS`` or one thread, :mod:`stochmix.engine.threads`).

This module imports nothing but ``typing``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "BackendLike",
    "IndexParticipation",
    "MaskParticipation",
    "ParticipationLike",
    "ProblemLike",
]


@runtime_checkable
class ProblemLike(Protocol):
    """A federated objective f(x) = (1/N) sum_i F_i(x) as the run loop uses it (see the
    module docstring for the optional members)."""

    @property
    def n_clients(self) -> int:
        """N, the number of clients."""
        ...

    @property
    def dim(self) -> int:
        """d, the dimension of the model."""
        ...

    def gradients(self, clients: Any, points: Any) -> Any:
        """Row t is grad F_{clients[t]}(points[t]); shape (len(clients), d), in the array
        type, device and dtype of ``points``."""
        ...


@runtime_checkable
class MaskParticipation(Protocol):
    """A participation process that yields one boolean mask over the clients per round."""

    @property
    def n_clients(self) -> int:
        """N, the number of clients."""
        ...

    @property
    def probabilities(self) -> Any:
        """Each client's probability of taking part in a round, shape (N,), or None."""
        ...

    def masks(self, seed: Any = None) -> Iterator[Any]:
        """Endless boolean masks of shape (N,), one per round; the same seed gives the
        same masks."""
        ...


@runtime_checkable
class IndexParticipation(Protocol):
    """A participation process that yields each round's participants as sorted indices."""

    @property
    def n_clients(self) -> int:
        """N, the number of clients."""
        ...

    @property
    def probabilities(self) -> Any:
        """Each client's probability of taking part in a round, shape (N,), or None."""
        ...

    def participants(self, seed: Any = None) -> Iterator[Any]:
        """Endless sorted int64 arrays of participants, one per round; the same seed gives
        the same rounds."""
        ...


#: A participation process: masks or sorted participants per round (a union:
#: ``isinstance(x, ParticipationLike)`` works).
ParticipationLike = MaskParticipation | IndexParticipation


@runtime_checkable
class BackendLike(Protocol):
    """Where the state lives and how a phase is applied to it (see the module docstring
    for the optional members)."""

    name: str

    def asarray(self, array: Any) -> Any:
        """A NumPy array as this backend's array type and dtype."""
        ...

    def to_numpy(self, array: Any) -> Any:
        """This backend's array back as a NumPy array."""
        ...

    def apply(self, z: Any, phase: Any, gradients: Any) -> bool:
        """``z[phase.rows] <- phase.mix @ z + phase.inject @ gradients`` in place; False
        if a new entry is not finite."""
        ...

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
  run's metrics (see :mod:`stochmix.engine.runner.recorder`);
* ``fingerprint()``: a string identifying the problem's data (checkpoints);
* ``reseed(seed)``, ``rng_state()``, ``set_rng_state(state)``: stochastic gradients that
  restart with the run's seed and are saved in checkpoints;
* ``chunk_cost()``: array elements one client's gradient touches (chunk sizes and the
  metrics' schedule; ``dim`` when absent).

Two optional families of problems, each a Protocol of its own, serve the methods that
need more than gradients:

* :class:`AffineGradientProblem` (``affine_gradients()``): every client's gradient is
  affine, grad F_i(x) = H_i x - c_i (:class:`stochmix.problems.Quadratic`,
  :class:`stochmix.problems.LeastSquares`): the exact local solves of FedProx and
  decentralized ADMM;
* :class:`FiniteSumProblem` (``rows_per_client`` and ``sampled_gradients(...)``): each
  client holds samples, and the gradient of any of them is at hand
  (:class:`stochmix.problems.LeastSquares`, :class:`stochmix.problems.Logistic`,
  :class:`stochmix.problems.TorchModel`): the variance-reduced methods.

The fast paths of the gradients are declared by flags, read as they are (no look at the
class hierarchy):

* ``pure_gradients`` (False when absent): ``gradients`` is a pure function of the
  problem's data and its arguments (no random draws, no state changed, each row depending
  only on its own client and point). Only then are the calls split into chunks of clients
  run on two threads, and the members below used at all;
* ``gradients_unchecked(idx, x)`` (``gradients`` without its argument checks) and
  ``bind_clients(idx, like)`` (a function ``x -> gradients(idx, x)`` that gathers the
  clients' data once), used unless ``unchecked_gradients`` is false; with
  ``client_slices`` (False when absent) ``gradients_unchecked`` also takes a ``slice`` of
  consecutive clients (a decentralized round's whole block, read in place);
* ``row_gradient(dtype)``: one client's gradient compiled with Numba, for the row-wise
  path (see :meth:`stochmix.problems.Problem.row_gradient`), used unless
  ``compiled_gradient`` is false.

:class:`stochmix.problems.Problem` has all of them, served from one
``gradient_formula`` over its public client data (``problem.data``, a
:class:`stochmix.problems.ClientData`), and keeps each flag true to the methods it
describes: a subclass that defines one of those methods without declaring the flag again
gets it False (see :attr:`stochmix.problems.Problem.DECLARED_WITH`).

**Participation** (:class:`MaskParticipation` or :class:`IndexParticipation`, together
:data:`ParticipationLike`): ``n_clients``, ``probabilities`` (each client's marginal
probability of taking part in a round, shape (N,), or None when unknown) and either
``masks(seed)``, an endless iterator of boolean masks of shape (N,), one per round, or
``participants(seed)``, the same rounds as sorted int64 indices (preferred when both
exist: no N-long mask per round). The same seed must give the same rounds.

**Backend** (:class:`BackendLike`): ``name`` (a string, written into the Result),
``asarray(array)`` (a NumPy array as the backend's array), ``to_numpy(array)`` and
``apply(z, phase, gradients)``: ``z[phase.rows] <- phase.mix @ z + phase.inject @
gradients`` in place, returning False when a new entry is not finite. A backend with these
four members runs every method, each phase through ``apply`` (the general path).

The fast paths are optional capabilities, each declared below as a Protocol of its own.
:func:`stochmix.engine.plan.capabilities.capabilities` checks a backend against all of them
once per run (each Protocol's members looked up on the backend object, plus the value of a
flag where the Protocol has one) and the engine reads that record wherever it needs a
capability, never the backend's attributes:

* :class:`RunsLocalPhases` (``runs_local_phases = True``): runs of node-local phases
  become segments run by the engine's node-local programs (and the state may be kept
  compact); :class:`CompilesLocalPhases` (``compiled``) lets them be Numba loops, and
  :class:`EmitsLocalPrograms` (``local_program(program)``) replaces them with the
  backend's own;
* :class:`AppliesBlockwise` (``apply_blockwise(z, phase, gradients)``): whole-block
  phases, one product per mixed block; :class:`HandsOffBlocks` (``hands_off = True``)
  lets one such phase hand a block to the next;
* :class:`RoundHooks` (``begin_round()`` and ``end_round()``, both): one finiteness check
  per round;
* :class:`Sharded` (``runs_sharded = True``): the backend keeps one rank's shard of the
  state and applies each round's items on it (the distributed backend);
* :class:`Typed` (``dtype``): the state's dtype, recorded in the Result and checkpoints.

``threads`` (optional): Torch's intra-op thread count during the backend's runs (None: left
alone; absent: ``$STOCHMIX_TORCH_THREADS`` or one thread, :mod:`stochmix.engine.backends.threads`).

This module imports nothing but ``typing``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "AffineGradientProblem",
    "AppliesBlockwise",
    "BackendLike",
    "CompilesLocalPhases",
    "ComputesProducts",
    "EmitsLocalPrograms",
    "FiniteSumProblem",
    "HandsOffBlocks",
    "IndexParticipation",
    "MaskParticipation",
    "ParticipationLike",
    "ProblemLike",
    "RoundHooks",
    "RunsLocalPhases",
    "Sharded",
    "Typed",
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
class AffineGradientProblem(Protocol):
    """A problem whose clients' gradients are affine maps, grad F_i(x) = H_i x - c_i (the
    local problems of an exact proximal or ADMM step then have closed forms)."""

    def affine_gradients(self) -> tuple[Any, Any]:
        """``(H, c)`` in float64, NumPy arrays not to be written to: ``H`` of shape (N, d)
        (the diagonals) when every H_i is diagonal, else (N, d, d); ``c`` of shape (N, d),
        so that ``H[i] * x - c[i]`` (diagonal) or ``H[i] @ x - c[i]`` is grad F_i(x)."""
        ...


@runtime_checkable
class FiniteSumProblem(Protocol):
    """A problem whose clients hold samples: F_i = (1/n_i) sum_j f_{i,j}, one component
    per sample, whose gradients can be taken one sample (or a few) at a time."""

    @property
    def rows_per_client(self) -> Any:
        """n_i, the samples of each client, an int array of shape (N,)."""
        ...

    def sampled_gradients(self, clients: Any, points: Any, picks: Any, scale: Any) -> Any:
        """Row t is ``(scale[t] / n_c) sum_k grad f_{c, picks[t, k]}(points[t])`` for
        c = ``clients[t]`` (``picks``: positions among the client's n_c samples, shape
        (m, b), repeats allowed): with ``scale[t] = n_c / b`` the mean of the b picked
        components' gradients, an unbiased estimate of grad F_c (a minibatch gradient);
        with one pick and ``scale[t] = n_c``, the gradient of component ``picks[t, 0]``.
        Shape (m, d), in the array type of ``points``."""
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
    """Where the state lives and how a phase is applied to it: the four members every
    backend has (the optional capabilities are the Protocols below)."""

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


# ------------------------------------------------------------------ optional capabilities
# Each is checked by stochmix.engine.plan.capabilities.capabilities, once per run; a flag
# attribute (runs_local_phases, hands_off, runs_sharded) must also be true.


@runtime_checkable
class RunsLocalPhases(Protocol):
    """Runs of node-local phases go through the engine's node-local programs.

    With ``runs_local_phases`` true, the planner (:func:`stochmix.engine.plan.round_plan.
    plan_round`) cuts each run of consecutive node-local phases over the same nodes into
    one ``LocalStep``, and :func:`~stochmix.engine.backends.dispatch.execute` runs it, once per
    round, through a :class:`~stochmix.engine.codegen.program.LocalProgram` (NumPy code over
    chunks of nodes, two threads where the gradients are pure), a Numba row-wise program
    (:class:`CompilesLocalPhases`) or the backend's own program
    (:class:`EmitsLocalPrograms`). The run also knows then which rows are zero or never
    read (``storage="compact"``, :mod:`stochmix.engine.plan.liveness`). Without
    :class:`EmitsLocalPrograms` the programs index the state in place, so it must be a
    NumPy array (as on the NumPy backend)."""

    runs_local_phases: bool


@runtime_checkable
class CompilesLocalPhases(RunsLocalPhases, Protocol):
    """Node-local runs may be compiled Numba loops over one node at a time.

    ``compiled`` is True, False or ``"auto"``: :func:`stochmix.engine.plan.gradients.
    row_gradient` reads it once per run (True: the problem's compiled gradient is
    required; ``"auto"``: used for runs long enough to repay compiling), and
    :func:`~stochmix.engine.backends.dispatch.execute` then takes the row-wise program for a
    segment when it is True or the segment is large enough. Ignored where the backend
    emits its own programs (:class:`EmitsLocalPrograms`)."""

    compiled: Any


@runtime_checkable
class EmitsLocalPrograms(RunsLocalPhases, Protocol):
    """The backend runs node-local runs in its own dialect (the Torch backend)."""

    def local_program(self, program: Any) -> Any:
        """Called by :func:`~stochmix.engine.backends.dispatch.execute` for every segment of every
        round, with the segment's :class:`~stochmix.engine.codegen.program.LocalProgram`; returns
        an object whose ``run(z, nodes, layout, coefs, clients, bind, data_per_row,
        workers, whole=...)`` does what ``LocalProgram.run`` does (applies the segment to
        ``z`` in place, False when a written entry is not finite)."""
        ...


@runtime_checkable
class ComputesProducts(RunsLocalPhases, Protocol):
    """A whole-block phase whose terms are node-local but for its mixing products (``x <-
    W x - a y``) joins runs of node-local phases: the backend computes the products when
    the run starts (:mod:`stochmix.engine.model.product_form`)."""

    def run_products(self, z: Any, products: Any) -> Any:
        """``matrix @ z[rows]`` for each ``(matrix, rows)`` of ``products`` (a SciPy CSR
        matrix with one row per node of the run, a slice of the state's rows), as arrays
        of the backend's type and ``z``'s dtype; the segment's program (``run(...,
        products=...)``, a backend's own dialect included) reads their rows as it reads a
        block's."""
        ...


@runtime_checkable
class AppliesBlockwise(Protocol):
    """Phases that rewrite whole blocks are applied one product per mixed block."""

    def apply_blockwise(self, z: Any, phase: Any, gradients: Any) -> bool:
        """Apply ``phase`` through its whole-block form ``phase.blockwise``
        (:mod:`stochmix.engine.model.blockwise`) to ``z`` in place; ``gradients`` are those of
        ``phase.blockwise.clients`` (shape (c, d)) or None; False when a new entry is not
        finite. With it the planner keeps whole-block phases whole (and leaves the checks
        of the blocks the reported model sums to the run), and
        :func:`~stochmix.engine.backends.dispatch.execute` sends every phase that has a whole-block
        form here instead of to ``apply``."""
        ...


@runtime_checkable
class HandsOffBlocks(AppliesBlockwise, Protocol):
    """With ``hands_off`` true, the planner may give :meth:`apply_blockwise` a phase that
    hands a rewritten block to the next phase instead of writing it
    (:func:`stochmix.engine.model.blockwise.chained`); the backend keeps the handed rows."""

    hands_off: bool


@runtime_checkable
class RoundHooks(Protocol):
    """The backend checks a round's values once, at its end (the Torch backend: one host
    synchronisation per round). Both members or neither."""

    def begin_round(self) -> None:
        """Called by :func:`~stochmix.engine.backends.dispatch.execute` before a round's first
        phase."""
        ...

    def end_round(self) -> bool:
        """Called after the round's last phase: False when a value the round wrote is not
        finite (combined with what the phases returned)."""
        ...


@runtime_checkable
class Sharded(Protocol):
    """With ``runs_sharded`` true the backend holds one rank's shard of the state: the run's
    set-up asks it for the shard (``make_shard(layout, n_clients, method, dim, problem)``,
    refusing what a shard cannot run), the initial rows (``initial(x0)``) and what the
    recorder reads (``reported(method)``), and the one dispatcher
    (:func:`~stochmix.engine.backends.dispatch.execute`) applies each round through the
    item hooks it returns (``round_items(z, problem, method, ctx)``: ``begin``, ``local``,
    ``whole``, ``row_map``, ``general``, ``end``); checkpoints go to
    ``checkpoint_file(path)`` with ``identity()`` added, and ``check_resume(done, path)``
    refuses ranks at different rounds. The members are those of
    :class:`stochmix.engine.backends.distributed.DistributedBackend`."""

    runs_sharded: bool

    def make_shard(self, layout: Any, n_clients: int, method: Any, dim: int, problem: Any) -> Any:
        """This rank's shard of a run (kept by the backend)."""
        ...

    def initial(self, x0: Any) -> Any:
        """This rank's rows of the initial state."""
        ...

    def reported(self, method: Any) -> Any:
        """What the recorder reads of ``method`` (``output``, ``consensus_error``)."""
        ...

    def round_items(self, z: Any, problem: Any, method: Any, ctx: Any) -> Any:
        """The item hooks of one round on the shard."""
        ...

    def checkpoint_file(self, path: Any) -> Any:
        """This rank's checkpoint file for ``path``."""
        ...

    def identity(self) -> dict:
        """What a checkpoint of this rank records besides the run's identity."""
        ...

    def check_resume(self, done: Any, path: Any) -> None:
        """Refuse to resume unless every rank is at round ``done``."""
        ...

    def common(self, value: int) -> int:
        """Rank 0's ``value`` on every rank (a run without a seed draws rank 0's)."""
        ...


@runtime_checkable
class Typed(Protocol):
    """``dtype``: the dtype of the backend's state (a NumPy or Torch dtype), which the run
    records in its Result and checkpoints (the run's ``dtype`` argument otherwise)."""

    dtype: Any

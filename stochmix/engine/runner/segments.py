"""Segments of small activated rounds, and of the rounds of every node of a small graph,
run by one compiled loop.

Under an activation process a round touches a handful of nodes: a gossip tick averages
two. Building such a round (equations, phases, plan) costs far more than applying it, and
the rounds repeat one structure up to *which* nodes take part: the same phases with the
round's nodes in the same places (its activation record's ``nodes``, and its edges as
positions among them). So the engine writes a round in **slot form**: every row a phase
reads or writes is ``base + nodes[slot]`` (``base`` the row of node 0 in its block) and
every gradient that of ``nodes[slot]``. A :class:`Segmenter` keeps the slot form of the
first round of each *key* (:meth:`~stochmix.engine.model.method.Method.segment_key`, the
number of nodes, the edge positions and, where the method gives one, the round's
variant, :meth:`~stochmix.engine.model.method.Method.segment_variants`), checks it against
the second round with that key, built in full (a key whose rounds differ is never
segmented), and from then on runs the rounds of verified keys without building them: a
batch of up to :data:`BATCH` rounds is one call of a Numba loop that applies every phase
of every round in order, computes the gradients with the problem's compiled one-client
gradient (:meth:`~stochmix.problems.Problem.row_gradient`), and keeps the network average
(the reported model) up to date from the rows each round changes.

What a segmented run records: the reported model of every round, the participants,
gradients, messages, floats and simulated time of every round, ``distance`` at every
round (from the model), the objective and gradient norm at every round where the
problem gives them for many models at once
(:meth:`~stochmix.problems.Problem.closed_form_rows`), ``consensus`` at every round where
the method's consensus error is the spread of its reported rows (the loop keeps a running
sum of squares about a centre, updated by the rows each tick writes and taken afresh every
n ticks or after a 1000-fold fall: O(d) a tick), and the other metrics at the end of
each batch (a batch ends before every round where a scheduled metric is due, and at the
end of the run; batches of rounds of every node record more, see below); the wall time of
a batch is shared equally among its rounds (from the end of the round before it to its
end). The arithmetic is the phases' (sums in the order of their terms), so a segmented
run agrees with a round-by-round run to rounding, not bit for bit; whether rounds are
segmented depends only on the run's inputs, never on timing. After every checkpoint the
segmenter learns its keys again, as a run resumed from that checkpoint does, so that a
run resumed from one of the uninterrupted run's checkpoints ends bit for bit where the
uninterrupted one does (resumed from the end of a shorter run that is not on that
schedule, it agrees to rounding: its batches are cut elsewhere).

The rounds of every node (``Full(n)``) on a graph of at most :data:`MAX_EVERY_NODES` nodes
run the same way (a decentralized method's whole run, barriers included: the loop applies
the phases in order), keyed by the method's plan key
(:meth:`~stochmix.engine.model.method.Method.phase_key`: the first iteration, the position
in a periodic graph sequence), with ``compiled=True`` or, under ``"auto"``, in runs of at
least :data:`EVERY_MIN_ROUNDS` rounds, and where no scheduled metric is due every round
and ``consensus``, if recorded, is the spread of the reported rows
(:func:`batches_every_node`); their batches record the metrics of the reported model
every round (``distance``, and the objective and gradient norm a problem gives in closed
form) and that spread, computed by the loop. A batch stops after the
first round whose reported model crosses the run's divergence threshold, as a
round-by-round run does.

Segments run where: the backend is NumPy's and the layout keeps every row, no callback
is given, the method reports the average of its nodes' models
(:attr:`~stochmix.engine.model.method.Method.reports_node_average`) and takes its
gradients and reports where its declarations say (its model rows, its ``reported_block``,
or for rounds of every node the ratios to its ``ratio_block``: push-sum's ``x / w``; no
``points`` or ``node_models`` of its own), every phase of a round has a slot form (linear,
an element-wise kernel of :data:`~stochmix.engine.runner.slot_form.SLOT_KERNELS`, or a map
affine row by row with a matrix per row: ADMM's exact solves, the dual methods' conjugate
gradients; a gossip tick without one is noted as a slow path), the problem has a compiled gradient
(when the phases take gradients) and a round touches at most :data:`MAX_NODES` nodes.
"""

from __future__ import annotations

import copy

import numpy as np

from ..model.inherited_keys import MethodKeys
from ..model.method import model_points
from ..model.rowmap import RowMap
from .slot_form import SlotProgram, _kernel_triplets, pack, slot_program, unique_rows

__all__ = [
    "BATCH",
    "EVERY_MIN_ROUNDS",
    "MAX_EVERY_NODES",
    "MAX_NODES",
    "NOT_SEGMENTED",
    "SlotProgram",
    "Segmenter",
    "unsegmented",
]

#: Rounds run by one call of the compiled loop, at most.
BATCH = 8192
#: Rounds touching more nodes are run one by one (their building cost is repaid).
MAX_NODES = 64
#: Rounds of every node of a larger graph are run one by one.
MAX_EVERY_NODES = 256
#: Under ``compiled="auto"``, the rounds of every node run in batches in runs of at least
#: this many rounds.
EVERY_MIN_ROUNDS = 2000


class Segmenter:
    """Learns the slot forms of a run's rounds and runs the rounds of verified keys in
    compiled batches (see the module docstring).

    Args:
        method: the run's method (``segment_key``, ``segment_variants``, ``client_node``,
            ``model_block``).
        layout: the run's layout.
        kernel: the problem's compiled gradient ``(kernel, fetch, data)``, or None.
        n_nodes: the nodes whose model rows the reported model averages.
        edge_mixing: the run's ``ctx.edge_mixing`` (only "pairwise" rounds repeat).
        phases: ``phases()`` gives the phases of the round the run just built (the
            planner's), or None.
        samples: the sample gradients of one full gradient of each node, or None.
        problem: the run's problem as its row maps see it (the maps that declare
            themselves affine row by row give their matrices for it), or None.
    """

    def __init__(
        self,
        method,
        layout,
        kernel,
        n_nodes: int,
        edge_mixing: str = "pairwise",
        phases=None,
        samples: np.ndarray | None = None,
        problem=None,
    ):
        self.method, self.layout = method, layout
        #: the run's problem as its row maps see it (per-row affine maps read it)
        self.problem = problem
        #: the sample gradients of one full gradient of each node (1 each where None)
        self.samples = samples
        self.phases = phases  # () -> the phases of the round just built, or None
        self.edge_mixing = edge_mixing
        self.kernel = kernel
        self.n = n_nodes
        self.model_base = layout.start(method.model_block) - layout.first_node(method.model_block)
        reported = getattr(method, "reported_block", None) or method.model_block
        #: the row of node 0 of the block the method reports (its node models)
        self.report_base = layout.start(reported) - layout.first_node(reported)
        #: whether the method's consensus error is the spread of those rows, which a
        #: batch of rounds of every node computes every round
        self.spread = bool(getattr(method, "consensus_of_rows", False))
        ratio = getattr(method, "ratio_block", None)
        #: the row of node 0 of the block that divides the model and reported rows
        #: (push-sum's weights), or -1
        self.ratio_base = -1 if ratio is None else layout.start(ratio) - layout.first_node(ratio)
        #: whether rounds of every node are batched (:func:`segmenter` sets it)
        self.every_rounds = False
        self.keys: dict = {}  # key -> program index | (candidate, traffic) | False
        self.verified: dict = {}  # key -> program index, for the verified keys
        # the method's keys: round 0's, and that of every later round (the contract of
        # Method.segment_key)
        keys = MethodKeys(method)
        self.first_key = keys.get("segment_key", 0)
        self.later_key = keys.get("segment_key", 1)
        self.method_keys = keys
        self.limit = 0  # the round after which the pending batch must run
        self.programs: list[SlotProgram] = []
        #: per verified program, whether its key is that of a round of every node
        self.everyone: list[bool] = []
        #: per verified program, its (gradients, messages, floats): the same every round
        self.traffics: list[tuple] = []
        self.packed: tuple | None = None
        self.pending: list = []  # (round, nodes, program, record)
        #: where a gossip tick refused for want of a slot form is noted (the run's
        #: :class:`~stochmix.engine.plan.slowpath.SlowPaths`), or None
        self.notes = None

    def key(self, r: int, nodes: np.ndarray, record):
        """The round's key, or None when it cannot be segmented."""
        if getattr(record, "edges", None) is None:
            return self._every_key(r, nodes)
        if not 0 < nodes.size <= MAX_NODES:
            return None
        if self.edge_mixing != "pairwise":
            return None  # the method's weights: coefficients that depend on the edge
        base = self.first_key if r == 0 else self.later_key
        if base is None:
            return None
        key = (base, nodes.size, nodes.searchsorted(record.edges).tobytes())
        variant = self.method.segment_variants(r, nodes[None, :])
        return key if variant is None else (*key, int(variant[0]))

    def _every_key(self, r: int, nodes: np.ndarray):
        """The key of a round in which every node takes part (``Full(n)``): the method's
        plan key (:meth:`~stochmix.engine.model.method.Method.phase_key`: equal keys, the
        same phases), for graphs of at most :data:`MAX_EVERY_NODES` nodes; else None."""
        if not self.every_rounds or nodes.size != self.n or nodes.size > MAX_EVERY_NODES:
            return None
        base = self.method_keys.get("phase_key", r, nodes)
        return None if base is None else ("every node", base)

    @staticmethod
    def every_node(key) -> bool:
        """Whether ``key`` is that of a round in which every node takes part: its batches
        record every metric of every round (the ticks of a gossip process record those
        without rows in closed form, other than ``consensus``, at the end of each batch)."""
        return isinstance(key, tuple) and key[:1] == ("every node",)

    def _first(self, key) -> bool:
        """Whether ``key`` is a tick's key of round 0 alone (the method's first iteration
        differs from the later ones: trackers start): it never repeats, so it is no slow
        path that it is built in full."""
        return self.first_key != self.later_key and key[:1] == (self.first_key,)

    def every_node_batch(self, programs: np.ndarray) -> bool:
        """Whether every round of a batch (its programs) is a round of every node."""
        return all(self.everyone[p] for p in np.unique(programs))

    def forget(self) -> None:
        """Learn every key again from the next rounds on, as a fresh run does (after a
        checkpoint: a run resumed from it starts with nothing learned, and the rounds a
        segmenter builds in full round differently from those it runs compiled)."""
        assert not self.pending  # a batch ends at every checkpoint
        self.keys, self.verified = {}, {}
        self.programs, self.traffics, self.packed, self.everyone = [], [], None, []

    def program(self, key) -> int | None:
        """The verified program of ``key``, or None."""
        return self.verified.get(key)

    def learn(self, key, phases, nodes: np.ndarray, traffic: tuple, rebuild=None) -> None:
        """Take the slot form of a round built in full: the first of its key is kept, the
        second must equal it (then the key is verified), else the key is never segmented.
        ``phases`` None (the round's plan came from the planner's cache, which a run
        resumed from a checkpoint does not have): ``rebuild()`` gives them, so that which
        rounds a run learns from depends on its keys alone."""
        found = self.keys.get(key)
        if found is False or self.program(key) is not None:
            return
        if phases is None and rebuild is not None:
            phases = rebuild()
        if phases is None:
            return
        made = slot_program(phases, self.layout, nodes, self.method.client_node, self.problem)
        if made is None or (made.gradients and self.kernel is None):
            self.keys[key] = False
            if self.notes is not None and not self.every_node(key) and not self._first(key):
                self.notes.add("", NOT_SEGMENTED, _no_slot_form(phases, made))
            return
        # the sample gradients of a round are those of its nodes: counted from the slots
        if self.sampled(made, nodes[None, :])[0] != traffic[3]:
            self.keys[key] = False
            return
        if found is None:
            self.keys[key] = (made, traffic[:3])
            return
        first, first_traffic = found
        if not (first.same(made) and first_traffic == traffic[:3]):
            self.keys[key] = False
            return
        self.keys[key] = self.verified[key] = len(self.programs)
        self.everyone.append(self.every_node(key))
        self.programs.append(first)
        self.traffics.append(first_traffic)
        self.packed = pack(self.programs)

    def sampled(self, program: SlotProgram, nodes: np.ndarray) -> np.ndarray:
        """The sample gradients of rounds of ``program`` with nodes ``nodes`` (B, k): one
        full gradient of the node in each gradient slot."""
        taken = nodes[:, program.c_slot]
        if self.samples is None:
            return np.full(nodes.shape[0], taken.shape[1], dtype=np.int64)
        return self.samples[taken].sum(axis=1, dtype=np.int64)

    def traffic(self, nodes: np.ndarray, programs: np.ndarray) -> np.ndarray:
        """The (gradients, messages, floats, sample gradients) of a batch's rounds,
        shape (B, 4)."""
        out = np.zeros((programs.size, 4), dtype=np.int64)
        out[:, :3] = np.asarray(self.traffics, dtype=np.int64).reshape(-1, 3)[programs]
        for p in np.unique(programs):
            where = programs == p
            out[where, 3] = self.sampled(self.programs[p], nodes[where])
        return out

    def take_pending(self) -> tuple:
        """The pending rounds as arrays: ``(first round, nodes (B, k) padded with 0,
        programs (B,), times (B,) or None, sizes (B,))``; none pending after."""
        pending, self.pending = self.pending, []
        sizes = np.fromiter((item[1].size for item in pending), dtype=np.int64, count=len(pending))
        nodes = np.zeros((len(pending), int(sizes.max())), dtype=np.int64)
        for i, item in enumerate(pending):
            nodes[i, : sizes[i]] = item[1]
        programs = np.fromiter((item[2] for item in pending), dtype=np.int64, count=len(pending))
        times = None
        if pending[0][3].time is not None:
            times = np.fromiter((item[3].time for item in pending), float, count=len(pending))
        return pending[0][0], nodes, programs, times, sizes

    def block(self, stream, r: int, limit: int) -> tuple | None:
        """The next records of ``stream`` (an
        :class:`~stochmix.participation.ActivationStream`) that can run as a batch from
        round ``r`` on, taken from it, as :meth:`take_pending` gives them, up to round
        ``limit``; None (nothing taken) when the next record's key is not verified."""
        nodes, edges, times = stream.peek(limit - r)
        if edges is None or nodes.shape[1] == 0 or nodes.shape[1] > MAX_NODES:
            return None
        base = self.first_key if r == 0 else self.later_key
        if base is None or (r == 0 and self.later_key != base):
            return None
        count = nodes.shape[0]
        positions = (edges[..., None] > nodes[:, None, None, :]).sum(axis=-1)
        flat = positions.reshape(count, -1)
        variants = self.method.segment_variants(r, nodes)
        if variants is not None:  # the per-round part of the key: a last column
            flat = np.column_stack([flat, np.asarray(variants, dtype=np.int64)])
        patterns, which = unique_rows(flat)
        width, size = positions[0].size, nodes.shape[1]
        keys = [
            (base, size, np.ascontiguousarray(p[:width]).tobytes())
            + (() if variants is None else (int(p[width]),))
            for p in patterns
        ]
        known = np.array([self.verified.get(k, -1) for k in keys], dtype=np.int64)
        programs = known[which.reshape(-1)]
        unknown = np.flatnonzero(programs < 0)
        count = int(unknown[0]) if unknown.size else count
        if count == 0:
            return None
        stream.advance(count)
        sizes = np.full(count, nodes.shape[1], dtype=np.int64)
        return r, nodes[:count], programs[:count], None if times is None else times[:count], sizes

    def run(
        self,
        z: np.ndarray,
        nodes: np.ndarray,
        programs: np.ndarray,
        too_large: float = np.inf,
        consensus: np.ndarray | None = None,
        fresh: bool = False,
    ) -> tuple:
        """Run the rounds (their nodes (B, k), their programs (B,)) on ``z`` in place:
        ``(rounds done, their reported models, stopped by the threshold)``: the rounds stop
        at the first one whose phase writes a value that is not finite (not counted as
        done) or whose reported model has an entry above ``too_large`` in absolute value
        (counted: the run's divergence threshold, checked after every round as a
        round-by-round run checks it). ``consensus``: None, or an array of shape (B,) that
        gets each round's consensus error (the spread of the reported rows, see
        :attr:`spread`; O(n d) a round for rounds of every node, O(d) a tick for gossip ticks
        from a running sum of squares taken afresh every n ticks). ``fresh``: the reported
        average is summed afresh every round (rounds of every node: O(n d), no running
        sum to drift), not kept as a running sum (gossip ticks: O(the rows written))."""
        from ..codegen.segment_kernel import batch_function


        assert self.packed is not None  # a verified key packed its program
        P0, arrays = self.packed
        first = self.report_base + self.method.client_node
        # the running sum of the reported rows; rounds of every node sum them (or their
        # ratios) afresh in the loop before reading it
        sums = np.zeros(z.shape[1])
        if not fresh:
            reported = z[first : first + self.n]
            if self.ratio_base >= 0:  # (push-sum: the sum of the ratios x / w)
                divisor = self.ratio_base + self.method.client_node
                reported = reported / z[divisor : divisor + self.n]
            sums = reported.sum(axis=0).astype(np.float64)
        server = np.empty((programs.size, z.shape[1]))
        rows = int(np.max(np.diff(arrays["t0"]), initial=1))
        clients = int(np.max(np.diff(arrays["c0"]), initial=1))
        tbuf = np.empty((max(rows, 1), z.shape[1]))
        gbuf = np.empty((max(clients, 1), z.shape[1]), dtype=z.dtype)
        gradients = any(p.gradients for p in self.programs)
        if self.kernel is None or not gradients:
            run, data = batch_function(), (np.zeros(1),)
        else:
            kernel, fetch, data = self.kernel
            run = batch_function(kernel, fetch)
        done = run(
            z, np.ascontiguousarray(nodes), programs, P0, arrays["t0"], arrays["t_base"],
            arrays["t_slot"], arrays["m0"], arrays["m_target"], arrays["m_base"],
            arrays["m_slot"], arrays["m_coef"], arrays["g0"], arrays["g_target"],
            arrays["g_client"], arrays["g_coef"], arrays["c0"], arrays["c_slot"],
            arrays["k_kind"], arrays["k_par"], data,
            self.model_base, self.method.client_node, float(self.n), sums, server, tbuf, gbuf,
            float(too_large), self.report_base,
            np.zeros(0) if consensus is None else consensus, bool(fresh), self.ratio_base,
            np.empty(z.shape[1], dtype=z.dtype), arrays["k_tab"], arrays["k_mat"],
            arrays["a_off"], arrays["a_diag"], arrays["a_mat"], np.empty(z.shape[1]),
        )  # fmt: skip
        done = int(done)
        large = done < 0
        done = -done if large else done
        return done, server[:done], large


#: What a run without segments does instead (a :class:`~stochmix.engine.plan.slowpath.SlowPath`).
NOT_SEGMENTED = "every tick built in full"


def _no_slot_form(phases, made) -> str:
    """Why the ticks of a kind are built in full though the method gives their key."""
    if made is not None:
        return (
            "the ticks take gradients and the problem has no compiled gradient: each "
            "tick builds its equations and plan"
        )
    maps = [p for p in phases if isinstance(p, RowMap) and _kernel_triplets(p) is None]
    what = f"a row map ({maps[0].name})" if maps else "a phase"
    return (
        f"a tick holds {what} that the compiled loop does not apply (it applies the "
        "element-wise kernels: the prox of L1 or the elastic net, a projection onto a box "
        "with scalar bounds or x >= 0; and maps that are affine row by row, row_affine): "
        "each tick builds its equations and plan"
    )


def _runs_batches(method, back, layout, callback) -> bool:
    """What every batch needs of a run: the NumPy backend with every row kept, no
    callback, a method that reports its nodes' average, with no hook of
    :data:`REPORT_HOOKS` set on the instance."""
    from ..backends import NumpyBackend

    return (
        type(back) is NumpyBackend
        and not layout.scratch
        and callback is None
        and bool(getattr(method, "reports_node_average", False))
        and not _instance_hooks(method)
    )


def _could_segment(method, participation, back, layout, callback) -> bool:
    """What gossip ticks need of a run besides the method's key (:func:`segmenter` and
    :func:`unsegmented` ask the same): edge activation and :func:`_runs_batches`."""
    return getattr(participation, "activates", "nodes") == "edges" and _runs_batches(
        method, back, layout, callback
    )


#: hooks of what a round reports that a batch computes itself (the average of the
#: reported rows, their spread)
REPORT_HOOKS = ("output", "node_models", "consensus_error", "points")


def _instance_hooks(method) -> bool:
    """Whether ``method`` has a hook of :data:`REPORT_HOOKS` set on the instance (a
    function of its own, which the class's declarations do not describe)."""
    return any(name in vars(method) for name in REPORT_HOOKS)


def _everyone(method, participation, back, layout, callback, compiled, rounds) -> bool:
    """Whether the rounds of every node of a run may run in compiled batches: every node
    takes part in every round, on a graph of at most :data:`MAX_EVERY_NODES` nodes,
    :func:`_runs_batches`, and ``compiled=True`` or, under ``"auto"``, a run of at least
    :data:`EVERY_MIN_ROUNDS` rounds (loading the compiled loop costs a run's first batch
    0.1-0.3 s)."""
    n = int(getattr(participation, "n_clients", 0) or 0)
    if not 0 < n <= MAX_EVERY_NODES or getattr(participation, "activates", "nodes") == "edges":
        return False
    if compiled is not True and (compiled != "auto" or rounds < EVERY_MIN_ROUNDS):
        return False
    if not _runs_batches(method, back, layout, callback):
        return False
    p = participation.probabilities
    return p is not None and bool(np.all(np.asarray(p) == 1.0))


def batches_every_node(recorder, spread: bool) -> bool:
    """Whether the rounds of every node run in compiled batches under this recording:
    where the scheduled metrics are due less often than every round, and ``consensus``
    is not recorded or is the spread of the reported rows (``spread``:
    :attr:`Segmenter.spread`), which the batch's loop computes every round. A batch
    records the metrics of the reported model every round (``distance``, and those a
    problem gives in closed form:
    :meth:`~stochmix.engine.runner.recorder.Recorder.model_metrics`) from the models it
    keeps; a scheduled metric ends a batch when it is due, and a batch of one round costs
    more than the round run as planned."""
    if "consensus" in recorder.names and not spread:
        return False
    return not recorder.scheduled or recorder.interval > 1


def unsegmented(method, participation, back, layout, callback) -> str | None:
    """Why a run that could run its gossip ticks in compiled segments does not: the
    method gives no :meth:`~stochmix.engine.model.method.Method.segment_key` (a
    decentralized method that does not set ``rounds_repeat``: the hint to set it; one
    whose step decays, or whose gradients or reports are not at its model rows, such as
    K-GT's: said so, each tick built in full); None where segments run or could not run
    anyway."""
    if not _could_segment(method, participation, back, layout, callback):
        return None
    keys = MethodKeys(method)
    if keys.get("segment_key", 1) is not None:
        return None
    built = (
        "each gossip tick builds its equations and plan (about 100x the cost of a tick run "
        "in a compiled segment)"
    )
    why = keys.why("segment_key")
    if why is not None and method.segment_key(1) is not None:
        return f"{why}: each tick builds its equations and plan"
    hint = "give it a segment_key"
    if hasattr(method, "rounds_repeat"):
        probe = copy.copy(method)  # what the method would say with the flag set
        probe.rounds_repeat = True
        if probe.segment_key(1) is not None:
            if isinstance(getattr(type(method), "rounds_repeat", None), property):
                return (
                    f"{type(method).__name__}.rounds_repeat is False (for these arguments "
                    f"or as set on the instance; see its documentation), so {built}"
                )
            hint = "set rounds_repeat = True on the class"
        else:  # with the flag set, still no key: a decaying step, or other points or rows
            if getattr(method, "decay", 0.0):
                probe.decay = 0.0
                if probe.segment_key(1) is not None:
                    return (
                        "the method's step decays (its iterations change with k), so its "
                        f"ticks cannot share a program: {built}"
                    )
            if not model_points(method):
                return f"the method takes its gradients elsewhere than its model rows: {built}"
            return (
                "the method's nodes report other rows than the ones its class declares, so "
                f"its ticks cannot share a program: {built}"
            )
    elif not model_points(method):
        return f"the method takes its gradients elsewhere than its model rows: {built}"
    return (
        f"the method does not say that its iterations repeat, so {built}; if every "
        "iteration after the first builds the same linear phases (no row map) up to which "
        f"nodes take part, {hint} (the engine checks the claim on the second tick)"
    )


def segmenter(
    method, problem, participation, layout, ctx, back, caps, dtype, callback, phases,
    rounds: int = 0, recorder=None, notes=None,
):  # fmt: skip
    """The run's :class:`Segmenter`, or None where segments cannot run (see the module
    docstring): an edge-activation process (or every node in every round of a small graph,
    see :func:`_everyone`; ``rounds``: the run's length; ``recorder``: the run's
    :class:`~stochmix.engine.runner.recorder.Recorder`, whose metrics may keep such rounds
    from batches, :func:`batches_every_node`; None: they are not batched), the NumPy
    backend with every row kept, no callback, a method with a
    :meth:`~stochmix.engine.model.method.Method.segment_key`, and ``compiled`` not False."""
    from ..plan.gradients import compiled_refusal, numba_unavailable

    every = _everyone(method, participation, back, layout, callback, caps.compiled, rounds)
    if (
        not (every or _could_segment(method, participation, back, layout, callback))
        or caps.compiled is False
        or MethodKeys(method).get("segment_key", 1) is None
        or numba_unavailable() is not None
    ):
        return None
    kernel = None
    if compiled_refusal(problem) is None:
        kernel = problem.row_gradient(np.dtype(dtype))
    made = Segmenter(
        method, layout, kernel, ctx.n_clients, getattr(ctx, "edge_mixing", "pairwise"), phases,
        getattr(ctx, "sample_counts", None), getattr(ctx, "map_problem", None) or problem,
    )  # fmt: skip
    made.every_rounds = (
        every and recorder is not None and batches_every_node(recorder, made.spread)
    )
    made.notes = notes
    return made

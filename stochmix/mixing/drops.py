"""Imperfect communication as mixing: messages dropped per edge, re-normalized weights.

:class:`MessageDrops` wraps any :class:`~stochmix.mixing.GraphSequence`. At step k each
directed edge ``j -> i`` (``i != j``) of the wrapped graph is dropped or delivered, and the
matrix of step k is the wrapped sequence's weight rule applied to the *surviving* graph, so
a rule keeps the stochasticity it promises whenever the surviving graph allows it:

====================  =====================================  ===============================
rule                  independent drops (``symmetric``       symmetric drops
                      False)                                 (``symmetric=True``)
====================  =====================================  ===============================
``"row"``             row-stochastic                         row-stochastic
``"column"``          column-stochastic                      column-stochastic
``"metropolis"``,     refused (ValueError): the surviving    doubly stochastic, symmetric
``"fastest"``         graph is directed                      (undirected wrapped graph);
                                                             ``"fdla"``: rows and columns
``"fdla"``                                                   sum to one, symmetric
``"natural"``,        rows keep their sums (row-stochastic   rows keep their sums; columns
``lost_weight=``      stays row-stochastic); columns do not  too when the natural W is
``"receiver"``                                               symmetric (doubly stays doubly)
``"natural"``,        columns keep their sums; rows do not   columns keep their sums; rows
``lost_weight=``                                             too when the natural W is
``"sender"``                                                 symmetric
====================  =====================================  ===============================

``"natural"`` weights are the graph's own: a dropped edge's weight ``W[i, j]`` moves to the
diagonal, to ``W[i, i]`` (``lost_weight="receiver"``: node i uses its own value in place of
the missing message) or to ``W[j, j]`` (``"sender"``: node j keeps the share it could not
deliver). Directed doubly stochastic weights (the one-peer exponential graph's 1/2) stay
only row- (or column-) stochastic under drops, whatever the mode: no local rule can keep
both sums when only one direction of a link exists. Methods check what they need at every
step (``needs``) and that every step's graph is strongly connected; with drops either may
fail at some step, and the error names it (``check_mixing=False`` runs such a method
anyway: gradient tracking only needs the graphs to be connected jointly over windows).

**Drop models.**

``model="independent"`` (``probability=p``): each link is dropped at each step with
    probability p, independently across links and steps. Step k draws from
    ``np.random.default_rng([seed, k, TAG])`` alone (``TAG`` keeps the drop stream apart from
    a :class:`~stochmix.mixing.RandomSequence` with the same seed), so any step can be asked
    for in any order.
``model="gilbert_elliott"``: each link carries a two-state Markov chain (good/bad) that
    moves good -> bad with probability ``p_good_to_bad`` and bad -> good with probability
    ``p_bad_to_good`` at every step, starting from its stationary law; a link in state s is
    dropped with probability ``drop_in_good`` / ``drop_in_bad``. The stationary bad
    fraction is ``pi = p_good_to_bad / (p_good_to_bad + p_bad_to_good)`` and the stationary
    drop rate ``(1 - pi) drop_in_good + pi drop_in_bad``; bad periods last
    ``1 / p_bad_to_good`` steps on average (geometric), so with the defaults
    ``drop_in_good = 0``, ``drop_in_bad = 1`` losses come in bursts of mean length
    ``1 / p_bad_to_good``.

**Links.** A link is a directed edge ``j -> i``, or, with ``symmetric=True``, an unordered
pair ``{i, j}``, whose two directions are dropped together (one draw, one chain). The
Gilbert–Elliott chains live on a fixed set of links: the union of the wrapped graphs over
one period for a periodic wrapped sequence (a static one included), every node pair for a
non-periodic one (at most ``2**22`` pairs, n <= 2048; beyond that use the independent model
or a periodic sequence). Every chain moves at every step, used or not.

**Reproducibility of the chains.** The chain of step t moves with draws from
``default_rng([seed, t, TAG, 0])`` (the state of step 0 is drawn from the stationary law
with the same stream), the per-step drops with ``default_rng([seed, t, TAG, 1])``: the
state of step k is a function of ``(seed, k)``, whatever order the steps are asked in. The
sequence keeps the last step's state and moves it forward (one vectorized update per step,
over every link at once); a step before it restarts from the nearest checkpoint (one packed
state every 1024 steps, the 32 latest and step 0's kept) or from step 0.

**Period.** Random drops make the sequence non-periodic (``period = None``); drops that are
certain (p in {0, 1}; Gilbert–Elliott with ``drop_in_good = drop_in_bad`` in {0, 1}, or
never bad with ``drop_in_good`` in {0, 1}) keep the wrapped sequence's period. A step
where nothing is dropped gives exactly the wrapped sequence's matrix. The fingerprint holds
the wrapped sequence's, every drop parameter and the seed.
"""

from __future__ import annotations

from typing import cast

import networkx as nx
import numpy as np
import scipy.sparse as sp
from jaxtyping import Int

from .._names import DROP_MODEL_ALIASES, renamed
from .._validate import _show, as_bool, as_float, as_int, choice
from .graphs import matrix_to_graph
from .sequences import BY_RULE, UNDIRECTED_RULES, GraphSequence, _pattern

#: Added to every drop stream's seed, so drops and a RandomSequence with the same seed
#: draw from different streams (the bytes of "drop").
TAG = 0x64726F70

MODELS = ("independent", "gilbert_elliott")
LOST_WEIGHT = ("receiver", "sender")

_CHAIN, _DRAW = 0, 1
_RULE_NAMES = {"metropolis": "Metropolis", "fastest": "fastest-mixing", "fdla": "FDLA"}
_CHECKPOINT_EVERY = 1024
_CHECKPOINTS = 32
_MAX_PAIRS = 2**22
_EDGE_CACHE = 256


class MessageDrops(GraphSequence):
    """A graph sequence whose messages are dropped per link, with re-normalized weights
    (see the module docstring for the rules' stochasticity under each drop mode).

    Args:
        graphs: the wrapped :class:`GraphSequence`.
        probability: the drop probability p in [0, 1] of ``model="independent"``.
        model: ``"independent"`` or ``"gilbert_elliott"``.
        p_good_to_bad: Gilbert–Elliott: probability in [0, 1] that a good link turns bad.
        p_bad_to_good: Gilbert–Elliott: probability in (0, 1] that a bad link recovers;
            bad periods last ``1 / p_bad_to_good`` steps on average.
        drop_in_good: Gilbert–Elliott: drop probability of a good link, in [0, 1].
        drop_in_bad: Gilbert–Elliott: drop probability of a bad link, in [0, 1].
        symmetric: drop the two directions of a node pair together (one draw per pair).
        lost_weight: ``"receiver"`` or ``"sender"``: the diagonal that takes a dropped
            edge's weight under the ``"natural"`` rule.
        seed: nonnegative int; ``None`` draws fresh entropy once (kept in ``self.seed``).

    Example::

        lossy = MessageDrops(StaticSequence(nx.cycle_graph(8)), probability=0.1,
                             symmetric=True, seed=0)
        bursty = MessageDrops(OnePeerExponential(8), model="gilbert_elliott",
                              p_good_to_bad=0.05, p_bad_to_good=0.5, seed=0)
    """

    def __init__(
        self,
        graphs: GraphSequence,
        probability: float | None = None,
        *,
        model: str = "independent",
        p_good_to_bad: float | None = None,
        p_bad_to_good: float | None = None,
        drop_in_good: float = 0.0,
        drop_in_bad: float = 1.0,
        symmetric: bool = False,
        lost_weight: str = "receiver",
        seed: int | None = None,
    ):
        """Wrap ``graphs`` in message drops, after checking every parameter.

        The parameters are checked against ``model`` (one of the other model's is refused,
        not ignored); the seed is fixed (``None`` draws fresh entropy once, kept in
        :attr:`seed`); :attr:`period` is the wrapped sequence's when the drops are certain
        (p in {0, 1}, ...; see the module docstring), else None; a Gilbert–Elliott model
        with random drops fixes the set of links its chains live on (the union of one
        period's graphs, or every node pair of a non-periodic sequence). Nothing is drawn
        here: step k's drops are drawn when its matrix is asked for.

        Args:
            graphs (GraphSequence): the wrapped sequence over n nodes.
            probability (float | None): ``model="independent"``: the probability in
                [0, 1] that a link is dropped at a step (required there); None with
                ``"gilbert_elliott"``.
            model (str): ``"independent"`` (default) or ``"gilbert_elliott"`` (the old
                ``"gilbert_elliott"`` is accepted with a DeprecationWarning for one release).
            p_good_to_bad (float | None): Gilbert–Elliott: the probability in [0, 1] that
                a good link turns bad at a step (required there); None with
                ``"independent"``.
            p_bad_to_good (float | None): Gilbert–Elliott: the probability in (0, 1] that
                a bad link recovers at a step (bad periods last ``1 / p_bad_to_good``
                steps on average; required there); None with ``"independent"``.
            drop_in_good (float): Gilbert–Elliott: drop probability of a good link, in
                [0, 1] (default 0; left at 0 with ``"independent"``).
            drop_in_bad (float): Gilbert–Elliott: drop probability of a bad link, in
                [0, 1] (default 1; left at 1 with ``"independent"``).
            symmetric (bool): drop the two directions of a node pair together (one draw,
                or one chain, per unordered pair {i, j}); default False, each directed
                edge on its own.
            lost_weight (str): ``"receiver"`` (default) or ``"sender"``: the diagonal
                entry (W[i, i] or W[j, j]) that takes a dropped edge j -> i's weight
                under the ``"natural"`` rule.
            seed (int | None): nonnegative int seeding every drop stream; None draws one.

        Raises:
            TypeError: ``graphs`` not a :class:`GraphSequence`; a probability that is not
                a real number (None where the model needs it, a bool, a string);
                ``symmetric`` not True or False; ``model``, ``lost_weight`` not strings;
                a ``seed`` that is not an integer.
            ValueError: a probability outside its range; a parameter of the other model;
                an unknown ``model`` or ``lost_weight``; a negative ``seed``; a
                Gilbert–Elliott model over a non-periodic sequence of more than 2048
                nodes (more than ``2**22`` node pairs).
        """
        if not isinstance(graphs, GraphSequence):
            raise TypeError(
                f"graphs must be a GraphSequence, got {type(graphs).__name__}: {_show(graphs)}"
            )
        self.graphs = graphs
        self.model = choice(renamed(model, "model", DROP_MODEL_ALIASES), "model", MODELS)
        drop_in_good = as_float(drop_in_good, "drop_in_good", nonnegative=True, maximum=1.0)
        drop_in_bad = as_float(drop_in_bad, "drop_in_bad", nonnegative=True, maximum=1.0)
        # the parameters of the model not chosen are None
        self.probability: float | None
        self.p_good_to_bad: float | None
        self.p_bad_to_good: float | None
        if self.model == "independent":
            for name, value in (("p_good_to_bad", p_good_to_bad), ("p_bad_to_good", p_bad_to_good)):
                if value is not None:
                    raise ValueError(
                        f"{name} is a parameter of model='gilbert_elliott', got {_show(value)} "
                        "with model='independent' (which takes probability)"
                    )
            for name, value, default in (
                ("drop_in_good", drop_in_good, 0.0),
                ("drop_in_bad", drop_in_bad, 1.0),
            ):
                if value != default:
                    raise ValueError(
                        f"{name} is a parameter of model='gilbert_elliott', got {value} with "
                        "model='independent' (which takes probability)"
                    )
            self.probability = as_float(probability, "probability", nonnegative=True, maximum=1.0)
            self.p_good_to_bad = self.p_bad_to_good = None
        else:
            if probability is not None:
                raise ValueError(
                    f"probability is the parameter of model='independent', got "
                    f"{_show(probability)} with model='gilbert_elliott' (which takes "
                    "p_good_to_bad, p_bad_to_good, drop_in_good and drop_in_bad)"
                )
            self.probability = None
            self.p_good_to_bad = as_float(
                p_good_to_bad, "p_good_to_bad", nonnegative=True, maximum=1.0
            )
            self.p_bad_to_good = as_float(
                p_bad_to_good, "p_bad_to_good", positive=True, maximum=1.0
            )
        self.drop_in_good, self.drop_in_bad = drop_in_good, drop_in_bad
        self.symmetric = as_bool(symmetric, "symmetric")
        self.lost_weight = choice(lost_weight, "lost_weight", LOST_WEIGHT)
        if seed is None:
            seed = int(cast(int, np.random.SeedSequence().entropy))  # fresh: one int
        self.seed = as_int(seed, "seed", minimum=0)
        self.period = graphs.period if self._certain() else None
        self._edge_cache: dict = {}
        self._last_drops: tuple | None = None
        self._chain: tuple[int, np.ndarray] | None = None
        self._checkpoints: dict[int, np.ndarray] = {}
        self._links: np.ndarray | None = None  # sorted link keys; None: every node pair
        if self.model == "gilbert_elliott" and not self._certain():
            self._links = self._link_set()

    # ------------------------------------------------------------------------- the model
    def _independent(self) -> float:
        """The drop probability p of the independent model."""
        assert self.probability is not None, "model='independent' sets it"
        return self.probability

    def _rates(self) -> tuple[float, float]:
        """``(p_good_to_bad, p_bad_to_good)`` of the Gilbert–Elliott model."""
        p_gb, p_bg = self.p_good_to_bad, self.p_bad_to_good
        assert p_gb is not None and p_bg is not None, "model='gilbert_elliott' sets them"
        return p_gb, p_bg

    def _certain(self) -> bool:
        """Whether the drops are not random (then the wrapped period stays)."""
        if self.model == "independent":
            return self.probability in (0.0, 1.0)
        never_bad = self.p_good_to_bad == 0.0
        same = self.drop_in_good == self.drop_in_bad
        return self.drop_in_good in (0.0, 1.0) and (same or never_bad)

    @property
    def n_nodes(self) -> int:
        """Number of nodes n (the wrapped sequence's)."""
        return self.graphs.n_nodes

    @property
    def stationary_bad(self) -> float:
        """The stationary fraction of bad links, ``p_gb / (p_gb + p_bg)`` (0 for the
        independent model)."""
        if self.model == "independent":
            return 0.0
        p_gb, p_bg = self._rates()
        return p_gb / (p_gb + p_bg)

    @property
    def drop_rate(self) -> float:
        """The stationary probability that a link is dropped at a step: p for the
        independent model, ``(1 - pi) drop_in_good + pi drop_in_bad`` for Gilbert–Elliott."""
        if self.model == "independent":
            return self._independent()
        pi = self.stationary_bad
        return (1.0 - pi) * self.drop_in_good + pi * self.drop_in_bad

    @property
    def mean_burst_length(self) -> float:
        """Mean length of a run of consecutive drops of one link: ``1 / (1 - p)`` for the
        independent model (inf at p = 1); for Gilbert–Elliott the mean bad period,
        ``1 / p_bad_to_good``, which is the mean run of drops when ``drop_in_good = 0``
        and ``drop_in_bad = 1``."""
        if self.model == "independent":
            p = self._independent()
            return np.inf if p == 1.0 else 1.0 / (1.0 - p)
        return 1.0 / self._rates()[1]

    def _rng(self, k: int, *stream: int) -> np.random.Generator:
        return np.random.default_rng([self.seed, k, TAG, *stream])

    # ------------------------------------------------------------------ edges and links
    def _edges(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The wrapped graph's edges ``src -> dst`` of step k, ``src != dst``, sorted by
        ``(dst, src)``."""
        period = self.graphs.period
        key = k % period if period else k
        found = self._edge_cache.get(key)
        if found is None:
            adjacency = self.graphs.adjacency(k)
            n = adjacency.shape[0]
            dst = np.repeat(np.arange(n, dtype=np.int64), np.diff(adjacency.indptr))
            found = (adjacency.indices.astype(np.int64), dst)
            if not period or len(self._edge_cache) >= _EDGE_CACHE:
                self._edge_cache.clear()
            self._edge_cache[key] = found
        return found

    def _keys(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """The link key of each edge: ``dst * n + src``, or ``min * n + max`` when
        symmetric (both directions of a pair share it)."""
        n = self.n_nodes
        if self.symmetric:
            return np.minimum(src, dst) * n + np.maximum(src, dst)
        return dst * n + src

    def _link_set(self) -> np.ndarray | None:
        """The Gilbert–Elliott links: the sorted keys of the union of one period, or None
        (every node pair, key = index) for a non-periodic wrapped sequence."""
        period = self.graphs.period
        if period is None:
            n = self.n_nodes
            if n * n > _MAX_PAIRS:
                raise ValueError(
                    f"model='gilbert_elliott' keeps one chain per node pair of a non-periodic "
                    f"sequence: n = {n} gives {n * n} pairs, more than {_MAX_PAIRS}; wrap a "
                    "periodic (or static) sequence or use model='independent'"
                )
            return None
        keys = [self._keys(*self._edges(t)) for t in range(period)]
        return np.unique(np.concatenate(keys)) if keys else np.zeros(0, np.int64)

    def _link_count(self) -> int:
        return self.n_nodes**2 if self._links is None else self._links.size

    # ---------------------------------------------------------------------- the chains
    def _state(self, k: int) -> np.ndarray:
        """The bad/good state of every link at step k (bool, True = bad)."""
        if self._chain is not None and self._chain[0] == k:
            return self._chain[1]
        size = self._link_count()
        if self._chain is not None and self._chain[0] < k:
            t, state = self._chain
        else:
            earlier = [c for c in self._checkpoints if c <= k]
            if earlier:
                t = max(earlier)
                state = np.unpackbits(self._checkpoints[t], count=size).astype(bool)
            else:
                t, state = 0, self._rng(0, _CHAIN).random(size) < self.stationary_bad
                self._checkpoints[0] = np.packbits(state)
        p_gb, p_bg = self._rates()
        while t < k:
            t += 1
            draw = self._rng(t, _CHAIN).random(size)
            state = np.where(state, draw >= p_bg, draw < p_gb)
            if t % _CHECKPOINT_EVERY == 0 and t not in self._checkpoints:
                self._checkpoints[t] = np.packbits(state)
                if len(self._checkpoints) > _CHECKPOINTS + 1:  # keep step 0 and the latest
                    del self._checkpoints[min(c for c in self._checkpoints if c > 0)]
        self._chain = (k, state)
        return state

    # ------------------------------------------------------------------------ the drops
    def _drops(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(src, dst, dropped)``: the wrapped edges of step k and which are dropped."""
        if self._last_drops is not None and self._last_drops[0] == k:
            return self._last_drops[1:]
        src, dst = self._edges(k)
        if self._certain():
            rate = self.probability if self.model == "independent" else self.drop_in_good
            dropped = np.full(src.size, rate == 1.0)
        elif self.model == "independent":
            if self.symmetric:
                links, inverse = np.unique(self._keys(src, dst), return_inverse=True)
                draw = self._rng(k).random(links.size)
                dropped = (draw < self._independent())[inverse.reshape(-1)]
            else:
                dropped = self._rng(k).random(src.size) < self._independent()
        else:
            bad = self._state(k)
            draw = self._rng(k, _DRAW).random(bad.size)
            link_dropped = np.where(bad, draw < self.drop_in_bad, draw < self.drop_in_good)
            keys = self._keys(src, dst)
            index = keys if self._links is None else np.searchsorted(self._links, keys)
            dropped = link_dropped[index]
        self._last_drops = (k, src, dst, dropped)
        return src, dst, dropped

    def dropped(self, k: int) -> tuple[Int[np.ndarray, " m"], Int[np.ndarray, " m"]]:
        """``(src, dst)``: the edges ``src -> dst`` of the wrapped graph dropped at step
        ``k``, as int64 arrays sorted by ``(dst, src)`` (self-loops are never dropped)."""
        k = as_int(k, "k", minimum=0)
        src, dst, dropped = self._drops(k)
        return src[dropped], dst[dropped]

    # ------------------------------------------------------------------- the matrices
    def graph(self, k: int) -> nx.DiGraph:
        """The graph of step ``k``: the wrapped graph without its dropped edges, weighted
        as ``matrix(k, "natural")`` (a dropped edge's weight on a self-loop), frozen."""
        k = as_int(k, "k", minimum=0)
        return nx.freeze(matrix_to_graph(self._natural(k)))

    def guarantees(self, rule: str) -> frozenset:
        """What the rule makes of any surviving graph (the table above): "metropolis"
        doubly stochastic (it is refused where the surviving graph is directed), "row"
        row- and "column" column-stochastic; never "connected" (a step may lose it)."""
        return BY_RULE.get(rule, frozenset())

    def _build(self, k: int, rule: str) -> sp.csr_array:
        if rule in UNDIRECTED_RULES and not self.symmetric and not self._certain():
            raise ValueError(
                f"step {k}, rule={rule!r}: {_RULE_NAMES[rule]} weights need an undirected "
                "graph, and MessageDrops(symmetric=False) drops the two directions of a link "
                "independently; pass symmetric=True (config: graphs.drop_symmetric = true) "
                'or use rule="row" / "column"'
            )
        _, _, dropped = self._drops(k)
        if not dropped.any():
            return self.graphs.matrix(k, rule)  # exactly the wrapped sequence's matrix
        return super()._build(k, rule)

    def _structure(self, k: int) -> sp.csr_array:
        src, dst, dropped = self._drops(k)
        kept = ~dropped
        return _pattern(src[kept], dst[kept], self.n_nodes)

    def _natural(self, k: int) -> sp.csr_array:
        natural = self.graphs.matrix(k, "natural")
        src, dst, dropped = self._drops(k)
        if not dropped.any():
            return natural
        n = self.n_nodes
        coo = sp.coo_array(natural)
        rows, cols = coo.row.astype(np.int64), coo.col.astype(np.int64)
        lost = np.isin(rows * n + cols, dst[dropped] * n + src[dropped]) & (rows != cols)
        target = rows[lost] if self.lost_weight == "receiver" else cols[lost]
        kept = ~lost
        matrix = sp.csr_array(
            (
                np.concatenate([coo.data[kept], coo.data[lost]]),
                (np.concatenate([rows[kept], target]), np.concatenate([cols[kept], target])),
            ),
            shape=(n, n),
        )
        matrix.sum_duplicates()
        matrix.sort_indices()
        return matrix


__all__ = ["MODELS", "MessageDrops"]

"""A torch module trained by federated clients: the model rows are its flattened parameters.

Client i holds n_i samples (u_r, t_r) and, with theta = unflatten(x) the module's parameters,

    F_i(x) = (1/n_i) sum_{r in S_i} loss(module(u_r; theta), t_r) + reg/2 ||x||^2,
    f(x)   = (1/N) sum_i F_i(x).

Per-client gradients are ``torch.func.vmap`` over the requested clients of ``torch.func.grad``
of F_i, with ``torch.func.functional_call`` running the module on the parameters unflattened
from each client's row; no Python loop over clients (only over chunks of ``chunk_size``
clients, to bound memory). So that vmap sees equal shapes, client data are padded to
(N, n_max, ...) and every sample carries a weight, 1/n_i for a real sample and 0 for padding.

Torch is optional, and imported only when a :class:`TorchModel` is built (or
:meth:`TorchModel.flatten` called), not with this module: without it, building one says what
is missing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
from jaxtyping import Float, Int, Real

from .. import _arrays
from .._arrays import Array, is_numpy
from .._validate import as_float, as_int, check_finite, choice, show
from ._common import ClientData, float_array
from .base import Problem

# The torch module once _need_torch() has imported it. Everything here that uses it runs
# after that: on a built TorchModel, or in flatten(), which calls _need_torch() itself.
if TYPE_CHECKING:
    import torch
else:
    torch = None

__all__ = [
    "TorchModel",
]

_LOSSES = ("cross_entropy", "mse")
_EVAL_ROWS = 4096  # samples per forward pass in accuracy / evaluate


def _need_torch() -> None:
    """Import torch into this module's ``torch``, or say how to install it."""
    global torch
    if torch is None:
        try:
            torch = _arrays.torch()
        except ImportError:
            raise ImportError('TorchModel needs PyTorch: pip install "stochmix[torch]"') from None


class TorchModel(Problem):
    """Federated training of a torch module; the state's model rows are its flat parameters.

    The flat layout is the concatenation of ``module.named_parameters()`` in order, each
    flattened row-major (``dim`` = the number of parameter entries); buffers (batch-norm
    statistics, ...) are constants. Pass :meth:`initial_point` as ``x0`` to
    :func:`stochmix.run`.

    Gradients are computed in the dtype of the points they are asked at (float64 points run
    the module in float64, whatever its own dtype) and on their device: Torch points stay on
    their device; NumPy points go to the device of the module's parameters and the result
    comes back as NumPy. Client data are copied to each (device, dtype) on first use.

    The module must act on each sample separately and deterministically: the clients'
    padded batches go through it together, so batch statistics (BatchNorm in training mode)
    would mix padding into the result, and random layers (Dropout in training mode) are
    refused by vmap. Put such a module in ``eval()`` mode.

    Args:
        module: a ``torch.nn.Module`` with at least one parameter.
        client_datasets: a sequence of N pairs ``(features_i, targets_i)`` (NumPy arrays or
            tensors): features_i of shape (n_i, ...) with the same per-sample shape for all,
            n_i >= 1, and targets_i of shape (n_i, ...).
        loss: ``"cross_entropy"`` (integer class targets (n_i,), module outputs logits
            (n_i, C)), ``"mse"`` (per sample the mean over its output entries of
            (output - target)^2, outputs reshaped like the targets), or a callable
            ``loss(outputs, targets) -> (n,)`` per-sample losses, built from torch
            operations that vmap supports.
        reg: the L2 coefficient, >= 0.
        chunk_size: clients per vmap call.

    Attributes:
        module: the module (its parameters are never changed, except by
            :meth:`load_parameters`).
        device: the device of its parameters.

    Raises:
        ImportError: torch is not installed.
        ValueError: no clients, a client without samples, mismatched shapes, values that
            are not finite, negative class targets, an unknown ``loss``, ``reg < 0``;
            features the module cannot take (one forward pass on one sample is tried).
        TypeError: a module that is not a ``torch.nn.Module``, non-integer class targets.
    """

    # gradients come from vmap calls over chunk_size clients on the module's device: the
    # engine asks for all requested clients in one call rather than in its own chunks
    pure_gradients = False

    def __init__(
        self,
        module,
        client_datasets: Sequence,
        loss: str | Callable = "cross_entropy",
        reg: float = 0.0,
        *,
        chunk_size: int = 256,
    ):
        _need_torch()
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
        params = list(module.named_parameters())
        if not params:
            raise ValueError("module must have at least one parameter to train")
        if callable(loss):
            self._loss_name, self._loss_fn = getattr(loss, "__name__", "custom"), loss
        else:
            choice(loss, "loss", _LOSSES)
            self._loss_name = loss
            self._loss_fn = _cross_entropy if loss == "cross_entropy" else _mse
        self._reg = as_float(reg, "reg", nonnegative=True)
        self._chunk = as_int(chunk_size, "chunk_size", minimum=1)
        self.module = module
        self.device = params[0][1].device
        self._names = [name for name, _ in params]
        self._shapes = [tuple(p.shape) for _, p in params]
        self._numels = [int(p.numel()) for _, p in params]
        self._buffers = {name: b.detach() for name, b in module.named_buffers()}
        self._buffer_copies: dict = {}
        self._initial = self.flatten(module)

        feats, targs, counts = _client_data(client_datasets, self._loss_name == "cross_entropy")
        super().__init__(len(counts), sum(self._numels))
        self._counts = counts
        self._sample_shape = feats[0].shape[1:]
        n, n_max = len(counts), int(counts.max())
        padded_x = np.zeros((n, n_max, *self._sample_shape))
        padded_t = np.zeros((n, n_max, *targs[0].shape[1:]), dtype=targs[0].dtype)
        weight = np.zeros((n, n_max))
        for i, (u, t) in enumerate(zip(feats, targs, strict=True)):  # once, at set-up
            padded_x[i, : counts[i]] = u
            padded_t[i, : counts[i]] = t
            weight[i, : counts[i]] = 1.0 / counts[i]
        self.data = ClientData(x=padded_x, t=padded_t, w=weight, inv_counts=1.0 / counts)
        self._check_features_fit(padded_x[0, :1])

        func = torch.func
        dims = (0, 0, 0, 0, None)
        self._grad_fn = func.vmap(func.grad(self._client_loss), in_dims=dims)
        self._value_fn = func.vmap(self._client_loss, in_dims=dims)

    @classmethod
    def from_partition(
        cls,
        module,
        features: Real[np.ndarray, "n ..."],
        targets: Real[np.ndarray, "n ..."],
        parts: Sequence[np.ndarray],
        loss: str | Callable = "cross_entropy",
        reg: float = 0.0,
        **options,
    ) -> TorchModel:
        """Clients from a partition of one data set: client i holds the samples
        ``parts[i]`` (an index array, as the partitioners of
        :mod:`stochmix.problems.partition` return) of ``features`` (n, ...) and
        ``targets`` (n, ...)."""
        u, t = np.asarray(features), np.asarray(targets)
        if t.shape[:1] != u.shape[:1]:
            raise ValueError(f"targets must have {u.shape[0]} rows like features, got {t.shape}")
        return cls(module, [(u[p], t[p]) for p in parts], loss, reg, **options)

    # ----------------------------------------------------------------------- parameters
    @staticmethod
    def flatten(module) -> Float[np.ndarray, " d"]:
        """The parameters of ``module`` concatenated in ``named_parameters()`` order, each
        flattened row-major, as a float64 NumPy vector (a copy)."""
        _need_torch()
        flat = [p.detach().reshape(-1).to("cpu", torch.float64) for p in module.parameters()]
        return torch.cat(flat).numpy()

    def unflatten(self, row: Float[Array, " d"]) -> dict:
        """The parameters held by a flat ``row`` (dim,), as a dict name -> tensor shaped like
        the module's parameter (views of ``row`` when it is a tensor; a NumPy row becomes a
        tensor on the module's device in its own dtype)."""
        flat = self._as_tensor(self._check_flat(row))
        return self._split(flat)

    def initial_point(self) -> Float[np.ndarray, " d"]:
        """The module's flat parameters when this problem was built (float64, a copy)."""
        return self._initial.copy()

    def load_parameters(self, row: Float[Array, " d"]) -> None:
        """Copy a flat ``row`` into the module's parameters (in place, in their dtype)."""
        values = self.unflatten(row)
        with torch.no_grad():
            for name, param in self.module.named_parameters():
                param.copy_(values[name])

    # ----------------------------------------------------------------------- properties
    @property
    def reg(self) -> float:
        """The L2 coefficient of every F_i."""
        return self._reg

    @property
    def loss(self) -> str:
        """The loss's name."""
        return self._loss_name

    @property
    def rows_per_client(self) -> Int[np.ndarray, " n"]:
        """n_i, shape (N,)."""
        return self._counts

    def stacked(self) -> dict:
        """The clients' samples stacked client after client: ``features`` (R, ...),
        ``targets`` (R, ...) (class indices for ``"cross_entropy"``), ``counts`` (N,),
        the n_i, and ``reg``. Fresh copies."""
        data = self.data
        kept = np.arange(data["x"].shape[1]) < self._counts[:, None]  # not the padding
        targets = np.array(data["t"][kept])
        return {"features": np.array(data["x"][kept]), "targets": targets,
                "counts": self._counts.copy(), "reg": self._reg}  # fmt: skip

    def _check_features_fit(self, sample) -> None:
        """One forward pass on one sample (1, ...), at the initial parameters and in eval
        mode (no batch statistics from one sample; the modes are restored after): features
        the module cannot take are refused here, not by torch in the first gradient."""
        flat = self._as_tensor(self._initial)
        buffers = {name: b.clone() for name, b in self._buffers_like(flat).items()}
        u = torch.tensor(sample, dtype=flat.dtype, device=flat.device)
        modes = [(part, part.training) for part in self.module.modules()]
        self.module.eval()
        try:
            with torch.no_grad():
                torch.func.functional_call(self.module, (self._split(flat), buffers), (u,))
        except RuntimeError as error:
            first = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise ValueError(
                f"client_datasets: features of shape {tuple(self._sample_shape)} per sample do "
                f"not fit the module {show(self.module)} (its forward pass on one sample of "
                f"shape {tuple(u.shape)} fails: {first})"
            ) from None
        finally:
            for part, training in modes:
                part.training = training

    # ----------------------------------------------------------------------- evaluation
    def _split(self, flat):
        """dict name -> view of ``flat`` (..., dim) shaped like the parameter."""
        pieces = torch.split(flat, self._numels, dim=-1)
        return {
            name: piece.reshape(*flat.shape[:-1], *shape)
            for name, piece, shape in zip(self._names, pieces, self._shapes, strict=True)
        }

    def _client_loss(self, flat, u, t, w, buffers):
        """sum_k w[k] loss(module(u[k]; flat), t[k]) + reg/2 ||flat||^2 for one client (run
        under vmap: flat (dim,), u (k, ...), t (k, ...), w (k,))."""
        out = torch.func.functional_call(self.module, (self._split(flat), buffers), (u,))
        value = (self._loss_fn(out, t) * w).sum()
        if self._reg:
            value = value + 0.5 * self._reg * (flat * flat).sum()
        return value

    def _buffers_like(self, flat) -> dict:
        key = (str(flat.device), flat.dtype)
        if key not in self._buffer_copies:
            self._buffer_copies[key] = {
                name: b.to(flat.device, flat.dtype if b.is_floating_point() else b.dtype)
                for name, b in self._buffers.items()
            }
        return self._buffer_copies[key]

    def _map(self, fn, flat, idx, picks=None, scale=None):
        """``fn`` (the vmapped value or gradient) for rows ``flat`` (m, dim) of clients
        ``idx`` (m,), over their padded samples or over ``picks`` (m, b) with weights
        ``scale / n_i``, in chunks of ``chunk_size`` rows."""
        data = self.data.like(flat)
        buffers = self._buffers_like(flat)
        outs = []
        for s in range(0, flat.shape[0], self._chunk):
            j = idx[s : s + self._chunk]
            if picks is None:
                u, t = data["x"].index_select(0, j), data["t"].index_select(0, j)
                w = data["w"].index_select(0, j)
            else:
                pk = picks[s : s + self._chunk]
                u, t = data["x"][j[:, None], pk], data["t"][j[:, None], pk]
                factor = scale[s : s + self._chunk] * data["inv_counts"].index_select(0, j)
                w = factor[:, None].expand(pk.shape)
            outs.append(fn(flat[s : s + self._chunk], u, t, w, buffers))
        if not outs:
            shape = (0, self.dim) if fn is self._grad_fn else (0,)
            return torch.empty(shape, dtype=flat.dtype, device=flat.device)
        return torch.cat(outs)

    def _as_tensor(self, x):
        """``x`` as a tensor: NumPy goes to the module's device, tensors stay put."""
        if is_numpy(x):
            return torch.tensor(x, device=self.device)
        return x

    def _index(self, values, like):
        if is_numpy(values):
            return torch.tensor(values, device=like.device)
        return values.to(like.device)

    def gradients(
        self, clients: Int[np.ndarray, " m"], points: Float[Array, "m d"]
    ) -> Float[Array, "m d"]:
        """Row t is grad F_{clients[t]}(points[t]), full batch; shape (m, dim), NumPy for
        NumPy points (computed on the module's device), a tensor on the points' device
        otherwise, in the points' dtype."""
        idx, x = self._check_batch(clients, points)
        flat = self._as_tensor(x)
        g = self._map(self._grad_fn, flat, self._index(idx, flat))
        return g.cpu().numpy() if is_numpy(x) else g

    def sampled_gradients(self, clients, points, picks, scale):
        """Row t: ``(scale[t] / n_c) sum_k grad loss(u_{c, picks[t, k]}) + reg x_t``, c =
        ``clients[t]``; with ``scale[t] = n_c / b`` the mean over the b picked samples,
        unbiased for grad F_c (the :class:`~stochmix.protocols.FiniteSumProblem`
        contract). NumPy in, NumPy out; tensors stay on their device."""
        return self._sampled_gradient_formula(None, clients, points, picks, scale)

    def _sampled_gradient_formula(self, xp, idx, x, picks, scale):
        """(scale_t / n_c) sum_{k} grad loss(u_{c, picks[t, k]}) + reg x_t, c = idx[t]: with
        Minibatch's scale n_c / b the mean over the drawn samples (positions within each
        client), unbiased for grad F_c. NumPy in, NumPy out; tensors stay on their device."""
        flat = self._as_tensor(x)
        scale = self._index(scale, flat).to(flat.dtype)
        g = self._map(self._grad_fn, flat, self._index(idx, flat), self._index(picks, flat), scale)
        return g.cpu().numpy() if is_numpy(x) else g

    def _check_flat(self, x, name: str = "x"):
        if is_numpy(x) or not hasattr(x, "device"):
            return self._check_point(x, name)
        if x.shape != (self.dim,):
            raise ValueError(f"{name} must have shape ({self.dim},), got {tuple(x.shape)}")
        if not x.dtype.is_floating_point:
            raise TypeError(f"{name} must hold floating numbers, got dtype {x.dtype}")
        return x

    def objective(self, x: Float[Array, " d"]) -> float:
        """f(x) = (1/N) sum_i F_i(x): the mean over clients of each client's mean loss, plus
        reg/2 ||x||^2, computed in the dtype of ``x``."""
        flat = self._as_tensor(self._check_flat(x))
        everyone = torch.arange(self.n_clients, device=flat.device)
        with torch.no_grad():
            values = self._map(self._value_fn, flat.expand(self.n_clients, -1), everyone)
        return float(values.mean())

    def client_objectives(self, points: Float[np.ndarray, "n d"]) -> Float[np.ndarray, " n"]:
        """F_i(points[i]) for every client i, shape (N,)."""
        pts = self._check_all_points(points)
        flat = self._as_tensor(pts)
        everyone = torch.arange(self.n_clients, device=flat.device)
        with torch.no_grad():
            return self._map(self._value_fn, flat, everyone).cpu().numpy()

    def _outputs(self, x, features):
        """The module's outputs on ``features`` (n, ...) at parameters ``x``, in chunks."""
        flat = self._as_tensor(self._check_flat(x))
        if isinstance(features, np.ndarray):
            u = torch.tensor(float_array(features, "features"), device=flat.device)
        else:
            u = features.to(flat.device)
        if tuple(u.shape[1:]) != tuple(self._sample_shape):
            raise ValueError(
                f"features must have shape (n, {', '.join(map(str, self._sample_shape))}), "
                f"got {tuple(u.shape)}"
            )
        u = u.to(flat.dtype)
        state = (self._split(flat), self._buffers_like(flat))
        with torch.no_grad():
            outs = [
                torch.func.functional_call(self.module, state, (u[s : s + _EVAL_ROWS],))
                for s in range(0, u.shape[0], _EVAL_ROWS)
            ]
        return torch.cat(outs)

    def accuracy(self, x: Float[Array, " d"], features: Real[Array, "n ..."], labels) -> float:
        """The fraction of samples whose arg-max output is their label (classification)."""
        out = self._outputs(x, features)
        y = self._index(np.asarray(labels) if not hasattr(labels, "device") else labels, out)
        if y.shape != out.shape[:1]:
            raise ValueError(f"labels must have shape ({out.shape[0]},), got {tuple(y.shape)}")
        return float((out.argmax(dim=-1) == y).double().mean())

    def evaluate(
        self, x: Float[Array, " d"], test_features: Real[Array, "n ..."], test_labels
    ) -> dict:
        """``{"loss": mean per-sample loss (no reg term), "accuracy": ...}`` on a test set
        (``accuracy`` only for the cross-entropy loss)."""
        out = self._outputs(x, test_features)
        t = test_labels
        if is_numpy(t) or not hasattr(t, "device"):
            t = np.asarray(t)
            if self._loss_name == "cross_entropy":
                t = t.astype(np.int64)
            t = torch.tensor(t, device=out.device)
        t = t.to(out.device)
        if t.is_floating_point():
            t = t.to(out.dtype)
        if t.shape[:1] != out.shape[:1]:
            raise ValueError(f"test_labels must have {out.shape[0]} rows, got {tuple(t.shape)}")
        with torch.no_grad():
            result = {"loss": float(self._loss_fn(out, t).mean())}
        if self._loss_name == "cross_entropy":
            result["accuracy"] = float((out.argmax(dim=-1) == t).double().mean())
        return result

    def __repr__(self) -> str:
        return (
            f"TorchModel({type(self.module).__name__}, n_clients={self.n_clients}, "
            f"dim={self.dim}, loss={self._loss_name!r}, reg={self._reg})"
        )


# --------------------------------------------------------------------------- losses


def _cross_entropy(outputs, targets):
    """Per-sample softmax cross-entropy of logits (n, C) against class indices (n,)."""
    return torch.nn.functional.cross_entropy(outputs, targets, reduction="none")


def _mse(outputs, targets):
    """Per-sample mean over the output entries of (output - target)^2."""
    diff = outputs.reshape(targets.shape) - targets
    return (diff * diff).reshape(targets.shape[0], -1).mean(dim=1)


# --------------------------------------------------------------------------- data


def _client_data(datasets, classes: bool):
    """Per-client (features float64 (n_i, ...), targets (n_i, ...)) and counts (N,)."""
    if isinstance(datasets, (str, bytes, np.ndarray)) or not isinstance(datasets, Sequence):
        raise TypeError(
            "client_datasets must be a sequence of (features_i, targets_i) pairs, got "
            f"{type(datasets).__name__}"
        )
    if len(datasets) == 0:
        raise ValueError("client_datasets must hold at least one client, got none")
    feats: list[np.ndarray] = []
    targs: list[np.ndarray] = []
    for i, pair in enumerate(datasets):
        if not isinstance(pair, Sequence) or len(pair) != 2:
            raise ValueError(f"client_datasets[{i}] must be a pair (features, targets)")
        u, t = (v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v) for v in pair)
        u = check_finite(float_array(u, f"features of client {i}"), f"features of client {i}")
        u = u.astype(np.float64, copy=False)
        if u.ndim < 1 or u.shape[0] < 1:
            raise ValueError(f"client {i} must hold at least one sample, got features {u.shape}")
        if feats and u.shape[1:] != feats[0].shape[1:]:
            raise ValueError(
                f"client {i}'s samples have shape {u.shape[1:]}, client 0's {feats[0].shape[1:]}"
            )
        if t.shape[:1] != u.shape[:1]:
            raise ValueError(
                f"client {i}'s targets must have {u.shape[0]} rows like its features, got "
                f"shape {t.shape}"
            )
        if classes:
            if t.dtype == np.bool_ or not np.issubdtype(t.dtype, np.integer):
                raise TypeError(f"client {i}'s targets must be integer class labels, got {t.dtype}")
            t = t.astype(np.int64)
            if t.min() < 0:
                raise ValueError(f"client {i}'s class labels must be >= 0, got {t.min()}")
        elif np.issubdtype(t.dtype, np.integer) and t.dtype != np.bool_:
            t = t.astype(np.int64)
        else:
            t = check_finite(float_array(t, f"targets of client {i}"), f"targets of client {i}")
            t = t.astype(np.float64, copy=False)
        if targs and t.shape[1:] != targs[0].shape[1:]:
            raise ValueError(
                f"client {i}'s targets have shape {t.shape[1:]} per sample, client 0's "
                f"{targs[0].shape[1:]}"
            )
        feats.append(u)
        targs.append(t)
    return feats, targs, np.array([u.shape[0] for u in feats], dtype=np.int64)

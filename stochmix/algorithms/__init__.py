"""Federated and decentralized methods, each as state blocks + the phases of a round.

Each method's module is imported when the method is first used (``stochmix.algorithms.FedAvg``
or ``from stochmix.algorithms import FedAvg`` imports :mod:`~stochmix.algorithms.fedavg`
only), so that ``import stochmix`` does not pay for all of them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._lazy import LazyExports

if TYPE_CHECKING:  # what the names below resolve to, for type checkers and IDEs
    from .accelerated_proximal import DAPG
    from .accelerated_tracking import AccDNGD
    from .adaptive import FedAdagrad, FedAdam, FedAdaptive, FedYogi
    from .admm import DLM, DecentralizedADMM
    from .adpsgd import ADPSGD
    from .amplified import AmplifiedFedAvg
    from .asynchronous import FedAsync, FedBuff, Staleness
    from .channel import ChannelNoise
    from .choco import CHOCO
    from .decentralized import DGD, DecentralizedMethod, GradientTracking, PushPull, PushSum
    from .decentralized_zoo import D2, EXTRA, NIDS, ExactDiffusion, PushDIGing
    from .dual_accelerated import MSDA, SSDA
    from .fedavg import FedAvg
    from .feddyn import FedDyn
    from .federated_composite import FedDualAvg, FedMid
    from .fednova import FedNova
    from .fedpd import FedPD
    from .fedprox import FedProx
    from .focus import FOCUS
    from .led import LED
    from .local_steps import ClientSteps, LocalSteps, RandomSteps
    from .local_tracking import KGT
    from .local_training_admm import LTADMM, FedLT
    from .momentum import FedAvgM
    from .mudag import Mudag
    from .optimal import APAPC, OPAPC
    from .proximal import PGEXTRA, ProxNIDS
    from .relaxed_admm import RelaxedADMM
    from .scaffnew import Scaffnew
    from .scaffold import SCAFFOLD
    from .stale import MIFA, FedStale, FedVARP
    from .uplink import CompressedUplink
    from .variance_reduced import GTSAGA, GTSARAH, GTSVRG

#: each public name -> the module that defines it, imported on first use
_EXPORTS = LazyExports(
    __name__,
    {
        "FedAdagrad": ".adaptive",
        "FedAdam": ".adaptive",
        "FedAdaptive": ".adaptive",
        "FedYogi": ".adaptive",
        "DLM": ".admm",
        "DecentralizedADMM": ".admm",
        "AmplifiedFedAvg": ".amplified",
        "FedAsync": ".asynchronous",
        "FedBuff": ".asynchronous",
        "Staleness": ".asynchronous",
        "ChannelNoise": ".channel",
        "CHOCO": ".choco",
        "DGD": ".decentralized",
        "DecentralizedMethod": ".decentralized",
        "GradientTracking": ".decentralized",
        "PushPull": ".decentralized",
        "PushSum": ".decentralized",
        "D2": ".decentralized_zoo",
        "EXTRA": ".decentralized_zoo",
        "NIDS": ".decentralized_zoo",
        "ExactDiffusion": ".decentralized_zoo",
        "PushDIGing": ".decentralized_zoo",
        "FedAvg": ".fedavg",
        "FedDyn": ".feddyn",
        "FedDualAvg": ".federated_composite",
        "FedMid": ".federated_composite",
        "FedNova": ".fednova",
        "FedPD": ".fedpd",
        "FedProx": ".fedprox",
        "FOCUS": ".focus",
        "LED": ".led",
        "ClientSteps": ".local_steps",
        "LocalSteps": ".local_steps",
        "RandomSteps": ".local_steps",
        "KGT": ".local_tracking",
        "FedAvgM": ".momentum",
        "PGEXTRA": ".proximal",
        "ProxNIDS": ".proximal",
        "Scaffnew": ".scaffnew",
        "SCAFFOLD": ".scaffold",
        "MIFA": ".stale",
        "FedStale": ".stale",
        "FedVARP": ".stale",
        "CompressedUplink": ".uplink",
        "SSDA": ".dual_accelerated",
        "MSDA": ".dual_accelerated",
        "RelaxedADMM": ".relaxed_admm",
        "FedLT": ".local_training_admm",
        "LTADMM": ".local_training_admm",
        "AccDNGD": ".accelerated_tracking",
        "Mudag": ".mudag",
        "APAPC": ".optimal",
        "OPAPC": ".optimal",
        "DAPG": ".accelerated_proximal",
        "GTSAGA": ".variance_reduced",
        "GTSARAH": ".variance_reduced",
        "GTSVRG": ".variance_reduced",
        "ADPSGD": ".adpsgd",
    },
)

__all__ = [
    "ADPSGD",
    "CHOCO",
    "D2",
    "DGD",
    "DLM",
    "DecentralizedADMM",
    "EXTRA",
    "FOCUS",
    "GTSAGA",
    "GTSARAH",
    "GTSVRG",
    "MIFA",
    "NIDS",
    "SCAFFOLD",
    "AmplifiedFedAvg",
    "ChannelNoise",
    "CompressedUplink",
    "DecentralizedMethod",
    "ExactDiffusion",
    "FedAdagrad",
    "FedAsync",
    "FedBuff",
    "FedAdam",
    "FedAdaptive",
    "FedAvg",
    "FedAvgM",
    "ClientSteps",
    "FedDualAvg",
    "FedDyn",
    "FedMid",
    "FedNova",
    "FedPD",
    "LocalSteps",
    "RandomSteps",
    "FedProx",
    "FedStale",
    "FedVARP",
    "FedYogi",
    "GradientTracking",
    "KGT",
    "LED",
    "PGEXTRA",
    "ProxNIDS",
    "PushDIGing",
    "PushPull",
    "PushSum",
    "Scaffnew",
    "Staleness",
    "SSDA",
    "RelaxedADMM",
    "LTADMM",
    "FedLT",
    "AccDNGD",
    "Mudag",
    "APAPC",
    "OPAPC",
    "MSDA",
    "DAPG",
]


if not TYPE_CHECKING:  # hidden from type checkers, so that they flag a misspelt name

    def __getattr__(name: str) -> Any:
        return _EXPORTS.load(name)

    def __dir__() -> list[str]:
        return _EXPORTS.dir()

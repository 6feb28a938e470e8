"""Federated and decentralized methods, each as state blocks + the phases of a round."""

from .adaptive import FedAdagrad, FedAdam, FedAdaptive, FedYogi
from .admm import DLM, DecentralizedADMM
from .amplified import AmplifiedFedAvg
from .asynchronous import FedAsync, FedBuff, Staleness
from .channel import ChannelNoise
from .choco import CHOCO
from .decentralized import DGD, DecentralizedMethod, GradientTracking, PushPull, PushSum
from .decentralized_zoo import D2, EXTRA, NIDS, ExactDiffusion, PushDIGing
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
from .momentum import FedAvgM
from .proximal import PGEXTRA, ProxNIDS
from .scaffnew import Scaffnew
from .scaffold import SCAFFOLD
from .stale import MIFA, FedStale, FedVARP
from .uplink import CompressedUplink
from .variance_reduced import GTSAGA, GTSARAH, GTSVRG

__all__ = [
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
]

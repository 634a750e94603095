"""FL/PFL algorithms, one module each, registered by name."""

from mecsim.algorithms.base import Algorithm, ClientState, ServerState, Task, Upload
from mecsim.algorithms.ditto import Ditto
from mecsim.algorithms.fedavg import FedAvg
from mecsim.algorithms.fedprox import FedProx
from mecsim.algorithms.fedrod import FedRoD
from mecsim.algorithms.local import Local
from mecsim.algorithms.scd import SCD

from mecsim.registry import Registry

ALGORITHMS: Registry[type[Algorithm]] = Registry("algorithm", "algorithm.name")
ALGORITHMS.add("local", Local, "each client trains alone; no communication")
ALGORITHMS.add("fedavg", FedAvg, "FedAvg: weighted averaging of full models (McMahan et al. 2017)")
ALGORITHMS.add(
    "fedprox", FedProx, "FedProx: FedAvg + proximal term mu/2||w - w_G||^2 (Li et al. 2020)"
)
ALGORITHMS.add(
    "ditto", Ditto, "Ditto: personal model pulled to w_G, lambda/2||w_p - w_G||^2 (PFL+)"
)
ALGORITHMS.add("fedrod", FedRoD, "FedRoD: balanced-softmax generic head + personal head (PFL+)")
ALGORITHMS.add("scd", SCD, "spectral co-distillation, eqs. (4)-(5) of Chen et al. 2023 (PFL+)")

__all__ = [
    "ALGORITHMS",
    "SCD",
    "Algorithm",
    "ClientState",
    "Ditto",
    "FedAvg",
    "FedProx",
    "FedRoD",
    "Local",
    "ServerState",
    "Task",
    "Upload",
]

"""FL/PFL algorithms, one module each, registered by name."""

from mecsim.algorithms.base import Algorithm, ClientState, ServerState, Task, Upload
from mecsim.algorithms.fedavg import FedAvg
from mecsim.algorithms.fedprox import FedProx
from mecsim.algorithms.local import Local

from mecsim.registry import Registry

ALGORITHMS: Registry[type[Algorithm]] = Registry("algorithm", "algorithm.name")
ALGORITHMS.add("local", Local, "each client trains alone; no communication")
ALGORITHMS.add("fedavg", FedAvg, "FedAvg: weighted averaging of full models (McMahan et al. 2017)")
ALGORITHMS.add(
    "fedprox", FedProx, "FedProx: FedAvg + proximal term mu/2||w - w_G||^2 (Li et al. 2020)"
)

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "ClientState",
    "FedAvg",
    "FedProx",
    "Local",
    "ServerState",
    "Task",
    "Upload",
]

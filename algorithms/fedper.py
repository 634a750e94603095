"""FedPer (Arivazhagan et al. 2019): federated base layers, personalization layers kept local.

Each client trains its whole model; only the base (every layer group but
the classifier head) is uploaded, averaged (FedAvg) and downloaded; the
head stays on the client. The personalized model is the client's model.
"""

from __future__ import annotations

from mecsim.algorithms.base import ClientState
from mecsim.algorithms.fedavg import FedAvg
from mecsim.algorithms.registry import ALGORITHMS


@ALGORITHMS.register(
    "fedper", "FedPer: shared body, the head stays local (Arivazhagan et al. 2019)"
)
class FedPer(FedAvg):
    """FedAvg on the body; each client keeps its own head."""

    def shared_keys(self) -> tuple[str, ...]:
        return self.arch(None).body_keys

    def init_client_state(self, client: int) -> ClientState:
        return {"local": self.initial.clone()}

"""FedBN (Li et al., ICLR 2021): local batch normalization.

FedAvg on every entry except the normalization layers: BatchNorm's affine
parameters and running statistics never leave the client (Algorithm 1), so
uploads and downloads carry only the rest, and the events table shows the
smaller payload. Each client's personalized model is its own model (shared
layers from the server, its own BatchNorm). There is no single generic model.
"""

from __future__ import annotations

from mecsim.algorithms.base import ClientState
from mecsim.algorithms.fedavg import FedAvg
from mecsim.algorithms.registry import ALGORITHMS


@ALGORITHMS.register(
    "fedbn", "FedBN: BatchNorm parameters and statistics stay local (Li et al. 2021)"
)
class FedBN(FedAvg):
    """FedAvg that keeps normalization layers local."""

    def shared_keys(self) -> tuple[str, ...]:
        arch = self.arch(None)
        return tuple(k for k in arch.initial.to_payload() if k not in arch.norm_keys)

    def init_client_state(self, client: int) -> ClientState:
        return {"local": self.initial.clone()}

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
from mecsim.common.errors import ConfigError

NORMALIZED_MODELS = ("cnn-small-bn", "resnet18", "resnet34", "vgg11", "vgg13")
"""The catalog's architectures with BatchNorm layers (a test keeps the list true)."""


@ALGORITHMS.register(
    "fedbn", "FedBN: BatchNorm parameters and statistics stay local (Li et al. 2021)"
)
class FedBN(FedAvg):
    """FedAvg that keeps normalization layers local."""

    def __init__(self, settings, models, label_counts=None, seed=0) -> None:
        bare = [name for name, arch in models.architectures.items() if not arch.norm_keys]
        if bare:  # FedBN on such a model would be FedAvg reported as FedBN
            raise ConfigError(
                "model.name",
                f"fedbn keeps normalization layers local, and {bare[0]!r} has none; choose "
                f"a model with BatchNorm: {', '.join(NORMALIZED_MODELS)}",
            )
        super().__init__(settings, models, label_counts, seed)

    def shared_keys(self) -> tuple[str, ...]:
        arch = self.arch(None)
        return tuple(k for k in arch.initial.to_payload() if k not in arch.norm_keys)

    def init_client_state(self, client: int) -> ClientState:
        return {"local": self.initial.clone()}

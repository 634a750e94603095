"""DS-FL (Itahara et al., IEEE TMC 2021): distillation-based semi-supervised FL.

Clients keep their own models and share only predictions on an unlabeled
open (public) set P. Round t, client (see :mod:`mecsim.algorithms.logit_exchange`):

    distill  train on P toward the global soft labels of round t-1
             (cross-entropy against soft targets)
    local    train on the private split (cross-entropy)
    logits   upload p_k = softmax(w_k(P))                        (|P| x N floats)

Server, entropy reduction aggregation (ERA):

    target = softmax( (1/m) sum_k p_k / T ),  T < 1             (sharpened average)

ERA lowers the entropy of the averaged soft labels, which the paper shows
speeds up and stabilizes distillation under non-IID data. Default T = 0.1
(the paper's value). The paper also distills a server model on P; mecsim's
DS-FL reports the clients' models (COMET's comparison uses them too).
"""

from __future__ import annotations

from pydantic import Field
from torch import Tensor

from mecsim.algorithms.base import RoundContext, ServerState, Upload
from mecsim.algorithms.logit_exchange import (
    LogitExchange,
    LogitExchangeSettings,
    TargetLoss,
    soft_decisions,
)
from mecsim.algorithms.losses import soft_cross_entropy
from mecsim.algorithms.registry import ALGORITHMS


class DSFLSettings(LogitExchangeSettings):
    temperature: float = Field(default=0.1, gt=0, description="T of ERA (T < 1 sharpens)")


def entropy_reduction_aggregate(predictions: Tensor, temperature: float) -> Tensor:
    """ERA: softmax of the mean of the clients' probabilities [m, |P|, N] divided by T."""
    return soft_decisions(predictions.mean(dim=0), temperature)


@ALGORITHMS.register("dsfl", "DS-FL: distillation on an open set with entropy-reduced averaging")
class DSFL(LogitExchange):
    """Clients distill toward the sharpened average of everyone's soft labels."""

    Settings = DSFLSettings

    def aggregate(
        self, server_state: ServerState, uploads: list[Upload], ctx: RoundContext
    ) -> ServerState:
        target = entropy_reduction_aggregate(self.stacked(uploads), self.settings.temperature)
        return {"target": target}

    def aggregation_flops(self, server_state: ServerState, uploads: list[Upload]) -> int:
        """Mean (m d), then divide, exponentiate, sum and normalize each target element (4 d)."""
        if not uploads:
            return 0
        d = uploads[0].payload["predictions"].numel()
        return len(uploads) * d + 4 * d

    def target_loss(self) -> TargetLoss:
        return soft_cross_entropy

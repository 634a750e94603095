"""Power of choice (Cho, Wang and Joshi, "Client Selection in Federated Learning:
Convergence Analysis and Power-of-Choice Selection Strategies", AISTATS 2022, Alg. 1):

1. draw ``d`` candidates without replacement, each with probability in proportion to
   its data size;
2. take the ``k`` of them with the highest local loss.

The paper's server sends the global model to the ``d`` candidates and asks for their
loss on it; this is its communication-free variant (``cpow-d``, Sec. 4), ranking by
the loss each client reported with its last update. A client that has not reported
one yet ranks first.
"""

from __future__ import annotations

import numpy as np

from mecsim.policies.history import Candidates
from mecsim.policies.scheduling import (
    SchedulingPolicy,
    Selection,
    ShortlistSettings,
    register_scheduler,
    top_k,
)


@register_scheduler("power_of_choice", "of d clients drawn by data size, the k of highest loss")
class PowerOfChoice(SchedulingPolicy):
    Settings = ShortlistSettings
    uses_training = True

    def select(self, candidates: Candidates, k: int, rng: np.random.Generator) -> Selection:
        d = min(len(candidates), self.settings.d or 2 * k)  # type: ignore[attr-defined]
        sizes = candidates.num_samples.astype(float)
        drawn = np.sort(rng.choice(len(candidates), size=max(d, k), replace=False,
                                   p=sizes / sizes.sum()))  # fmt: skip
        subset = candidates.take(drawn)
        return top_k(subset, subset.loss, min(k, len(subset)))

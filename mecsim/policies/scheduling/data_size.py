"""Data size: ``k`` clients drawn without replacement, each with probability in
proportion to its training samples (Li et al., "On the Convergence of FedAvg on
Non-IID Data", ICLR 2020, sampling scheme I)."""

from __future__ import annotations

import numpy as np

from mecsim.policies.history import Candidates
from mecsim.policies.scheduling import SchedulingPolicy, Selection, drawn, register_scheduler


@register_scheduler("data_size", "k clients drawn with probability proportional to data size")
class DataSize(SchedulingPolicy):
    needs_history = False

    def select(self, candidates: Candidates, k: int, rng: np.random.Generator) -> Selection:
        sizes = candidates.num_samples.astype(float)
        picks = rng.choice(len(candidates), size=k, replace=False, p=sizes / sizes.sum())
        return drawn(candidates, picks)

"""Uniform: ``k`` clients drawn without replacement, each equally likely (FedAvg's
sampling, McMahan et al. 2017; mecsim's default)."""

from __future__ import annotations

import numpy as np

from mecsim.policies.history import Candidates
from mecsim.policies.scheduling import SchedulingPolicy, Selection, drawn, register_scheduler


@register_scheduler("uniform", "k clients drawn uniformly without replacement (default)")
class Uniform(SchedulingPolicy):
    needs_history = False

    def select(self, candidates: Candidates, k: int, rng: np.random.Generator) -> Selection:
        return drawn(candidates, rng.choice(len(candidates), size=k, replace=False))

"""Best channel: the ``k`` clients whose last reported SINR is highest (the
opportunistic scheduler of wireless FL studies, e.g. Yang et al., IEEE TCOM 2020;
a client never heard from is tried first)."""

from __future__ import annotations

import numpy as np

from mecsim.policies.history import Candidates
from mecsim.policies.scheduling import SchedulingPolicy, Selection, register_scheduler, top_k


@register_scheduler("best_channel", "the k clients of highest last reported SINR")
class BestChannel(SchedulingPolicy):
    def select(self, candidates: Candidates, k: int, rng: np.random.Generator) -> Selection:
        return top_k(candidates, candidates.snr_db, k)

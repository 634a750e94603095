"""Age-based: the ``k`` clients whose last update reached the server longest ago
(Yang, Arafa, Quek and Poor, "Age-Based Scheduling Policy for Federated Learning in
Mobile Edge Networks", ICASSP 2020: the age of a client's update is the rounds since
it was last aggregated; a client never aggregated is oldest)."""

from __future__ import annotations

import numpy as np

from mecsim.policies.history import Candidates
from mecsim.policies.scheduling import (
    SchedulingPolicy,
    Selection,
    register_scheduler,
    rounds_since,
    top_k,
)


@register_scheduler("age", "the k clients whose last update is oldest (never: first)")
class AgeBased(SchedulingPolicy):
    def select(self, candidates: Candidates, k: int, rng: np.random.Generator) -> Selection:
        return top_k(candidates, rounds_since(candidates, candidates.last_update), k)

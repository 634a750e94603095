"""Round robin: the ``k`` clients chosen longest ago, in id order (Yang et al.,
"Scheduling Policies for Federated Learning in Wireless Networks", IEEE TCOM 2020,
Sec. III-B): with all clients candidates, groups of ``k`` take turns."""

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


@register_scheduler("round_robin", "the k clients chosen longest ago (never first), by id")
class RoundRobin(SchedulingPolicy):
    def select(self, candidates: Candidates, k: int, rng: np.random.Generator) -> Selection:
        # score: rounds since last chosen (a client never chosen: longest ago of all)
        return top_k(candidates, rounds_since(candidates, candidates.last_selected), k)

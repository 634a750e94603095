"""Update aware (Amiri, Gunduz, Kulkarni and Poor, "Update Aware Device Scheduling for
Federated Learning at the Wireless Edge", ISIT 2020; their "best channel, best
l2-norm" policy):

1. keep the ``d`` clients of best channel (highest last reported SINR);
2. of those, take the ``k`` whose last update had the largest L2 norm.

A client the server has no SINR or update norm of yet ranks first at that stage.
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


@register_scheduler("update_aware", "of the d best channels, the k largest update norms")
class UpdateAware(SchedulingPolicy):
    Settings = ShortlistSettings
    uses_training = True
    reports_norm = True

    def select(self, candidates: Candidates, k: int, rng: np.random.Generator) -> Selection:
        d = min(len(candidates), max(self.settings.d or 2 * k, k))  # type: ignore[attr-defined]
        best = top_k(candidates, candidates.snr_db, d)
        kept = np.searchsorted(candidates.ids, best.ids)
        subset = candidates.take(kept)
        return top_k(subset, subset.update_norm, k)

"""Proportional fair: the ``k`` clients whose last reported SINR is highest relative to
their own mean SINR (Yang et al., "Scheduling Policies for Federated Learning in
Wireless Networks", IEEE TCOM 2020, Sec. III-C: the largest ``SNR_i / mean SNR_i``).

The paper's base station knows each link's SNR at the scheduling instant; a server
that may not see the future of the fading process knows the last reported one, so
the ratio here is last over mean (in dB, a difference). A client never heard from is
tried first.
"""

from __future__ import annotations

import numpy as np

from mecsim.policies.history import Candidates
from mecsim.policies.scheduling import SchedulingPolicy, Selection, register_scheduler, top_k


@register_scheduler("proportional_fair", "the k clients of highest last SINR over their mean SINR")
class ProportionalFair(SchedulingPolicy):
    def select(self, candidates: Candidates, k: int, rng: np.random.Generator) -> Selection:
        return top_k(candidates, candidates.snr_db - candidates.mean_snr_db, k)

"""Proportional to data: upload ``i`` gets ``W D_i / sum_j D_j`` of the band, ``D`` its
client's training samples (the weight FedAvg gives its update)."""

from __future__ import annotations

from collections.abc import Sequence

from mecsim.policies.allocation import ALLOCATIONS, Allocation, Share


@ALLOCATIONS.register("proportional", "the band split in proportion to the clients' data")
class ProportionalToData(Allocation):
    def bands(self, shares: Sequence[Share], total_hz: float) -> list[float]:
        total = sum(s.weight for s in shares)
        return [total_hz * s.weight / total for s in shares]

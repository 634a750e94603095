"""Equal share: the ``n`` uploads on the air get ``W / n`` each (processor sharing)."""

from __future__ import annotations

from collections.abc import Sequence

from mecsim.policies.allocation import ALLOCATIONS, Allocation, Share


@ALLOCATIONS.register("equal", "the cell's band split equally among the uploads on the air")
class EqualShare(Allocation):
    def bands(self, shares: Sequence[Share], total_hz: float) -> list[float]:
        return [total_hz / len(shares)] * len(shares)

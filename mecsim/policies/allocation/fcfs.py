"""First come, first served: each upload on its client's own band, waiting while the
cell's band has too little free (mecsim's default under a finite band)."""

from __future__ import annotations

from mecsim.policies.allocation import ALLOCATIONS, Allocation


@ALLOCATIONS.register("fcfs", "each upload on its own band, waiting for it (default)")
class FirstComeFirstServed(Allocation):
    splits = False

"""Min-max completion time: the split under which every upload on the air finishes at
the same time ``T``, the least such ``T`` (Shi, Zhou and Niu, "Joint Device Scheduling
and Resource Allocation for Latency Constrained Wireless Federated Learning", IEEE TWC
2021, the bandwidth subproblem).

Upload ``i`` needs band ``b_i(T)`` with ``rate_i(b_i) = R_i / T`` (``R_i`` its bits
left); rates grow with the band, so ``b_i(T)`` is found by bisection, and ``T`` by an
outer bisection on ``sum_i b_i(T) = W``. At each re-split (an upload starting or
ending, a fading block) the rest is solved again, so with no further change every
upload ends together.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from mecsim.policies.allocation import ALLOCATIONS, Allocation, Share

STEPS = 100
"""Most bisection steps (each halves the interval: 2^-100 of it is below any float's
ulp); a bisection stops sooner once the midpoint is one of its ends, where further steps
change nothing."""


def band_for(rate: Callable[[float], float], need_bps: float, total_hz: float) -> float:
    """The least band in (0, ``total_hz``] on which ``rate`` reaches ``need_bps``
    (``total_hz`` and more if even the whole band does not)."""
    if rate(total_hz) < need_bps:
        return total_hz * 2  # more than the band: this T is too short
    low, high = 0.0, total_hz
    for _ in range(STEPS):
        middle = (low + high) / 2
        if middle in (low, high):  # the interval is one ulp: nothing left to halve
            break
        low, high = (middle, high) if rate(middle) < need_bps else (low, middle)
    return high


@ALLOCATIONS.register("min_max", "the split under which all uploads on the air end together")
class MinMaxTime(Allocation):
    def bands(self, shares: Sequence[Share], total_hz: float) -> list[float]:
        live = [s for s in shares if s.rate(total_hz) > 0]  # in outage: no band helps
        if not live:
            return [total_hz / len(shares)] * len(shares)

        def used(t: float) -> list[float]:
            return [band_for(s.rate, s.remaining_bits / t, total_hz) for s in live]

        # T from "the whole band to the slowest alone" up, until the bands fit
        low = max(s.remaining_bits / s.rate(total_hz) for s in live)
        high = low
        while sum(used(high)) > total_hz:
            low, high = high, high * 2
        for _ in range(STEPS):
            middle = (low + high) / 2
            if middle in (low, high):
                break
            low, high = (middle, high) if sum(used(middle)) > total_hz else (low, middle)
        bands = dict(zip((id(s) for s in live), used(high), strict=True))
        scale = total_hz / sum(bands.values())  # hand out the last rounding, never more than W
        return [bands.get(id(s), 0.0) * scale for s in shares]

"""Min-max completion time: the split under which every upload on the air finishes at
the same time ``T``, the least such ``T`` (Shi, Zhou and Niu, "Joint Device Scheduling
and Resource Allocation for Latency Constrained Wireless Federated Learning", IEEE TWC
2021, the bandwidth subproblem).

Upload ``i`` needs band ``b_i(T)`` with ``rate_i(b_i) = R_i / T`` (``R_i`` its bits
left); rates grow with the band, so ``b_i(T)`` is a root (Brent's method), and so is
``T`` of ``sum_i b_i(T) = W``. At each re-split (an upload starting or ending, a fading
block) the rest is solved again, so with no further change every upload ends together.

Under a round deadline (``protocol.kind = "deadline"``) the split aims at it, as the
paper's latency constraint does: if the common end comes after the deadline, the
uploads that need the least band to end by it are admitted while the band lasts, each
on exactly that band, and the rest share what is left, again ending together.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from scipy.optimize import brentq

from mecsim.policies.allocation import ALLOCATIONS, Allocation, Share


def band_for(rate: Callable[[float], float], need_bps: float, total_hz: float) -> float:
    """The band in (0, ``total_hz``] on which ``rate`` reaches ``need_bps`` (twice
    ``total_hz`` if even the whole band does not: more than there is)."""
    if rate(total_hz) < need_bps:
        return total_hz * 2
    low = total_hz * 1e-12  # the rate at no band is 0 * log(inf): start just above it
    if rate(low) >= need_bps:
        return low
    return brentq(lambda b: rate(b) - need_bps, low, total_hz, xtol=1e-9, rtol=1e-15)


def common_end(shares: Sequence[Share], total_hz: float) -> tuple[float, list[float]]:
    """The least ``T`` at which ``shares`` (each with a rate on the whole band) all end
    together on ``total_hz``, and their bands then."""

    def used(t: float) -> list[float]:
        return [band_for(s.rate, s.remaining_bits / t, total_hz) for s in shares]

    # T from "the whole band to the slowest alone" up, until the bands fit
    low = max(s.remaining_bits / s.rate(total_hz) for s in shares)
    high = low
    while sum(used(high)) > total_hz:
        low, high = high, high * 2
    if high > low:
        high = brentq(lambda t: sum(used(t)) - total_hz, low, high, xtol=1e-15, rtol=1e-15)
    bands = used(high)
    return high, [b * min(1.0, total_hz / sum(bands)) for b in bands]  # never more than W


@ALLOCATIONS.register("min_max", "the split under which all uploads on the air end together")
class MinMaxTime(Allocation):
    def bands(self, shares: Sequence[Share], total_hz: float) -> list[float]:
        live = [s for s in shares if s.rate(total_hz) > 0]  # in outage: no band helps
        if not live:
            return [total_hz / len(shares)] * len(shares)
        end, bands = common_end(live, total_hz)
        if any(end > s.time_left for s in live):
            bands = admitted(live, total_hz)
        split = dict(zip((id(s) for s in live), bands, strict=True))
        return [split.get(id(s), 0.0) for s in shares]


def admitted(live: Sequence[Share], total_hz: float) -> list[float]:
    """Bands under the deadline: the uploads that need the least band to end by it first,
    each on that band, while the band lasts; the rest end together on what is left."""
    need = [
        band_for(s.rate, s.remaining_bits / s.time_left, total_hz) if s.time_left > 0 else math.inf
        for s in live
    ]
    bands, left = [0.0] * len(live), total_hz
    order, late = sorted(range(len(live)), key=lambda i: need[i]), []
    for k, i in enumerate(order):
        if need[i] > left:  # needs ascend: every later one is late too
            late = order[k:]
            break
        bands[i], left = need[i], left - need[i]
    if late and left > 0:
        for i, band in zip(late, common_end([live[i] for i in late], left)[1], strict=True):
            bands[i] = band
    return bands

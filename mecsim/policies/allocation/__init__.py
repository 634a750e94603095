"""Bandwidth allocation: how a cell's finite uplink band is split among the uploads on
the air at once, re-split whenever one starts or ends (and at each fading block).

A policy is a class registered in :data:`ALLOCATIONS` under
``network.uplink.allocation``; :meth:`Allocation.bands` gets each active upload as a
:class:`Share` (its client, the bits it has left, its data size, and its rate as a
function of the band it would get, at its power and current fading) and the cell's
band, and answers each upload's band. ``fcfs`` (the default) is not a split: each
upload waits until its own band is free.

One module per policy: ``fcfs``, ``equal``, ``proportional``, ``min_max``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from mecsim.common.registry import Registry


@dataclass(frozen=True)
class Share:
    """One upload on the air, as the base station knows it at a split."""

    client: int
    remaining_bits: float
    weight: float
    """Its client's training samples (``proportional`` splits by them)."""
    rate: Callable[[float], float]
    """Its rate (bit/s) on a band of the given Hz (0 in outage)."""
    time_left: float = math.inf
    """Seconds until its round's deadline (``protocol.kind = "deadline"``; inf: none)."""


class Allocation:
    """Splits a cell's band; subclasses implement :meth:`bands` (or set ``splits``)."""

    splits: ClassVar[bool] = True
    """False: no split; each upload on its own band, first come first served."""

    def __init__(self, settings: Any) -> None:
        self.settings = settings

    def bands(self, shares: Sequence[Share], total_hz: float) -> list[float]:
        raise NotImplementedError


ALLOCATIONS: Registry[type[Allocation]] = Registry(
    "bandwidth allocation", "network.uplink.allocation", package="mecsim.policies.allocation"
)

"""The protocol registry (``protocol.kind``)."""

from collections.abc import Callable

from mecsim.registry import Registry
from mecsim.simulation import Process, Simulation

PROTOCOLS: Registry[Callable[[Simulation], Process]] = Registry("protocol", "protocol.kind")

"""Protocols decide when client work and communication happen; one server process each
(compute-and-wait, wait-free, deadline, FedAsync, FedBuff, HierFAVG; ``bulk`` runs alike
compute-and-wait clients vectorized).

May import the engine and everything below it; scenario files (``mecsim.config``) sit
above and read each protocol's settings from ``settings``.
"""

from mecsim.protocols.asynchronous import fedasync, fedbuff
from mecsim.protocols.hierarchical import hierarchical
from mecsim.protocols.registry import PROTOCOLS
from mecsim.protocols.synchronous import compute_and_wait, deadline, wait_free

__all__ = [
    "PROTOCOLS",
    "compute_and_wait",
    "deadline",
    "fedasync",
    "fedbuff",
    "hierarchical",
    "wait_free",
]

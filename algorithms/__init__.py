"""FL/PFL algorithms, one module each; each registers itself in :data:`ALGORITHMS`.

Module ``NAME`` registers algorithm ``NAME`` (``perfedavg`` also ``perfedavg_hf``):
:data:`ALGORITHMS` imports it when the name is first looked up, so a run imports the
algorithm it uses, and listing every name imports every module.

May import :mod:`mecsim.learning` and :mod:`mecsim.common` only.
"""

from mecsim.algorithms.base import (
    SERVER,
    Algorithm,
    AlgorithmSettings,
    ClientState,
    RoundContext,
    ServerState,
    Task,
    Upload,
)
from mecsim.algorithms.registry import ALGORITHMS

__all__ = [
    "ALGORITHMS",
    "SERVER",
    "Algorithm",
    "AlgorithmSettings",
    "ClientState",
    "RoundContext",
    "ServerState",
    "Task",
    "Upload",
]

"""The protocol registry (``protocol.kind``); each protocol registers with its settings class."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from mecsim.common.errors import ConfigError
from mecsim.common.registry import Registry
from mecsim.protocols.settings import ProtocolSettings

if TYPE_CHECKING:
    from mecsim.engine.simulation import Process, Simulation

ProtocolProcess = Callable[["Simulation"], "Process"]

PROTOCOLS: Registry[ProtocolProcess] = Registry("protocol", "protocol.kind")


def register_protocol(
    name: str, settings: type[ProtocolSettings], description: str
) -> Callable[[ProtocolProcess], ProtocolProcess]:
    """Decorator: register a server process as protocol ``name`` with its ``Settings`` class."""

    def decorator(process: ProtocolProcess) -> ProtocolProcess:
        process.Settings = settings  # type: ignore[attr-defined]
        return PROTOCOLS.register(name, description)(process)

    return decorator


def protocol_settings(name: str) -> type[ProtocolSettings]:
    """The settings class of protocol ``name``."""
    return PROTOCOLS.get(name).Settings  # type: ignore[attr-defined]


def uploading_task_index(sim: Simulation, round_: int = 0) -> int:
    """Index of the round's uploading task; protocols that need one raise a clear error."""
    for i, task in enumerate(sim.tasks(round_)):
        if task.uploads:
            return i
    raise ConfigError(
        "protocol.kind",
        f"{sim.protocol.kind} needs an algorithm that uploads; "
        f"{sim.algorithm.settings.name!r} has no uploading task",
    )

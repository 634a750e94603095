"""The protocol registry (``protocol.kind``)."""

from collections.abc import Callable

from mecsim.errors import ConfigError
from mecsim.registry import Registry
from mecsim.simulation import Process, Simulation

PROTOCOLS: Registry[Callable[[Simulation], Process]] = Registry("protocol", "protocol.kind")


def uploading_task_index(sim: Simulation) -> int:
    """Index of the algorithm's uploading task; protocols that need one raise a clear error."""
    for i, task in enumerate(sim.algorithm.tasks):
        if task.uploads:
            return i
    raise ConfigError(
        "protocol.kind",
        f"{sim.protocol.kind} needs an algorithm that uploads; "
        f"{sim.algorithm.settings.name!r} has no uploading task",
    )

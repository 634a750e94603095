"""Settings a scenario gives that change nothing in it: a warning line each, no refusal.

A setting counts as given when it differs from its default (a resolved scenario, which
spells out every default, warns of nothing more than the scenario it came from).
"""

from __future__ import annotations

from pydantic import BaseModel

from mecsim.config.sections import Scenario


def _changed(section: BaseModel, key: str) -> bool:
    """Whether ``section.key`` differs from the key's default."""
    field = type(section).model_fields[key]
    return getattr(section, key) != field.get_default(call_default_factory=True)


def ineffective_settings(scenario: Scenario) -> list[str]:
    """Settings given in the scenario that change nothing in it, one line each: handover
    keys without moving clients, a medium engine with one cell, a backhaul without the
    hierarchical protocol, min_classes without the client-wise Dirichlet, a Ray address
    without the Ray executor."""
    found = []
    network = scenario.network
    if scenario.clients.mobility.model == "static":
        found += [
            f"network.{key} has no effect: clients do not move (clients.mobility)"
            for key in type(network).model_fields
            if key.startswith("handover_") and _changed(network, key)
        ]
    if _changed(network, "medium") and len(network.cells) < 2:
        found.append("network.medium has no effect: one cell has no shared medium (network.cells)")
    if _changed(network, "backhaul") and scenario.protocol.kind != "hierarchical":
        found.append("network.backhaul has no effect: only protocol.kind = 'hierarchical' uses it")
    data = scenario.data
    if _changed(data, "min_classes") and data.partition != "dirichlet_clients":
        found.append(
            "data.min_classes has no effect: only data.partition = 'dirichlet_clients' uses it"
        )
    execution = scenario.execution
    if execution.ray_address is not None and execution.executor != "ray":
        found.append(
            f"execution.ray_address has no effect: execution.executor is "
            f"{execution.executor!r}, not 'ray'"
        )
    return found

"""Checks of a scenario's radio decisions: scheduling, power control, bandwidth allocation."""

from __future__ import annotations

from mecsim.config.problems import Problem
from mecsim.config.sections import Scenario
from mecsim.policies.scheduling import SCHEDULERS

SYNCHRONOUS = ("compute_and_wait", "wait_free", "deadline")
"""Protocols whose every upload belongs to one round (a pilot can measure it)."""


def check_radio(scenario: Scenario) -> list[Problem]:
    """A policy that ranks by what training reports cannot choose in a cost-only run;
    bandwidth allocation needs a finite band; power control and allocation run on a
    single static cell's links; a pilot needs rounds and static clients (unknown names
    are ``mecsim.config.validation``'s to refuse)."""
    problems = []
    policy = scenario.scheduling.policy
    if scenario.execution.cost_only and SCHEDULERS.get(policy).uses_training:
        problems.append(
            Problem(
                "scheduling.policy",
                f"{policy!r} ranks clients by what training reports (loss, update norm) and "
                "a cost-only run trains nothing: choose another policy or set "
                "execution.cost_only = false",
            )
        )
    uplink = scenario.network.uplink
    if uplink.allocation != "fcfs" and uplink.total_bandwidth_mhz is None:
        problems.append(
            Problem(
                "network.uplink.allocation",
                f"{uplink.allocation!r} splits a finite band: set "
                "network.uplink.total_bandwidth_mhz",
            )
        )
    moving = scenario.clients.mobility.model != "static"
    if scenario.scheduling.channel == "pilot" and (
        moving or scenario.protocol.kind not in SYNCHRONOUS
    ):
        problems.append(
            Problem(
                "scheduling.channel",
                "'pilot' measures each candidate's uplink for its round's upload: it needs "
                f"static clients and a synchronous protocol ({', '.join(SYNCHRONOUS)}); use 'reported'",
            )
        )
    medium = len(scenario.network.cells) > 1 or moving
    for key, value, default in (("power", uplink.power, "fixed"),
                                ("allocation", uplink.allocation, "fcfs")):  # fmt: skip
        if value != default and medium:
            problems.append(
                Problem(
                    f"network.uplink.{key}",
                    f"{value!r} runs on one cell of static clients for now (several cells and "
                    f"moving clients share a medium of fixed bands and powers); use {default!r}",
                )
            )
    return problems

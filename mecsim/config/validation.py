"""Validating a scenario mapping: every problem collected, each with its dotted path.

:func:`validate_scenario` checks the tables against :class:`~mecsim.config.sections.Scenario`
(the ``[algorithm]`` and ``[protocol]`` tables against the chosen algorithm's and
protocol's own settings) and then across tables (names that must exist, a client
table's columns, what the algorithm needs of the data); unknown keys get the
nearest known key as a hint.
"""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import (
    ValidationError,
)

from mecsim.algorithms import ALGORITHMS
from mecsim.algorithms.base import AlgorithmSettings
from mecsim.channels import FADING
from mecsim.common.distributions import Choice, Uniform, attribute_values
from mecsim.common.registry import Registry
from mecsim.common.section import Section
from mecsim.config.problems import Problem, ScenarioError, problems_from
from mecsim.config.radio_checks import check_radio
from mecsim.config.sections import Scenario
from mecsim.executors import EXECUTORS
from mecsim.learning.data import DATASETS, PARTITIONS, dataset_shape
from mecsim.learning.devices import DeviceProfile
from mecsim.learning.models import MODELS
from mecsim.policies.allocation import ALLOCATIONS
from mecsim.policies.power import POWER_CONTROLS
from mecsim.policies.scheduling import SCHEDULERS, SchedulingSettings
from mecsim.protocols import PROTOCOLS
from mecsim.protocols.registry import protocol_settings
from mecsim.protocols.settings import ProtocolSettings

__all__ = ["Problem", "ScenarioError", "validate_scenario"]


def _check_names(scenario: Scenario) -> list[Problem]:
    """Registry names and value ranges that pydantic's field types cannot express."""
    devices = scenario.device_catalog()
    checks = [
        ("data.dataset", scenario.data.dataset, DATASETS),
        ("data.partition", scenario.data.partition, PARTITIONS),
        ("algorithm.name", scenario.algorithm.name, ALGORITHMS),
        ("network.fading", scenario.network.fading, FADING),
        ("server.device", scenario.server.device, devices),
        ("network.uplink.power", scenario.network.uplink.power, POWER_CONTROLS),
        ("network.uplink.allocation", scenario.network.uplink.allocation, ALLOCATIONS),
    ]
    if scenario.data.public_dataset is not None:
        checks.append(("data.public_dataset", scenario.data.public_dataset, DATASETS))
    for i, cell in enumerate(scenario.network.cells):
        if cell.device is not None:
            checks.append((f"network.cells.{i}.device", cell.device, devices))
    if scenario.execution.executor != "auto":
        checks.append(("execution.executor", scenario.execution.executor, EXECUTORS))
    problems = []
    for path, name, registry in checks:
        if name not in registry:
            allowed = ", ".join(registry.names())
            problems.append(Problem(path, f"unknown {registry.kind} {name!r}; allowed: {allowed}"))
    for model in scenario.model.names:
        if model not in MODELS:
            allowed = ", ".join(MODELS.names())
            problems.append(Problem("model.name", f"unknown model {model!r}; allowed: {allowed}"))
    problems += _check_algorithm(scenario) + check_radio(scenario)
    for device in attribute_values(scenario.clients.device) or []:
        if device not in devices:
            allowed = ", ".join(devices.names())
            problems.append(
                Problem("clients.device", f"unknown device {device!r}; allowed: {allowed}")
            )
    problems += _check_positive(scenario)
    problems += _check_client_table(scenario, devices)
    problems += _check_cells(scenario)
    if scenario.clients.num_samples is not None and not scenario.execution.cost_only:
        problems.append(
            Problem("clients.num_samples", "only used with execution.cost_only = true; remove it")
        )
    return problems + _check_protocol(scenario)


def _check_protocol(scenario: Scenario) -> list[Problem]:
    """Protocol settings that depend on the number of clients."""
    problems = []
    protocol = scenario.protocol
    partial = protocol.participation < 1 or (
        protocol.clients_per_round is not None
        and protocol.clients_per_round < scenario.clients.count
    )
    if (
        protocol.kind == "wait_free"
        and protocol.personal_budget == "window_uncapped"
        and partial
        and not protocol.broadcast_unselected
        and protocol.max_personal_steps is None
    ):
        problems.append(
            Problem(
                "protocol.max_personal_steps",
                "an uncapped window with partial participation leaves unselected clients training "
                "for many rounds; set max_personal_steps (appendix F (b)), "
                "broadcast_unselected = true (appendix F (a)) or personal_budget = 'window'",
            )
        )
    process = PROTOCOLS.get(protocol.kind) if protocol.kind in PROTOCOLS else None
    supports = getattr(process, "supports", None)
    name = scenario.algorithm.name
    if supports is not None and name in ALGORITHMS and not supports(ALGORITHMS.get(name)):
        problems.append(
            Problem(
                "protocol.kind",
                f"protocol {protocol.kind!r} cannot run algorithm {name!r}: {process.requirement}",  # type: ignore[union-attr]
            )
        )
    if (
        protocol.clients_per_round is not None
        and protocol.clients_per_round > scenario.clients.count
    ):
        problems.append(
            Problem(
                "protocol.clients_per_round",
                f"{protocol.clients_per_round} exceeds clients.count ({scenario.clients.count})",
            )
        )
    return problems


def _check_client_table(scenario: Scenario, devices: Registry[DeviceProfile]) -> list[Problem]:
    """The table's device names exist among ``devices``; its sample counts are only for
    cost-only runs."""
    if scenario.clients.table is None:
        return []
    from mecsim.config.client_table import read_client_table

    table = read_client_table(scenario.clients.table)
    problems = []
    for device in sorted(set(table["device"])) if "device" in table else []:
        if device not in devices:
            problems.append(
                Problem(
                    "clients.table",
                    f"unknown device {device!r} in {scenario.clients.table}; allowed: "
                    + ", ".join(devices.names()),
                )
            )
    if "num_samples" in table and not scenario.execution.cost_only:
        problems.append(
            Problem(
                "clients.table",
                f"{scenario.clients.table}: column num_samples is only used with "
                "execution.cost_only = true (real runs count the partition); drop the column",
            )
        )
    return problems


def _check_cells(scenario: Scenario) -> list[Problem]:
    """Cells need client positions; what several cells cannot do yet."""
    cells, clients = scenario.network.cells, scenario.clients
    placed = clients.placed
    problems = []
    if cells and not placed:
        problems.append(
            Problem(
                "network.cells",
                "cells need client positions: set clients.x_m and clients.y_m (a value or a "
                "distribution each) or give clients.table columns x_m and y_m",
            )
        )
    if placed and clients.table_columns() & {"distance_m"}:
        problems.append(
            Problem("clients.table", "give positions (x_m, y_m) or distance_m, not both")
        )
    mobility = clients.mobility
    if mobility.model != "static" and not placed:
        problems.append(
            Problem(
                "clients.mobility",
                "moving clients need positions: set clients.x_m and clients.y_m or give "
                "clients.table columns x_m and y_m",
            )
        )
    if mobility.trace is not None:
        from mecsim.net.mobility import read_trace

        try:
            read_trace(mobility.trace, clients.count)
        except ValueError as error:
            problems.append(Problem("clients.mobility.trace", str(error)))
    return problems


def _check_algorithm(scenario: Scenario) -> list[Problem]:
    """What the algorithm supports: protocols, mixed architectures, public data."""
    if scenario.algorithm.name not in ALGORITHMS:
        return []
    algorithm = ALGORITHMS.get(scenario.algorithm.name)
    name, kind = scenario.algorithm.name, scenario.protocol.kind
    problems = []
    if algorithm.protocols is not None and kind not in algorithm.protocols:
        allowed = ", ".join(sorted(algorithm.protocols))
        problems.append(
            Problem(
                "protocol.kind",
                f"algorithm {name!r} does not run under {kind!r}; use one of: {allowed}",
            )
        )
    if len(scenario.model.names) > 1 and not algorithm.heterogeneous:
        supporting = ", ".join(n for n in ALGORITHMS.names() if ALGORITHMS.get(n).heterogeneous)
        problems.append(
            Problem(
                "model.name",
                f"algorithm {name!r} needs one architecture for every client; "
                f"mixed architectures work with: {supporting}",
            )
        )
    required = getattr(algorithm, "required_rounds", None)
    if required is not None and scenario.protocol.rounds != required(scenario.algorithm):
        rounds = required(scenario.algorithm)
        problems.append(
            Problem(
                "protocol.rounds",
                f"algorithm {name!r} runs {rounds - 1} FL rounds (algorithm.fl_rounds) and then "
                f"one local round: set protocol.rounds = {rounds}",
            )
        )
    return problems + _check_algorithm_data(scenario, algorithm)


def _check_algorithm_data(scenario: Scenario, algorithm: type) -> list[Problem]:
    """What the algorithm needs of the data and the run: clients left to train, a
    validation split, training (when what it sends depends on it), public data."""
    name = scenario.algorithm.name
    problems = []
    held_out = scenario.evaluation.new_clients
    if held_out and held_out >= scenario.clients.count:
        problems.append(
            Problem(
                "evaluation.new_clients",
                f"{held_out} new clients leave none of the {scenario.clients.count} clients to "
                "train; hold out fewer (at most clients.count - 1)",
            )
        )
    if getattr(algorithm, "needs_validation", False) and scenario.data.val_fraction == 0:
        problems.append(
            Problem(
                "data.val_fraction",
                f"algorithm {name!r} selects models on each client's validation split; "
                "set data.val_fraction > 0 (e.g. 0.2)",
            )
        )
    if algorithm.payload_from_training and scenario.execution.cost_only:
        problems.append(
            Problem(
                "execution.cost_only",
                f"algorithm {name!r} chooses what it sends from trained values "
                f"({algorithm.payload_from_training}); cost-only runs train nothing, so its "
                "bytes would be silently wrong: run it with training",
            )
        )
    if algorithm.public_data != "none" and scenario.data.public_size == 0:
        problems.append(
            Problem("data.public_size", f"algorithm {name!r} needs public data; set a size > 0")
        )
    problems += _check_public_dataset(scenario, algorithm.public_data == "labeled")
    return problems


def _check_public_dataset(scenario: Scenario, labeled: bool) -> list[Problem]:
    """A separate public dataset has the private data's input shape (and, when its labels
    are used, no more classes)."""
    private, public = scenario.data.dataset, scenario.data.public_dataset
    if public is None or public not in DATASETS or private not in DATASETS:
        return []
    (shape, classes), (public_shape, public_classes) = dataset_shape(private), dataset_shape(public)
    if public_shape != shape:
        return [
            Problem(
                "data.public_dataset",
                f"{public} has inputs of shape {public_shape} but {private} {shape}; "
                "pick a dataset of the same shape",
            )
        ]
    if labeled and public_classes > classes:
        return [
            Problem(
                "data.public_dataset",
                f"algorithm {scenario.algorithm.name!r} trains on the public labels, and {public} "
                f"has {public_classes} classes to {private}'s {classes}; pick one with at most "
                f"{classes}",
            )
        ]
    return []


def _check_positive(scenario: Scenario) -> list[Problem]:
    """Bandwidth and distance must be > 0 over the whole support of their distribution."""
    problems = []
    for key in ("bandwidth_mhz", "distance_m"):
        value = getattr(scenario.clients, key)
        path = f"clients.{key}"
        if isinstance(value, (int, float)) and value <= 0:
            problems.append(Problem(path, f"must be > 0 (got {value})"))
        elif isinstance(value, Uniform) and value.low <= 0:
            problems.append(Problem(f"{path}.low", f"must be > 0 (got {value.low})"))
        elif isinstance(value, Choice) and any(float(v) <= 0 for v in value.values):
            problems.append(Problem(f"{path}.values", "every value must be > 0"))
        elif getattr(value, "dist", None) == "normal":
            problems.append(
                Problem(path, "a normal distribution can be <= 0; use uniform or lognormal")
            )
    return problems


@dataclass(frozen=True)
class Chosen:
    """A section whose settings class depends on a name in it (``algorithm.name``)."""

    section: str
    key: str
    registry: Any
    settings_of: Callable[[str], type[Section]]
    default: str


def _chosen_sections() -> list[Chosen]:
    return [
        Chosen("algorithm", "name", ALGORITHMS, _algorithm_settings, AlgorithmSettings().name),
        Chosen("protocol", "kind", PROTOCOLS, protocol_settings, ProtocolSettings().kind),
        Chosen(
            "scheduling", "policy", SCHEDULERS, _scheduler_settings, SchedulingSettings().policy
        ),
    ]


def _validate_section(
    data: dict[str, Any], chosen: Chosen, name: str
) -> tuple[Section | None, list[Problem]]:
    settings_class = chosen.settings_of(name)
    try:
        return settings_class.model_validate({**data, chosen.key: name}), []
    except ValidationError as error:
        return None, problems_from(error, chosen.section, settings_class)


def _foreign_keys(data: dict[str, Any], chosen: Chosen, name: str) -> list[Problem]:
    """Keys under the section that belong to another algorithm, protocol or policy,
    named as such (the others are looked at only for a key that is not ``name``'s own,
    so a valid scenario imports no other algorithm)."""
    own = chosen.settings_of(name).model_fields
    problems = []
    for key in data:
        if key in own:
            continue
        names = chosen.registry.names()
        owners = [n for n in names if key in chosen.settings_of(n).model_fields]
        if owners:
            listed = " / ".join(map(repr, owners[:4])) + (" / ..." if len(owners) > 4 else "")
            section = chosen.section
            problems.append(
                Problem(
                    f"{section}.{key}",
                    f"is a setting of {section} {listed}, not {name!r}; remove it or change "
                    f"{section}.{chosen.key} (`mecsim describe {section} NAME` lists its keys)",
                )
            )
    return problems


def _algorithm_settings(name: str) -> type[Section]:
    return ALGORITHMS.get(name).Settings


def _scheduler_settings(name: str) -> type[Section]:
    return SCHEDULERS.get(name).Settings


def _validate_chosen(table: dict[str, Any], chosen: Chosen) -> tuple[Section | None, list[Problem]]:
    """One chosen-by-name section: its name known, no other name's keys, its own valid."""
    name = table.get(chosen.key, chosen.default)
    if name not in chosen.registry:
        allowed = ", ".join(chosen.registry.names())
        path = f"{chosen.section}.{chosen.key}"
        return None, [Problem(path, f"unknown {chosen.registry.kind} {name!r}; allowed: {allowed}")]
    foreign = _foreign_keys(table, chosen, name)
    paths = {p.path for p in foreign}
    own = {k: v for k, v in table.items() if f"{chosen.section}.{k}" not in paths}
    settings, found = _validate_section(own, chosen, name)
    return (None if foreign else settings), foreign + found


def _selection_alias(tables: dict[str, dict[str, Any]]) -> list[Problem]:
    """``protocol.selection`` (0.1) is ``scheduling.policy``: moved there, with a warning."""
    if "selection" not in tables["protocol"]:
        return []
    old = tables["protocol"].pop("selection")
    policy = tables["scheduling"].setdefault("policy", old)
    if policy != old and old != "uniform":
        return [
            Problem(
                "protocol.selection",
                f"{old!r} conflicts with scheduling.policy = {policy!r}; remove "
                "protocol.selection (scheduling.policy replaces it)",
            )
        ]
    if old != "uniform":
        warnings.warn(
            f"protocol.selection is deprecated: write scheduling.policy = {old!r}",
            DeprecationWarning,
            stacklevel=2,
        )
    return []


def validate_scenario(data: dict[str, Any]) -> tuple[Scenario | None, list[Problem]]:
    """Validate a scenario mapping; return (scenario or None, every problem found).

    The ``[algorithm]``, ``[protocol]`` and ``[scheduling]`` tables are validated by
    the settings class of the chosen algorithm, protocol and policy.
    """
    data = copy.deepcopy(data)
    chosen = _chosen_sections()
    tables = {c.section: data.pop(c.section, {}) for c in chosen}
    for key, table in tables.items():
        if not isinstance(table, dict):
            return None, [Problem(key, "must be a table")]
    problems = _selection_alias(tables)
    scenario = None
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as error:
        problems += problems_from(error, model=Scenario)
    sections = {}
    for c in chosen:
        sections[c.section], found = _validate_chosen(tables[c.section], c)
        problems += found
    if problems or scenario is None:
        return None, problems
    for section, settings in sections.items():
        setattr(scenario, section, settings)
    problems = _check_names(scenario)
    return (None if problems else scenario), problems

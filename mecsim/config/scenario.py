"""Scenario files: TOML, validated with pydantic, every default resolved.

A scenario has the sections ``data``, ``model``, ``algorithm``, ``protocol``,
``network`` (with ``uplink`` and ``downlink``), ``clients``, ``server``,
``output`` and a top-level ``seed``. Unknown keys are errors. Units are part
of key names (``bandwidth_mhz``, ``tx_power_dbm``, ``distance_m``).

Errors are collected, not raised one by one: :func:`validate_scenario`
returns every problem with its dotted path. This module reads files and
applies overrides; the tables' classes live in :mod:`mecsim.config.sections` and the
checks in :mod:`mecsim.config.validation` (both re-exported here).
"""

from __future__ import annotations

import copy
import logging
import platform
from pathlib import Path
from typing import Any

import tomllib

from mecsim.common.errors import ConfigError
from mecsim.common.file_keys import BESIDE_THE_FILE, absolute_file_paths
from mecsim.config.sections import (
    ClientsConfig,
    CompareConfig,
    DataConfig,
    EvaluationConfig,
    ExecutionConfig,
    ModelConfig,
    OutputConfig,
    Scenario,
    ServerConfig,
)
from mecsim.config.validation import Problem, ScenarioError, validate_scenario

__all__ = [
    "ClientsConfig",
    "CompareConfig",
    "DataConfig",
    "EvaluationConfig",
    "ExecutionConfig",
    "ModelConfig",
    "OutputConfig",
    "Problem",
    "Scenario",
    "ScenarioError",
    "ServerConfig",
    "apply_overrides",
    "load_scenario",
    "parse_override",
    "read_scenario_file",
    "resolved_toml",
    "validate_scenario",
]


def parse_override(text: str) -> tuple[str, Any]:
    """Parse ``key.path=value``; the value is read as TOML, else taken as a string."""
    if "=" not in text:
        raise ConfigError("--set", f"expected key=value, got {text!r}")
    key, raw = (part.strip() for part in text.split("=", 1))
    try:
        value = tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        value = raw
    return key, value


def apply_overrides(data: dict[str, Any], overrides: list[str] | dict[str, Any]) -> dict[str, Any]:
    """Return a copy of ``data`` with dotted-key overrides applied."""
    data = copy.deepcopy(data)
    items = overrides.items() if isinstance(overrides, dict) else map(parse_override, overrides)
    for key, value in items:
        parts = key.split(".")
        node = data
        for i, part in enumerate(parts[:-1]):
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(
                    ".".join(parts[: i + 1]), "is a value, not a table; cannot set a key inside it"
                )
            node = child
        node[parts[-1]] = value
    return data


def read_scenario_file(path: str | Path) -> dict[str, Any]:
    """Read a TOML scenario file into a mapping (its ``name`` defaults to the file stem)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError("SCENARIO", f"file not found: {path}")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8-sig"))  # a byte-order mark: no TOML
    except UnicodeDecodeError:
        raise ConfigError("SCENARIO", f"{path} is not UTF-8 text; save it as UTF-8") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError("SCENARIO", f"{path} is not valid TOML: {error}") from None
    if not data:
        logging.getLogger(__name__).info("%s is empty: every setting takes its default", path)
    data.setdefault("name", path.stem)
    return absolute_file_paths(data, BESIDE_THE_FILE, path.parent)


def load_scenario(
    source: str | Path | dict[str, Any] | Scenario,
    overrides: list[str] | dict[str, Any] | None = None,
) -> Scenario:
    """Load and validate a scenario from a file, a mapping or a Scenario; raise ScenarioError."""
    if isinstance(source, Scenario):
        data = source.model_dump(mode="json", exclude_none=True)
    elif isinstance(source, dict):
        data = source
    else:
        data = read_scenario_file(source)
    data = absolute_file_paths(apply_overrides(data, overrides or []))
    scenario, problems = validate_scenario(data)
    if problems:
        raise ScenarioError(problems)
    assert scenario is not None
    return scenario


def resolved_toml(scenario: Scenario) -> str:
    """The scenario with every default filled in, plus the versions that ran it."""
    import tomli_w
    import torch

    import mecsim

    data = scenario.model_dump(mode="json", exclude_none=True)
    data["versions"] = {
        "mecsim": mecsim.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
    }
    return tomli_w.dumps(data)

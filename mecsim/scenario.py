"""Scenario files: TOML, validated with pydantic, every default resolved.

A scenario has the sections ``data``, ``model``, ``algorithm``, ``protocol``,
``network`` (with ``uplink`` and ``downlink``), ``clients``, ``server``,
``output`` and a top-level ``seed``. Unknown keys are errors. Units are part
of key names (``bandwidth_mhz``, ``tx_power_dbm``, ``distance_m``).

Errors are collected, not raised one by one: :func:`validate_scenario`
returns every problem with its dotted path.
"""

from __future__ import annotations

import copy
import difflib
import logging
import platform
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import tomllib
from pydantic import (
    BaseModel,
    Field,
    SerializeAsAny,
    ValidationError,
    field_validator,
    model_validator,
)

from mecsim.algorithms import ALGORITHMS
from mecsim.algorithms.base import AlgorithmSettings
from mecsim.channels import FADING
from mecsim.config import Section
from mecsim.data import DATASETS, PARTITIONS, dataset_shape
from mecsim.devices import DEVICES
from mecsim.distributions import Choice, NameAttr, NumberAttr, Uniform, attribute_values
from mecsim.errors import ConfigError, MecsimError
from mecsim.executors import EXECUTORS
from mecsim.faults import FaultsConfig
from mecsim.models import MODELS
from mecsim.network_config import NetworkConfig
from mecsim.protocols import PROTOCOLS
from mecsim.protocols.registry import protocol_settings
from mecsim.protocols.settings import ProtocolSettings


class DataConfig(Section):
    """Dataset, partition across clients, and per-client splits."""

    dataset: str = Field(default="digits", description="dataset name (mecsim list datasets)")
    root: str | None = Field(default=None, description="directory holding torchvision datasets")
    download: bool = Field(default=False, description="allow torchvision to download into root")
    partition: str = Field(
        default="dirichlet",
        description="how training data splits over clients (mecsim list partitions)",
    )
    alpha: float = Field(default=0.5, gt=0, description="Dirichlet concentration")
    classes_per_client: int = Field(
        default=2, ge=1, description="pathological partition: label classes each client holds"
    )
    quantity_skew: Literal["none", "lognormal"] = Field(
        default="none", description="client dataset sizes: as the partition gives, or lognormal"
    )
    lognormal_sigma: float = Field(
        default=2.0, ge=0, description="quantity_skew = lognormal: sigma of the size draw"
    )
    min_samples: int = Field(
        default=2,
        ge=1,
        description="every client gets at least this many training samples (redraws)",
    )
    test_fraction: float = Field(
        default=0.2, gt=0, lt=1, description="share of the pool held out as the global test set"
    )
    val_fraction: float = Field(
        default=0.0,
        ge=0,
        lt=1,
        description="share of each client's data kept as its validation split",
    )
    local_test_fraction: float = Field(
        default=0.25,
        gt=0,
        description="each client's local test set, as a share of its training size (same labels)",
    )
    local_split: Literal["test_pool", "own_data"] = Field(
        default="test_pool",
        description="where local test sets come from: 'test_pool', drawn from the test set "
        "with the client's training labels (SCD appendix B; local_test_fraction); "
        "'own_data', each client's partition split into train (a share drawn from "
        "train_share_choices), validation (val_fraction) and test (own_test_share), the rest "
        "unused (COMET appendix B: {0.1, 0.3, 0.4} / 0.1 / 0.5)",
    )
    train_share_choices: list[float] = Field(
        default=[0.1, 0.3, 0.4],
        min_length=1,
        description="local_split = own_data: each client's training share of its partition, "
        "drawn uniformly from these",
    )
    own_test_share: float = Field(
        default=0.5,
        gt=0,
        lt=1,
        description="local_split = own_data: each client's local test share of its partition",
    )

    @field_validator("train_share_choices")
    @classmethod
    def _shares(cls, shares: list[float]) -> list[float]:
        if any(not 0 < x < 1 for x in shares):
            raise ValueError(f"{shares}: every share must lie in (0, 1)")
        return shares

    @model_validator(mode="after")
    def _own_split_fits(self) -> DataConfig:
        if self.local_split == "own_data":
            most = max(self.train_share_choices) + self.val_fraction + self.own_test_share
            if most > 1 + 1e-9:
                raise ValueError(
                    f"local_split = own_data: train share {max(self.train_share_choices)} + "
                    f"val_fraction {self.val_fraction} + own_test_share {self.own_test_share} "
                    "exceed 1; lower one of them"
                )
        return self

    public_size: int = Field(
        default=0,
        ge=0,
        description="samples held out of the training pool as the public split (algorithms "
        "that use public data; every client downloads it once)",
    )
    public_dataset: str | None = Field(
        default=None,
        description="draw the public split from this dataset instead (e.g. cifar100 for "
        "cifar10, as COMET); same input shape; the private data keeps every sample",
    )
    synthetic_alpha: float = Field(
        default=1.0, ge=0, description="synthetic dataset: model heterogeneity alpha (FedProx)"
    )
    synthetic_beta: float = Field(
        default=1.0, ge=0, description="synthetic dataset: data heterogeneity beta (FedProx)"
    )


class ModelConfig(Section):
    """Client architectures: one name, or a ``choice`` distribution over names."""

    name: NameAttr = Field(
        default="cnn-small",
        description="architecture, or { dist = 'choice', values = [...], weights = [...] }",
    )
    assign: Literal["random", "data_size"] = Field(
        default="random",
        description="with a choice: draw per client ('random'), or give larger models to "
        "clients with more data in the choice's proportions ('data_size', as COMET)",
    )

    @property
    def names(self) -> list[str]:
        """Every architecture named, the default (server) one first."""
        return list(dict.fromkeys(str(v) for v in attribute_values(self.name)))


class ClientsConfig(Section):
    """Client population; each attribute is a constant or a distribution."""

    count: int = Field(default=20, ge=1, description="number of clients")
    bandwidth_mhz: NumberAttr = Field(
        default=Uniform(low=10, high=30), description="each client's uplink band, MHz"
    )
    tx_power_dbm: NumberAttr = Field(
        default=Uniform(low=23, high=30), description="each client's transmit power, dBm"
    )
    distance_m: NumberAttr = Field(
        default=Uniform(low=100, high=500), description="each client's distance to the server, m"
    )
    device: NameAttr = Field(
        default="phone-mid", description="each client's compute device (mecsim list devices)"
    )
    num_samples: NumberAttr | None = Field(
        default=None,
        description="cost-only mode: per-client training sample counts (no data is loaded)",
    )
    table: str | None = Field(
        default=None,
        description="CSV of per-client distance_m, bandwidth_mhz, tx_power_dbm, device and "
        "(cost-only) num_samples, one row per client; its columns replace the values above "
        "and its rows set count (a relative path is read from the scenario file's folder)",
    )

    @field_validator("table")
    @classmethod
    def _readable(cls, table: str | None) -> str | None:
        if table is not None:
            from mecsim.client_table import read_client_table

            read_client_table(table)  # a ValueError names the file, the client and the column
        return table

    @model_validator(mode="after")
    def _table(self) -> ClientsConfig:
        if self.table is None:
            return self
        from mecsim.client_table import read_client_table

        rows = len(read_client_table(self.table))
        if "count" in self.model_fields_set and self.count != rows:
            raise ValueError(
                f"count = {self.count} but {self.table} has {rows} rows; remove count "
                "(the table sets it) or fix the table"
            )
        self.__dict__["count"] = rows  # the table sets the population
        return self


class ServerConfig(Section):
    """The edge server: the device its aggregation and server tasks run on."""

    device: str = Field(
        default="edge-server", description="the server's compute device (mecsim list devices)"
    )


SAFE_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
"""A run or scenario name: one path component (letters, digits, ``._-``), never ``..``."""


class OutputConfig(Section):
    """Where and how a run directory is written."""

    dir: str = Field(default="runs", description="folder that holds run directories")
    name: str | None = Field(
        default=None,
        pattern=SAFE_NAME,
        description="run directory name under dir (default: <name>-seed<seed>)",
    )
    overwrite: bool = Field(
        default=False, description="replace an existing run directory mecsim wrote"
    )
    progress: bool = Field(default=True, description="show a progress bar")
    events_csv: bool = Field(
        default=True,
        description="also write events.csv (events.parquet is always written); false for "
        "huge runs, where the CSV is the slowest and largest file",
    )
    checkpoint_every: int | None = Field(
        default=None,
        ge=1,
        le=10_000_000,
        description="save a checkpoint every N rounds (also: every checkpoint_minutes)",
    )
    checkpoint_minutes: float = Field(
        default=5.0,
        ge=0,
        le=1e6,
        description="save a checkpoint at the first round end after this many wall-clock "
        "minutes since the last (0: only checkpoint_every)",
    )


class EvaluationConfig(Section):
    """How per-client accuracies become the personalized accuracy of a round."""

    personal_mean: Literal["train_size", "test_size", "clients", "selected"] = Field(
        default="train_size",
        description="personalized accuracy: mean of the clients' local-test accuracies "
        "weighted by training size (SCD appendix B), by local-test size (pooled accuracy), "
        "plain over clients (COMET, PersFL), or plain over the round's selected clients "
        "(KAPC)",
    )
    std_ddof: Literal[0, 1] = Field(
        default=0,
        description="delta degrees of freedom of personal_acc_std, the unweighted standard "
        "deviation over the clients the mean reads: 0 population, 1 sample (PersFL)",
    )
    new_clients: int = Field(
        default=0,
        ge=0,
        description="hold the last this many clients out of training; after the last round "
        "each receives the final model(s) and adapts (SCD appendix B's new joining clients); "
        "their accuracy is reported apart (summary.json: new_client_acc)",
    )
    new_client_adaptation: Literal["algorithm", "finetune"] = Field(
        default="algorithm",
        description="how a new client adapts: 'algorithm': its own personalization step "
        "where it has one (else fine-tuning); 'finetune': every algorithm fine-tunes the "
        "received generic model (SCD appendix B)",
    )
    new_client_epochs: int = Field(
        default=1,
        ge=0,
        description="epochs a new client fine-tunes (SCD appendix B: 5 and 10); 0: evaluate "
        "the received model as it is",
    )


class ExecutionConfig(Section):
    """How client work runs: backend, Ray cluster, or no training at all (cost-only)."""

    threads: int | Literal["auto"] = Field(
        default="auto",
        description="torch CPU threads: a number, or 'auto' (the CPUs this process may use, "
        "shared among parallel sweep workers, at most the CPUs found idle at the start)",
    )

    @field_validator("threads")
    @classmethod
    def _threads(cls, threads: int | str) -> int | str:
        if isinstance(threads, int) and not 1 <= threads <= 4096:
            raise ValueError(f"{threads}: give a count in [1, 4096] or 'auto'")
        return threads

    executor: str = Field(
        default="auto",
        description="auto (serial or batched, whichever a timed probe finds faster) | serial "
        "| batched | ray",
    )
    max_batch_clients: int | None = Field(
        default=None,
        ge=1,
        description="batched: at most this many clients per vmapped group "
        "(default: as many as memory_budget_gb holds, measured)",
    )
    memory_budget_gb: float | None = Field(
        default=None,
        gt=0,
        description="batched: memory one vmapped group may use (default: half the RAM or "
        "GPU memory available at the start)",
    )
    ray_address: str | None = Field(
        default=None, description="Ray cluster address; None starts a local Ray instance"
    )
    ray_num_cpus: int | None = Field(default=None, ge=1, description="CPUs of a local Ray instance")
    ray_gpus_per_task: float = Field(default=0.0, ge=0, description="GPU share of each Ray task")
    ray_tasks: int | None = Field(
        default=None, ge=1, description="Ray tasks per round (default: one per available CPU)"
    )
    ray_inner: Literal["serial", "batched"] = Field(
        default="batched",
        description="how each Ray actor trains its share of a round's jobs (serial: "
        "bit-identical to the serial executor, batched: faster)",
    )
    cost_only: bool = Field(default=False, description="skip real training; time the network only")
    bulk_rounds: bool = Field(
        default=True,
        description="compute-and-wait rounds on static links run their clients in bulk "
        "(numpy; same tables as one process per client); false: always one process each",
    )
    accuracy_curve: list[tuple[float, float]] | None = Field(
        default=None,
        description="cost-only accuracy: (round, accuracy) points, round as in the rounds "
        "table (0-based), linearly interpolated",
    )

    @model_validator(mode="after")
    def _curve(self) -> ExecutionConfig:
        if self.accuracy_curve is not None:
            rounds = [r for r, _ in self.accuracy_curve]
            if not rounds or rounds != sorted(rounds):
                raise ValueError(
                    "accuracy_curve needs (round, accuracy) points in increasing round order"
                )
            if not self.cost_only:
                raise ValueError("accuracy_curve is only used with cost_only = true")
            if any(not 0.0 <= a <= 1.0 for _, a in self.accuracy_curve):
                raise ValueError("accuracy_curve accuracies must lie in [0, 1]")
        return self


class CompareConfig(Section):
    """``mecsim compare`` on this scenario: the sweep to run and the accuracy targets."""

    sweep: dict[str, list[Any]] = Field(
        default_factory=dict,
        description="dotted key -> values; every combination is one run (e.g. protocol.kind); "
        "the keys algorithm and protocol take whole choices with their own settings, e.g. "
        "algorithm = ['ditto:lam=0.1', 'fedprox:mu=0.01']",
    )
    mode: Literal["grid", "zip"] = Field(
        default="grid",
        description="grid: every combination of the sweep's values; zip: the i-th value of "
        "each key together (equal lengths)",
    )
    runs: list[dict[str, Any]] = Field(
        default_factory=list,
        description="explicit runs, each a table of dotted key -> value (crossed with the sweep), "
        "for points that differ in more than one key (async rounds, buffer size)",
    )
    seeds: list[int] = Field(
        default_factory=list,
        description="run every point with each of these seeds (empty: the scenario's seed)",
    )
    targets: list[float] = Field(
        default=[0.4, 0.8],
        min_length=1,
        description="accuracies whose time to reach compare reports (pm_time_T, gm_time_T)",
    )


class Scenario(Section):
    """A whole scenario; build one with :func:`load_scenario` or :func:`validate_scenario`."""

    name: str = Field(
        default="scenario",
        pattern=SAFE_NAME,
        description="the scenario's name (run directory prefix)",
    )
    seed: int = Field(default=0, description="seed of every random stream of the run")
    data: DataConfig = DataConfig()
    model: ModelConfig = ModelConfig()
    algorithm: SerializeAsAny[AlgorithmSettings] = AlgorithmSettings()
    protocol: SerializeAsAny[ProtocolSettings] = ProtocolSettings()
    network: NetworkConfig = NetworkConfig()
    clients: ClientsConfig = ClientsConfig()
    server: ServerConfig = ServerConfig()
    faults: FaultsConfig = FaultsConfig()
    output: OutputConfig = OutputConfig()
    evaluation: EvaluationConfig = EvaluationConfig()
    execution: ExecutionConfig = ExecutionConfig()
    compare: CompareConfig = CompareConfig()
    versions: dict[str, str] | None = Field(
        default=None, description="informational: versions that wrote a resolved scenario"
    )


@dataclass(frozen=True)
class Problem:
    """One validation problem: dotted path of the key and what is wrong."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


class ScenarioError(MecsimError):
    """A scenario has one or more problems."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        lines = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"invalid scenario ({len(problems)} problem(s)):\n{lines}")


def known_keys(model: type[BaseModel], parents: Sequence[str]) -> list[str]:
    """The keys of the table at ``parents`` inside ``model`` (empty if not a table)."""
    for part in parents:
        field = model.model_fields.get(part)
        annotation = field.annotation if field is not None else None
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        model = annotation
    return list(model.model_fields)


def unknown_key_message(key: str, known: Sequence[str]) -> str:
    """'unknown key' with the closest known key, or the known keys when none is close."""
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if close:
        return f"unknown key; did you mean {close[0]!r}?"
    if known:
        return f"unknown key; known keys here: {', '.join(known)}"
    return "unknown key; remove it or check its spelling"


def _problems_from(
    error: ValidationError, prefix: str = "", model: type[BaseModel] | None = None
) -> list[Problem]:
    problems = []
    for item in error.errors():
        # Drop pydantic's union-branch tags (e.g. 'float', 'uniform') from the path.
        loc = [str(p) for p in item["loc"] if not _is_union_tag(p)]
        path = ".".join(([prefix] if prefix else []) + loc) or "(top level)"
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            known = known_keys(model, loc[:-1]) if model is not None and loc else []
            message = unknown_key_message(loc[-1] if loc else "", known)
        elif item["type"] == "literal_error":
            message = f"{message} (got {item['input']!r})"
        problems.append(Problem(path, message))
    return problems


_UNION_TAGS = {
    "constant",
    "distribution",
    "uniform",
    "normal",
    "lognormal",
    "choice",
    "float",
    "str",
}


def _is_union_tag(part: Any) -> bool:
    """Pydantic adds union-branch names to error paths; they are not scenario keys."""
    return isinstance(part, str) and (part in _UNION_TAGS or part.startswith("function-"))


def _check_names(scenario: Scenario) -> list[Problem]:
    """Registry names and value ranges that pydantic's field types cannot express."""
    checks = [
        ("data.dataset", scenario.data.dataset, DATASETS),
        ("data.partition", scenario.data.partition, PARTITIONS),
        ("algorithm.name", scenario.algorithm.name, ALGORITHMS),
        ("network.fading", scenario.network.fading, FADING),
        ("server.device", scenario.server.device, DEVICES),
    ]
    if scenario.data.public_dataset is not None:
        checks.append(("data.public_dataset", scenario.data.public_dataset, DATASETS))
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
    problems += _check_algorithm(scenario)
    for device in attribute_values(scenario.clients.device) or []:
        if device not in DEVICES:
            allowed = ", ".join(DEVICES.names())
            problems.append(
                Problem("clients.device", f"unknown device {device!r}; allowed: {allowed}")
            )
    problems += _check_positive(scenario)
    problems += _check_client_table(scenario)
    if scenario.clients.num_samples is not None and not scenario.execution.cost_only:
        problems.append(
            Problem("clients.num_samples", "only used with execution.cost_only = true; remove it")
        )
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


def _check_client_table(scenario: Scenario) -> list[Problem]:
    """The table's device names exist; its sample counts are only for cost-only runs."""
    if scenario.clients.table is None:
        return []
    from mecsim.client_table import read_client_table

    table = read_client_table(scenario.clients.table)
    problems = []
    for device in sorted(set(table["device"])) if "device" in table else []:
        if device not in DEVICES:
            problems.append(
                Problem(
                    "clients.table",
                    f"unknown device {device!r} in {scenario.clients.table}; allowed: "
                    + ", ".join(DEVICES.names()),
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


def _validate_section(
    data: dict[str, Any], section: str, name: str, settings_class: type[Section]
) -> tuple[Section | None, list[Problem]]:
    key = "kind" if section == "protocol" else "name"
    try:
        return settings_class.model_validate({**data, key: name}), []
    except ValidationError as error:
        return None, _problems_from(error, section, settings_class)


def _foreign_keys(
    data: dict[str, Any], section: str, name: str, settings: dict[str, type[BaseModel]]
) -> list[Problem]:
    """Keys under ``[section]`` that belong to another algorithm or protocol (``settings``:
    every name's settings class), named as such."""
    chooser = "kind" if section == "protocol" else "name"
    problems = []
    for key in data:
        if key in settings[name].model_fields:
            continue
        owners = [n for n, model in settings.items() if key in model.model_fields]
        if owners:
            listed = " / ".join(map(repr, owners[:4])) + (" / ..." if len(owners) > 4 else "")
            problems.append(
                Problem(
                    f"{section}.{key}",
                    f"is a setting of {section} {listed}, not {name!r}; remove it or change "
                    f"{section}.{chooser} (`mecsim describe {section} NAME` lists its keys)",
                )
            )
    return problems


def validate_scenario(data: dict[str, Any]) -> tuple[Scenario | None, list[Problem]]:
    """Validate a scenario mapping; return (scenario or None, every problem found).

    The ``[algorithm]`` and ``[protocol]`` tables are validated by the
    settings class of the chosen algorithm and protocol.
    """
    data = copy.deepcopy(data)
    tables = {key: data.pop(key, {}) for key in ("algorithm", "protocol")}
    for key, table in tables.items():
        if not isinstance(table, dict):
            return None, [Problem(key, "must be a table")]
    problems: list[Problem] = []
    scenario = None
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as error:
        problems += _problems_from(error, model=Scenario)
    algorithm = protocol = None
    name = tables["algorithm"].get("name", AlgorithmSettings().name)
    if name not in ALGORITHMS:
        allowed = ", ".join(ALGORITHMS.names())
        problems.append(
            Problem("algorithm.name", f"unknown algorithm {name!r}; allowed: {allowed}")
        )
    else:
        settings = {n: ALGORITHMS.get(n).Settings for n in ALGORITHMS.names()}
        foreign = _foreign_keys(tables["algorithm"], "algorithm", name, settings)
        paths = {p.path for p in foreign}
        own = {k: v for k, v in tables["algorithm"].items() if f"algorithm.{k}" not in paths}
        algorithm, found = _validate_section(own, "algorithm", name, settings[name])
        problems += foreign + found
        if foreign:
            algorithm = None
    kind = tables["protocol"].get("kind", ProtocolSettings().kind)
    if kind not in PROTOCOLS:
        allowed = ", ".join(PROTOCOLS.names())
        problems.append(Problem("protocol.kind", f"unknown protocol {kind!r}; allowed: {allowed}"))
    else:
        settings = {n: protocol_settings(n) for n in PROTOCOLS.names()}
        foreign = _foreign_keys(tables["protocol"], "protocol", kind, settings)
        problems += foreign
        if not foreign:
            protocol, found = _validate_section(
                tables["protocol"], "protocol", kind, protocol_settings(kind)
            )
            problems += found
    if problems or scenario is None:
        return None, problems
    scenario.algorithm = algorithm  # type: ignore[assignment]
    scenario.protocol = protocol  # type: ignore[assignment]
    problems = _check_names(scenario)
    return (None if problems else scenario), problems


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
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ConfigError("SCENARIO", f"{path} is not UTF-8 text; save it as UTF-8") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError("SCENARIO", f"{path} is not valid TOML: {error}") from None
    if not data:
        logging.getLogger(__name__).info("%s is empty: every setting takes its default", path)
    data.setdefault("name", path.stem)
    table = data.get("clients", {}).get("table") if isinstance(data.get("clients"), dict) else None
    if isinstance(table, str) and not Path(table).is_absolute():
        data["clients"]["table"] = str(path.parent / table)  # beside the scenario file
    return data


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
    data = apply_overrides(data, overrides or [])
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

"""The scenario's sections: what each table of a scenario file holds, with its defaults.

Each class validates one table (``[data]``, ``[clients]``, ``[execution]``, ...)
and documents its keys (``mecsim describe section NAME`` prints them); the
algorithm's, protocol's, network's and faults' tables live beside their owners
and are composed here into :class:`Scenario`. Cross-table checks live in
:mod:`mecsim.config.validation`; reading files and overrides in :mod:`mecsim.config.scenario`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    Field,
    SerializeAsAny,
    field_validator,
    model_validator,
)

from mecsim.algorithms.base import AlgorithmSettings
from mecsim.common.distributions import NameAttr, NumberAttr, Uniform, attribute_values
from mecsim.common.registry import Registry
from mecsim.common.section import Section
from mecsim.engine.faults import FaultsConfig
from mecsim.learning.data.settings import DataConfig
from mecsim.learning.devices import DEVICES, DeviceProfile, device_catalog
from mecsim.net.settings import MobilityConfig, NetworkConfig
from mecsim.policies.scheduling import SchedulingSettings
from mecsim.protocols.settings import ProtocolSettings


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
    x_m: NumberAttr | None = Field(
        default=None,
        description="each client's position east, m (with y_m: distances from positions, "
        "clients associate with cells; default: clients.distance_m from one cell)",
    )
    y_m: NumberAttr | None = Field(default=None, description="each client's position north, m")
    mobility: MobilityConfig = Field(
        default_factory=MobilityConfig,
        description="[clients.mobility]: how clients move (needs positions x_m, y_m)",
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
        description="CSV of per-client distance_m (or x_m and y_m), bandwidth_mhz, "
        "tx_power_dbm, device and (cost-only) num_samples, one row per client; its columns replace the values above "
        "and its rows set count (a relative path is read from the scenario file's folder)",
    )

    @field_validator("table")
    @classmethod
    def _readable(cls, table: str | None) -> str | None:
        if table is not None:
            from mecsim.config.client_table import read_client_table

            read_client_table(table)  # a ValueError names the file, the client and the column
        return table

    def table_columns(self) -> set[str]:
        """The columns of ``table`` (none without one)."""
        if self.table is None:
            return set()
        from mecsim.config.client_table import read_client_table

        return set(read_client_table(self.table).columns)

    @property
    def placed(self) -> bool:
        """Whether clients have positions (``x_m``/``y_m`` here or in the table): distances
        are then measured to the cells."""
        return self.x_m is not None or "x_m" in self.table_columns()

    @model_validator(mode="after")
    def _position(self) -> ClientsConfig:
        if (self.x_m is None) != (self.y_m is None):
            missing = "y_m" if self.y_m is None else "x_m"
            raise ValueError(f"positions need both x_m and y_m; set {missing} too")
        default = type(self).model_fields["distance_m"].get_default()
        chosen = "distance_m" in self.model_fields_set and self.distance_m != default
        if self.x_m is not None and chosen:  # (a resolved scenario spells out the default)
            raise ValueError(
                "set positions (x_m, y_m) or distance_m, not both: with positions, "
                "distances are measured to the cells"
            )
        return self

    @model_validator(mode="after")
    def _table(self) -> ClientsConfig:
        if self.table is None:
            return self
        from mecsim.config.client_table import read_client_table

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
    figures: bool = Field(
        default=True, description="draw accuracy.png and .svg (false: skip, about 0.4 s a run)"
    )
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
        description="CPU threads of torch and of the event medium's compiled loops: a number, "
        "or 'auto' (the CPUs this process may use, shared among parallel sweep workers, at "
        "most the CPUs found idle at the start)",
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
    precision: Literal["fp32", "bf16"] = Field(
        default="fp32",
        description="training's arithmetic: fp32, or bf16 autocast for the forward pass "
        "(losses, gradients' sums and updates stay fp32; FLOPs are counted alike)",
    )
    kernels: Literal["auto", "grouped_nhwc", "grouped_nchw", "gemm"] = Field(
        default="auto",
        description="batched: how a convolution over stacked clients runs; auto: one grouped "
        "convolution on a CPU, on a GPU the fastest of the three per layer, timed once "
        "(grouped_nhwc | grouped_nchw | gemm pin one)",
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
        "(numpy), and on a medium of several cells where no transfer can fail or wait as "
        "chains of callbacks (same tables as one process per client); false: always one "
        "process each",
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


class DeviceSpec(Section):
    """A compute device defined in the scenario (``[[devices]]``), usable wherever a device
    name is (``clients.device``, a client table's ``device`` column, ``server.device``,
    ``network.cells.N.device``)."""

    name: str = Field(pattern=SAFE_NAME, description="the name clients.device refers to")
    flops_per_s: float = Field(gt=0, le=1e18, description="effective training FLOP/s")
    power_w: float = Field(ge=0, le=1e5, description="power while computing, W")
    rx_power_w: float = Field(default=0.0, ge=0, le=1e5, description="power while receiving, W")
    idle_power_w: float = Field(
        default=0.0, ge=0, le=1e5, description="power while waiting in a round, W"
    )


class Scenario(Section):
    """A whole scenario; build one with :func:`load_scenario` or :func:`validate_scenario`."""

    name: str = Field(
        default="scenario",
        pattern=SAFE_NAME,
        description="the scenario's name (run directory prefix)",
    )
    seed: int = Field(default=0, description="seed of every random stream of the run")
    data: DataConfig = Field(default_factory=DataConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    algorithm: SerializeAsAny[AlgorithmSettings] = Field(default_factory=AlgorithmSettings)
    protocol: SerializeAsAny[ProtocolSettings] = Field(default_factory=ProtocolSettings)
    scheduling: SerializeAsAny[SchedulingSettings] = Field(default_factory=SchedulingSettings)
    network: NetworkConfig = Field(default_factory=NetworkConfig)
    clients: ClientsConfig = Field(default_factory=ClientsConfig)
    server: ServerConfig = Field(default_factory=ServerConfig)
    faults: FaultsConfig = Field(default_factory=FaultsConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    execution: ExecutionConfig = Field(default_factory=ExecutionConfig)
    compare: CompareConfig = Field(default_factory=CompareConfig)
    devices: list[DeviceSpec] = Field(
        default_factory=list,
        description="[[devices]] tables: compute devices beside the built-in ones "
        "(name, flops_per_s, power_w, rx_power_w, idle_power_w); mecsim list devices "
        "shows the built-ins",
    )
    versions: dict[str, str] | None = Field(
        default=None, description="informational: versions that wrote a resolved scenario"
    )

    @field_validator("devices")
    @classmethod
    def _new_device_names(cls, devices: list[DeviceSpec]) -> list[DeviceSpec]:
        seen: set[str] = set()
        for device in devices:
            if device.name in DEVICES or device.name in seen:
                raise ValueError(
                    f"{device.name!r} is already a device (built-in, plug-in or defined "
                    "above); give this one another name"
                )
            seen.add(device.name)
        return devices

    def device_catalog(self) -> Registry[DeviceProfile]:
        """The devices this scenario may name: the built-ins and plug-ins, and its own
        (a new catalog each call: build it once per use)."""
        return device_catalog([DeviceProfile(**d.model_dump()) for d in self.devices])

"""Building a run's world before its first event: clients, links, data, models, algorithm.

:func:`build_world` builds everything a scenario describes and runs every
check that can refuse it, before any work (``mecsim validate`` calls it too):
client profiles from the scenario's draws or its client table, the network,
the federated data (or, cost-only, per-client sample counts with no tensors),
each client's architecture, and the algorithm with its training context.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import torch

from mecsim.algorithms import ALGORITHMS
from mecsim.channels import LogDistancePathLoss
from mecsim.common.distributions import sample_attribute
from mecsim.common.errors import ConfigError
from mecsim.common.registry import Registry
from mecsim.common.rng import derive_seed, numpy_rng
from mecsim.config.client_table import out_of_range, range_text, read_client_table
from mecsim.config.ineffective import ineffective_settings
from mecsim.config.plausibility import implausible_settings
from mecsim.config.scenario import ClientsConfig, DataConfig, ModelConfig, Scenario
from mecsim.engine.evaluation import CurveEvaluator, Evaluator
from mecsim.engine.faults import Faults
from mecsim.executors import TrainingContext
from mecsim.executors.calibration import Calibration
from mecsim.learning.data import build_client_data, dataset_shape, load_dataset
from mecsim.learning.data.datasets import Dataset
from mecsim.learning.data.federated import ClientSplits, hold_out_public
from mecsim.learning.data.partition import proportional_counts
from mecsim.learning.devices import DEVICES, DeviceProfile
from mecsim.learning.models import build_model, forward_flops_per_sample
from mecsim.learning.models.catalog import Architecture, ModelCatalog
from mecsim.learning.state import payload_nbytes
from mecsim.learning.training import model_functions
from mecsim.net.geometry import Cell, associate, distances
from mecsim.net.mobility import GaussMarkov, RandomWaypoint, TraceMobility, Trajectories, read_trace
from mecsim.net.network import ClientProfile, Network, build_cells
from mecsim.net.settings import MobilityConfig

if TYPE_CHECKING:
    pass


def build_links(sc: Scenario) -> tuple[list[ClientProfile], Network]:
    """The cells, the clients placed among them, and the network (which checks the links)."""
    net = sc.network
    cells = build_cells(net, sc.server.device)  # (Network's own default with none given)
    pathloss = LogDistancePathLoss(net.pathloss_db, net.reference_m, net.exponent)
    clients = build_clients(sc.clients, sc.seed, cells, pathloss, sc.device_catalog())
    trajectories = build_trajectories(sc.clients.mobility, clients, cells, sc.seed)
    if isinstance(trajectories, TraceMobility):  # the trace says where clients start
        clients = _placed(clients, trajectories.x0, trajectories.y0, cells, pathloss,
                          "clients.mobility.trace")  # fmt: skip
    return clients, Network(net, clients, sc.seed, cells, trajectories, position_key(sc.clients))


def position_key(cfg: ClientsConfig) -> str:
    """The setting that says where clients are, named when a link is too weak to use."""
    if cfg.mobility.model == "trace":
        return "clients.mobility.trace"
    if cfg.table is not None and {"x_m", "distance_m"} & cfg.table_columns():
        return "clients.table"
    return "clients.x_m" if cfg.x_m is not None else "clients.distance_m"


def build_trajectories(
    cfg: MobilityConfig, clients: list[ClientProfile], cells: list[Cell], seed: int
) -> Trajectories | None:
    """The clients' trajectories from their placed positions (None when they are placed
    by distance only); every client must start inside ``area_m``."""
    if cfg.model == "static":
        return None
    x = np.array([c.x_m for c in clients])
    y = np.array([c.y_m for c in clients])
    if cfg.model == "trace":
        assert cfg.trace is not None
        try:
            trace = read_trace(cfg.trace, len(clients))
        except ValueError as error:
            raise ConfigError("clients.mobility.trace", str(error)) from None
        return TraceMobility(x, y, trace)
    area = cfg.area_m
    if area is None:  # the smallest rectangle holding the cells and the clients
        xs = np.concatenate([x, [c.x_m for c in cells]])
        ys = np.concatenate([y, [c.y_m for c in cells]])
        area = (float(xs.min()), float(ys.min()), float(xs.max()), float(ys.max()))
    outside = np.flatnonzero((x < area[0]) | (x > area[2]) | (y < area[1]) | (y > area[3]))
    if len(outside):
        i = int(outside[0])
        raise ConfigError(
            "clients.mobility.area_m",
            f"client {i} starts at ({x[i]:g}, {y[i]:g}) m, outside area_m = {list(area)}; "
            "widen the area or place clients inside it",
        )
    if cfg.model == "random_waypoint":
        return RandomWaypoint(x, y, area, cfg.speed_range, cfg.pause_s, derive_seed(seed, "rwp"))
    return GaussMarkov(x, y, area, cfg.speed_range, cfg.memory, cfg.step_s, derive_seed(seed, "gm"))


def _placed(
    clients: list[ClientProfile],
    x: np.ndarray,
    y: np.ndarray,
    cells: list[Cell],
    pathloss: LogDistancePathLoss,
    key: str,
) -> list[ClientProfile]:
    """``clients`` moved to ``(x, y)`` (given by setting ``key``): distances measured and
    cells associated anew."""
    distance, cell = _associate(x, y, cells, pathloss, key)
    return [
        replace(c, x_m=float(px), y_m=float(py), distance_m=float(d), cell=int(k))
        for c, px, py, d, k in zip(clients, x, y, distance, cell, strict=True)
    ]


def _associate(
    x: np.ndarray,
    y: np.ndarray,
    cells: list[Cell],
    pathloss: LogDistancePathLoss,
    key: str = "clients.x_m",
) -> tuple[np.ndarray, np.ndarray]:
    """Each client's distance to the cell it associates with, and that cell (``key``: the
    setting that placed them, named if one stands on a base station)."""
    to_cells = distances(x, y, cells)
    if (to_cells <= 0).any():
        i, j = (int(k[0]) for k in np.nonzero(to_cells <= 0))
        raise ConfigError(
            key,
            f"client {i} stands on cell {j}'s base station; no client may be at distance "
            "0 from a cell: move it or the cell",
        )
    cell = associate(to_cells, cells, pathloss)
    return to_cells[np.arange(len(x)), cell], cell


def build_clients(
    cfg: ClientsConfig,
    seed: int,
    cells: list[Cell],
    pathloss: LogDistancePathLoss,
    catalog: Registry[DeviceProfile] = DEVICES,
) -> list[ClientProfile]:
    """Sample each client's radio and device from the ``[clients]`` attribute streams;
    with positions, measure each client's distance to ``cells`` and associate it."""
    n = cfg.count
    table = read_client_table(cfg.table) if cfg.table is not None else {}

    def attribute(key: str) -> np.ndarray:  # the table's column, else the scenario's draws
        if key in table:
            return table[key].to_numpy()
        return sample_attribute(getattr(cfg, key), numpy_rng(seed, "clients", key), n)

    placed = cfg.placed
    keys = [*(["x_m", "y_m"] if placed else ["distance_m"]), "bandwidth_mhz", "tx_power_dbm"]
    values = {key: attribute(key) for key in keys}
    for key in keys:
        bad = out_of_range(key, values[key])
        if len(bad):
            raise ConfigError(
                f"clients.{key}",
                f"sampled {float(values[key][bad[0]]):g} for client {int(bad[0])}; every value "
                f"must lie in {range_text(key)}: narrow the distribution",
            )
    device = attribute("device")
    devices = {name: catalog.get(name) for name in map(str, np.unique(device))}
    x = np.asarray(values.get("x_m", np.full(n, math.nan)), float)
    y = np.asarray(values.get("y_m", np.full(n, math.nan)), float)
    cell = np.zeros(n, dtype=np.int64)
    distance = values.get("distance_m")
    if placed:
        distance, cell = _associate(x, y, cells, pathloss)
    columns = zip(
        np.asarray(distance, float).tolist(),
        (np.asarray(values["bandwidth_mhz"], float) * 1e6).tolist(),
        np.asarray(values["tx_power_dbm"], float).tolist(),
        map(str, np.asarray(device).tolist()),
        cell.tolist(),
        x.tolist(),
        y.tolist(),
        strict=True,
    )
    return [
        ClientProfile(i, d, b, p, devices[name], cell=k, x_m=px, y_m=py)
        for i, (d, b, p, name, k, px, py) in enumerate(columns)
    ]


@dataclass
class FederatedData:
    """Tensors and per-client index splits a run trains and evaluates on."""

    input_shape: tuple[int, ...]
    num_classes: int
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    train: list[torch.Tensor]
    val: list[torch.Tensor]
    test: list[torch.Tensor]
    x_public: torch.Tensor
    y_public: torch.Tensor
    partition_redraws: int = 0
    """Partition draws rejected before every client had ``data.min_samples`` (Dirichlet)."""
    global_test_size: int | None = None
    """The first this many test samples are the global test set (the generic model's);
    clients' own local tests (``local_split = "own_data"``) follow them."""

    @cached_property
    def public_indices(self) -> torch.Tensor:
        """Every index of the shared public split: one tensor all clients share."""
        device = self.train[0].device if self.train else self.x_public.device
        if device.type == "meta":  # no values; arange would run a slow decomposition
            return torch.empty(len(self.x_public), dtype=torch.long, device=device)
        return torch.arange(len(self.x_public), device=device)

    def client_indices(self, client: int) -> dict[str, torch.Tensor]:
        """Client ``client``'s indices per split (``public`` indexes the shared public split)."""
        return {"train": self.train[client], "val": self.val[client], "public": self.public_indices}


def build_data(sc: Scenario, device: torch.device) -> FederatedData:
    """Load the dataset, partition it across clients, and move it to ``device``."""
    table_counts = sc.clients.table is not None and "num_samples" in read_client_table(
        sc.clients.table
    )
    if sc.execution.cost_only and (sc.clients.num_samples is not None or table_counts):
        return _sample_counts_only(sc.data, sc.clients, sc.seed)

    def load(name: str) -> Dataset:
        return load_dataset(
            name,
            root=sc.data.root,
            download=sc.data.download,
            num_clients=sc.clients.count,
            seed=sc.seed,
            test_fraction=sc.data.test_fraction,
            options={"alpha": sc.data.synthetic_alpha, "beta": sc.data.synthetic_beta},
        )

    dataset = load(sc.data.dataset)
    source = None
    if sc.data.public_dataset is not None and sc.data.public_size > 0:
        source = load(sc.data.public_dataset)  # same shape: checked with the scenario
    dataset, x_public, y_public = hold_out_public(dataset, sc.data.public_size, sc.seed, source)
    clients = partition_clients(dataset, sc.data, sc.clients.count, sc.seed)
    dataset = dataset.to(device)
    x_test, y_test, tests = local_tests(dataset, clients, device)
    return FederatedData(
        dataset.input_shape,
        dataset.num_classes,
        dataset.x_train,
        dataset.y_train,
        x_test,
        y_test,
        [c.train.to(device) for c in clients],
        [c.val.to(device) for c in clients],
        [t.to(device) for t in tests],
        x_public.to(device),
        y_public.to(device),
        clients.redraws,
        len(dataset.y_test),
    )


def partition_clients(dataset: Dataset, data: DataConfig, count: int, seed: int) -> ClientSplits:
    """Split ``dataset``'s training samples among ``count`` clients as ``[data]`` says."""
    return build_client_data(
        dataset,
        partition=data.partition,
        num_clients=count,
        seed=seed,
        alpha=data.alpha,
        min_classes=data.min_classes,
        classes_per_client=data.classes_per_client,
        quantity_skew=data.quantity_skew,
        lognormal_sigma=data.lognormal_sigma,
        min_samples=data.min_samples,
        val_fraction=data.val_fraction,
        local_test_fraction=data.local_test_fraction,
        local_split=data.local_split,
        train_share_choices=tuple(data.train_share_choices),
        own_test_share=data.own_test_share,
    )


def local_tests(
    dataset: Dataset, clients: ClientSplits, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """The test inputs and labels, and each client's indices into them; local tests drawn
    from the clients' own data follow the global test set."""
    x_test, y_test, tests = dataset.x_test, dataset.y_test, [c.test for c in clients]
    if clients.tests_from_train:
        own = torch.cat(tests)
        x_test = torch.cat([x_test, dataset.x_train[own.to(device)]])
        y_test = torch.cat([y_test, dataset.y_train[own.to(device)]])
        starts = np.cumsum([len(dataset.y_test), *[len(t) for t in tests[:-1]]])
        tests = [int(s) + torch.arange(len(t)) for s, t in zip(starts, tests, strict=True)]
    return x_test, y_test, tests


def sample_counts(clients: ClientsConfig, seed: int) -> np.ndarray:
    """Cost-only per-client training sample counts (``clients.num_samples``), checked."""
    table = read_client_table(clients.table) if clients.table is not None else None
    if table is not None and "num_samples" in table:
        return table["num_samples"].to_numpy().astype(np.int64)  # checked on reading
    counts = sample_attribute(
        clients.num_samples, numpy_rng(seed, "clients", "num_samples"), clients.count
    )
    counts = np.asarray(counts, dtype=float)
    bad = out_of_range("num_samples", counts)
    if len(bad):
        raise ConfigError(
            "clients.num_samples",
            f"sampled {counts[bad[0]]:g} for client {int(bad[0])}; every client needs between "
            "1 and 1e9 samples: shift or narrow the distribution",
        )
    return counts.astype(np.int64)


def _sample_counts_only(data: DataConfig, clients: ClientsConfig, seed: int) -> FederatedData:
    """Cost-only data: per-client sample counts from ``clients.num_samples``, no tensors."""
    shape, classes = dataset_shape(data.dataset)
    counts = sample_counts(clients, seed)
    meta = torch.device("meta")
    empty = torch.empty(0, dtype=torch.long, device=meta)
    by_count = {  # clients with equal counts share one index tensor (shape only, no values)
        n: torch.empty(n, dtype=torch.long, device=meta) for n in np.unique(counts).tolist()
    }
    return FederatedData(
        shape,
        classes,
        torch.empty(0, *shape),
        torch.empty(0, dtype=torch.long),
        torch.empty(0, *shape),
        torch.empty(0, dtype=torch.long),
        [by_count[n] for n in counts.tolist()],
        [empty] * clients.count,
        [empty] * clients.count,
        torch.empty(data.public_size, *shape, device=meta),
        torch.empty(data.public_size, dtype=torch.long, device=meta),
    )


def assign_architectures(
    model: ModelConfig, seed: int, num_train: list[int], sizes: dict[str, int]
) -> list[str]:
    """Each client's architecture name (``model.name`` and ``model.assign``).

    ``random`` draws from the choice per client (stream ``("clients", "model")``);
    ``data_size`` splits clients in the choice's proportions and gives the
    architectures with more parameters to the clients with more training data.
    """
    names = model.names
    n = len(num_train)
    if len(names) == 1:
        return names * n
    if model.assign == "random":
        drawn = sample_attribute(model.name, numpy_rng(seed, "clients", "model"), n)
        return [str(v) for v in drawn]
    choice = model.name
    values = [str(v) for v in choice.values]
    weights = np.ones(len(values)) if choice.weights is None else np.asarray(choice.weights)
    counts = proportional_counts(n, weights)
    ranked = sorted(range(len(values)), key=lambda i: -sizes[values[i]])
    clients = sorted(range(n), key=lambda c: (-num_train[c], c))
    assigned: list[str] = [""] * n
    position = 0
    for i in ranked:
        for c in clients[position : position + counts[i]]:
            assigned[c] = values[i]
        position += counts[i]
    return assigned


def build_models(
    model: ModelConfig,
    seed: int,
    data: FederatedData,
    device: torch.device | str,
    num_train: list[int],
) -> tuple[ModelCatalog, dict[str, int]]:
    """Every architecture of the run (same init seed each, on ``device``: ``meta`` in
    cost-only runs), per-sample FLOPs, and each client's architecture."""
    modules = {
        name: build_model(
            name,
            input_shape=data.input_shape,
            num_classes=data.num_classes,
            seed=derive_seed(seed, "init"),
        )
        for name in model.names
    }
    per_sample = {
        name: forward_flops_per_sample(module, data.input_shape) for name, module in modules.items()
    }
    for module in modules.values():
        module.to(device)
    architectures = {name: Architecture.of(name, module) for name, module in modules.items()}
    sizes = {name: arch.num_params() for name, arch in architectures.items()}
    assigned = assign_architectures(model, seed, num_train, sizes)
    return ModelCatalog(architectures, tuple(assigned), model.names[0]), per_sample


@dataclass
class World:
    """Everything a run builds before its first event: the checks happen while building it."""

    clients: list[ClientProfile]
    network: Network
    data: FederatedData
    num_train: list[int]
    models: ModelCatalog
    ctx: TrainingContext
    evaluator: CurveEvaluator | Evaluator
    public_nbytes: int
    faults: Faults


@dataclass
class Setup:
    """How a run executes, decided before its first event (``summary.json`` reports it)."""

    device: torch.device
    threads: int
    executor: str
    executor_setting: str
    calibration: Calibration | None


def build_world(sc: Scenario, torch_device: torch.device) -> World:
    """Build clients, links, data, partition, models and algorithm; every check that can
    refuse a scenario runs here, before any work (``validate`` calls this too)."""
    cost_only = sc.execution.cost_only
    clients, network = build_links(sc)
    for line in [*ineffective_settings(sc), *implausible_settings(sc, clients)]:
        logging.getLogger("mecsim").warning("warning: %s", line)
    faults = Faults(sc.faults, len(clients), sc.seed)  # reads and checks the trace
    data = build_data(sc, torch_device)
    num_train = [i.shape[0] for i in data.train]
    models, per_sample = build_models(
        sc.model, sc.seed, data, "meta" if cost_only else torch_device, num_train
    )
    model_nbytes = {
        name: payload_nbytes(arch.initial.to_payload())
        for name, arch in models.architectures.items()
    }
    nbytes = {c.id: model_nbytes[arch] for c, arch in zip(clients, models.client_arch, strict=True)}
    network.check_transfer_times(nbytes, "the model", getattr(sc.protocol, "deadline_s", None))
    label_counts = None
    if not cost_only:
        label_counts = [
            torch.bincount(data.y_train[i], minlength=data.num_classes) for i in data.train
        ]
    algorithm_class = ALGORITHMS.get(sc.algorithm.name)
    algorithm = algorithm_class(sc.algorithm, models, label_counts, sc.seed)
    labeled = algorithm_class.public_data == "labeled"
    public = (data.x_public, data.y_public if labeled else None)
    ctx = TrainingContext(
        algorithm,
        models,
        model_functions(models, sc.execution.precision, sc.execution.kernels),
        per_sample,
        {"train": (data.x_train, data.y_train), "public": public},
        sc.seed,
        proximal=sc.protocol.local_proximal,
    )
    if cost_only:
        evaluator: CurveEvaluator | Evaluator = CurveEvaluator(sc.execution.accuracy_curve)
    else:
        trainers = sc.clients.count - sc.evaluation.new_clients  # new clients apart
        evaluator = Evaluator(
            models,
            data.x_test,
            data.y_test,
            data.test[:trainers],
            num_train[:trainers],
            mean=sc.evaluation.personal_mean,
            ddof=sc.evaluation.std_ddof,
            global_size=data.global_test_size,
        )
    uses_public = algorithm_class.public_data != "none"
    public_nbytes = (
        payload_nbytes({"x": public[0]} | ({"y": public[1]} if labeled else {}))
        if uses_public
        else 0
    )
    return World(clients, network, data, num_train, models, ctx, evaluator, public_nbytes, faults)

"""A finished simulation as tables: events, rounds, clients and ``summary.json``.

:func:`tabulate` turns a :class:`~mecsim.engine.simulation.Simulation` that ran to its
end into a :class:`RunResult`; every figure in the summary is derived from the
events table (:mod:`mecsim.analysis`), the clients table from the world's arrays.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mecsim.config.scenario import Scenario
from mecsim.engine.evaluation import Evaluator
from mecsim.engine.newcomers import FixedModels, newcomer_states
from mecsim.engine.simulation import Simulation
from mecsim.net.network import ClientProfile
from mecsim.runs.world import Setup, World

if TYPE_CHECKING:
    import pandas as pd


@dataclass
class RunResult:
    """A finished run: its tables, summary, and where they were written (if anywhere)."""

    scenario: Scenario
    events: pd.DataFrame
    rounds: pd.DataFrame
    clients: pd.DataFrame
    summary: dict[str, Any]
    run_dir: Path | None = None
    server_state: dict[str, Any] = field(default_factory=dict)
    client_states: list[dict[str, Any]] = field(default_factory=list)
    decisions: pd.DataFrame | None = None
    """The scheduling decisions: each client chosen, when, by which policy, its score."""


def clients_frame(world: World, sim: Simulation, accuracies: list[float] | float) -> pd.DataFrame:
    """The clients table: each client's radio, device, data, model and final accuracy.

    Built column by column from arrays: a device's and an architecture's values are
    looked up once per kind and spread by index (a million clients in about a second).
    """
    import pandas as pd

    clients, data, models = world.clients, world.data, world.models
    n = len(clients)

    def column(values: Iterable[Any], dtype: Any = float) -> np.ndarray:
        return np.fromiter(values, dtype, n)

    device_of: dict[Any, int] = {}  # device profile -> its index, in first-seen order
    device = column((device_of.setdefault(c.device, len(device_of)) for c in clients), np.int64)
    kinds = list(device_of)
    archs = list(models.architectures)
    arch_of = {a: i for i, a in enumerate(archs)}
    arch = column(map(arch_of.__getitem__, models.client_arch), np.int64)

    def per_device(attribute: str) -> np.ndarray:
        return np.array([getattr(d, attribute) for d in kinds])[device]

    def per_arch(values: dict[str, Any]) -> np.ndarray:
        return np.array([values[a] for a in archs])[arch]

    params = {name: a.num_params() for name, a in models.architectures.items()}
    return pd.DataFrame(
        {
            "client": column((c.id for c in clients), np.int64),
            **positions(clients),
            "distance_m": column(c.distance_m for c in clients),
            "bandwidth_mhz": column(c.bandwidth_hz for c in clients) / 1e6,
            "tx_power_dbm": column(c.tx_power_dbm for c in clients),
            "device": per_device("name").astype(object),
            "device_flops_per_s": per_device("flops_per_s"),
            "device_power_w": per_device("power_w"),
            "rx_power_w": per_device("rx_power_w"),
            "idle_power_w": per_device("idle_power_w"),
            "num_train": np.asarray(world.num_train, dtype=np.int64),
            "num_val": column((v.shape[0] for v in data.val), np.int64),
            "num_test": column((t.shape[0] for t in data.test), np.int64),
            "model": np.array(archs, dtype=object)[arch],
            "num_params": per_arch(params),
            # pytorch-OpCounter's convention (KAPC Table 6): a multiply-accumulate of a conv
            # or linear layer is one op; torch's counter, which mecsim's FLOPs use, counts 2
            "forward_macs_per_sample": per_arch(
                {a: world.ctx.per_sample_flops[a] // 2 for a in archs}
            ),
            "state_peak_bytes": np.asarray(sim.client_state_peak_bytes, dtype=np.int64),
            "final_personal_acc": accuracies,
        }
    )


def positions(clients: list[ClientProfile]) -> dict[str, np.ndarray]:
    """Where each client is and which cell it is in (columns of the clients table when the
    scenario places clients; none when it gives distances only)."""
    if all(math.isnan(c.x_m) for c in clients):
        return {}
    return {
        "x_m": np.array([c.x_m for c in clients]),
        "y_m": np.array([c.y_m for c in clients]),
        "cell": np.array([c.cell for c in clients], dtype=np.int64),
    }


def tabulate(
    sc: Scenario, world: World, setup: Setup, sim: Simulation, run_dir: Path | None
) -> RunResult:
    """A finished simulation as tables: events, rounds, clients and ``summary.json``."""
    from mecsim.analysis import summarize

    cost_only = sc.execution.cost_only
    events, rounds = sim.recorder.events(), sim.recorder.rounds()
    final = sim.last_evaluation
    newcomers = evaluate_newcomers(sc, world, sim, events)
    accuracies = (
        [*final.client_acc, *newcomers.get("new_client_accs", [])]
        if final and final.client_acc
        else float("nan")
    )
    clients_table = clients_frame(world, sim, accuracies)
    data = world.data
    summary = {
        "name": sc.name,
        "seed": sc.seed,
        "algorithm": sc.algorithm.name,
        "partition_redraws": data.partition_redraws,
        "clients_without_local_test": 0 if cost_only else sum(len(t) == 0 for t in data.test),
        **summarize(events, rounds, clients_table),
        "server_state_peak_bytes": sim.server_state_peak_bytes,
        "accuracy_source": (
            "measured"
            if not cost_only
            else "assumed"
            if sc.execution.accuracy_curve is not None
            else "none"
        ),
        "executor": setup.executor,
        "executor_setting": setup.executor_setting,
        "threads": setup.threads,
        "threads_setting": sc.execution.threads,
        "calibration": None if setup.calibration is None else setup.calibration.as_dict(),
        "executor_report": executor_report(sim.executor),
        "evaluation_probe": getattr(world.evaluator, "probe_result", None),
        **newcomers,
        "device": setup.device.type,
        "protocol": sc.protocol.model_dump(mode="json"),
        "scheduling": sc.scheduling.model_dump(mode="json", exclude_none=True),
        "network": sc.network.model_dump(mode="json", exclude_none=True),
    }
    return RunResult(
        sc,
        events,
        rounds,
        clients_table,
        summary,
        run_dir,
        sim.server_state,
        sim.client_states,
        sim.recorder.decisions(sc.scheduling.policy),
    )


def executor_report(executor: Any) -> dict[str, Any] | None:
    """What the executor reports about where jobs ran (the Ray executor: jobs per node)."""
    real = getattr(executor, "real", executor)  # behind the checkpoint's recorder
    report = getattr(real, "report", None)
    return None if report is None else report()


def evaluate_newcomers(
    sc: Scenario, world: World, sim: Simulation, events: pd.DataFrame
) -> dict[str, Any]:
    """Summary entries of the new clients (:mod:`mecsim.engine.newcomers`): their count, what
    joining cost them (bytes received, FLOPs, seconds after the last trained round's
    last event; from the events of round ``protocol.rounds``) and, with training, the mean (as ``evaluation.personal_mean`` weighs it), standard
    deviation and per-client accuracies of their adapted models."""
    k = sc.evaluation.new_clients
    if k == 0:
        return {}
    joined = events[events["round"] == sc.protocol.rounds]
    trained_until = float(events.loc[events["round"] < sc.protocol.rounds, "t_end"].max())
    out: dict[str, Any] = {
        "new_clients": k,
        "new_client_bytes_down": int(joined.loc[joined["role"] == "receiver", "bytes"].sum()),
        "new_client_flops": int(joined["flops"].sum()),
        "new_client_join_s": float(joined["t_end"].max()) - trained_until if len(joined) else 0.0,
    }
    if not isinstance(world.evaluator, Evaluator):  # cost-only: nothing to score
        return out
    first = sc.clients.count - k
    data = world.data
    evaluator = Evaluator(
        world.models,
        data.x_test,
        data.y_test,
        data.test[first:],
        world.num_train[first:],
        mean="clients"
        if sc.evaluation.personal_mean == "selected"
        else sc.evaluation.personal_mean,
        ddof=sc.evaluation.std_ddof,
        global_size=data.global_test_size,
        first_client=first,
    )
    states = newcomer_states(sim.newcomer_models, range(first, sc.clients.count))
    scored = evaluator.evaluate(FixedModels(), sim.server_state, states, sc.protocol.rounds)  # type: ignore[arg-type]
    out.update(
        new_client_acc=scored.personal_acc,
        new_client_acc_std=scored.personal_acc_std,
        new_client_accs=list(scored.client_acc),
    )
    return out

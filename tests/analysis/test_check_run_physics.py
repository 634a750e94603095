"""``mecsim check-run`` recomputes the physics (issue 46): every kind of single-value
tampering the review found passing the ledger checks is caught in three runs (multi-cell
mobile HierFAVG, FedBuff with cut-off rows, a deadline with failures and retries), and
no untampered run fails."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mecsim
from mecsim.analysis.compare import load_run
from mecsim.analysis.invariants import check_result, check_tables, run_facts
from mecsim.commands.cli import main
from mecsim.runs.replay import check_replay, compare_run, replay_run

SCENARIOS = Path(__file__).parents[2] / "scenarios"
QUIET = ["execution.cost_only=true", "output.progress=false"]
RUNS = {
    "hierfavg mobile": (
        "multicell_mobility.toml",
        [
            'clients.mobility.model="random_waypoint"',
            "clients.mobility.speed_mps=[10.0, 30.0]",
            "protocol.rounds=3",
            "clients.count=40",
        ],
    ),
    "fedbuff cut off": (
        "ditto_async_digits.toml",
        [
            "clients.count=10",
            "protocol.rounds=8",
            "protocol.kind=fedbuff",
            "protocol.buffer_size=3",
            "protocol.concurrency=6",
            "faults.dropout=0.3",
        ],
    ),
    "deadline failures": (
        "quickstart.toml",
        [
            "clients.count=6",
            "protocol.rounds=3",
            "protocol.kind=deadline",
            "protocol.deadline_s=10",
            "network.max_transfer_s=0.05",
            "network.retries=1",
        ],
    ),
}


@dataclass
class Written:
    """A run as its directory holds it, and its replay."""

    events: pd.DataFrame
    rounds: pd.DataFrame
    clients: pd.DataFrame
    summary: dict[str, Any]
    settings: dict[str, Any]
    replayed: Any

    def checks(self) -> list:
        facts = run_facts(self.settings)
        tables = (self.events, self.rounds, self.clients)
        return check_tables(*tables, facts, self.summary, self.settings) + compare_run(
            *tables, self.summary, self.replayed
        )


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> dict[str, Written]:
    """Each run of :data:`RUNS` as its directory holds it, with its replay."""
    runs = {}
    for name, (scenario, overrides) in sorted(RUNS.items()):
        out = tmp_path_factory.mktemp("run") / "run"
        mecsim.run(SCENARIOS / scenario, [*QUIET, *overrides], out=out)
        run = load_run(out)
        replayed = replay_run(out / "scenario.resolved.toml", run.settings)
        clients = pd.read_parquet(out / "clients.parquet")
        runs[name] = Written(run.events, run.rounds, clients, run.summary, run.settings, replayed)
    return runs


def problems(run: Written) -> list[str]:
    return [f"{c.name}: {p}" for c in run.checks() for p in c.problems]


def adjust(summary: dict[str, Any], key: str, delta: float) -> None:
    """Add ``delta`` to a summary figure (a dotted key), as a careful forger would."""
    *path, last = key.split(".")
    for part in path:
        summary = summary[part]
    summary[last] += delta


def row(events: pd.DataFrame, mask: Any) -> int | None:
    """The index of the first row where ``mask`` holds (None: no such row)."""
    hits = events.index[np.asarray(mask)]
    return hits[len(hits) // 2] if len(hits) else None


def computations(e: pd.DataFrame) -> Any:
    return e["phase"].str.startswith("compute:") & ~e["phase"].str.endswith(":cutoff")


def uploads(e: pd.DataFrame) -> Any:
    return (e["direction"] == "up") & (e["role"] == "sender") & (e["duration_s"] > 0)


def longer_upload(r: Written) -> bool:
    """A transfer 1 % longer, its energy and the summary adjusted."""
    k = row(r.events, uploads(r.events) & ~r.events["phase"].str.contains(":"))
    e = r.events
    extra = 0.01 * e.at[k, "duration_s"]
    joules = e.at[k, "energy_j"] * 0.01
    e.loc[k, ["duration_s", "t_end", "energy_j"]] += [extra, extra, joules]
    for key in ("energy_j.client_transmit", "energy_j.total"):
        adjust(r.summary, key, joules)
    return True


def column_times(column: str, factor: float = 1.0, plus: float = 0.0) -> Callable:
    def tamper(r: Written) -> bool:
        k = row(r.events, uploads(r.events))
        r.events.at[k, column] = r.events.at[k, column] * factor + plus
        return True

    tamper.__doc__ = f"an upload's {column} x{factor} + {plus}"
    return tamper


def moved_clients(r: Written) -> bool:
    """Every client 1 km further away (east, where the run has positions)."""
    r.clients["x_m" if "x_m" in r.clients else "distance_m"] += 1000.0
    return True


def other_cell(r: Written) -> bool:
    """An upload's cell changed."""
    if "cell" not in r.events:
        return False
    k = row(r.events, uploads(r.events))
    r.events.at[k, "cell"] = (r.events.at[k, "cell"] + 1) % len(r.settings["network.cells"])
    return True


def more_flops(r: Written) -> bool:
    """A computation's FLOPs doubled, the summary adjusted."""
    k = row(r.events, computations(r.events))
    flops = int(r.events.at[k, "flops"])
    r.events.at[k, "flops"] = 2 * flops
    adjust(r.summary, "client_flops_per_round", flops / len(r.rounds))
    return True


def summary_times(key: str, factor: float) -> Callable:
    def tamper(r: Written) -> bool:
        adjust(r.summary, key, _get(r.summary, key) * (factor - 1))
        return True

    tamper.__doc__ = f"summary {key} x{factor}"
    return tamper


def _get(summary: dict[str, Any], key: str) -> float:
    for part in key.split("."):
        summary = summary[part]
    return float(summary)  # type: ignore[arg-type]


def later_round_end(r: Written) -> bool:
    """A round's end 0.1 s later."""
    r.rounds.loc[r.rounds.index[0], "t_end"] += 0.1
    return True


def more_updates(r: Written) -> bool:
    """A round with one update more."""
    r.rounds.loc[r.rounds.index[0], "updates"] += 1
    return True


def handover(change: str) -> Callable:
    def tamper(r: Written) -> bool:
        k = row(r.events, r.events["phase"] == "handover")
        if k is None:
            return False
        if change == "deleted":
            r.events = r.events.drop(index=k).reset_index(drop=True)
        elif change == "energy":
            r.events.at[k, "energy_j"] += 0.01
            adjust(r.summary, "energy_j.total", 0.01)
        else:  # a longer break
            r.events.loc[k, ["t_end", "duration_s"]] += 0.01
        return True

    tamper.__doc__ = f"a handover row's {change}"
    return tamper


def dropout_deleted(r: Written) -> bool:
    """A ``fault:dropout`` row deleted."""
    k = row(r.events, r.events["phase"] == "fault:dropout")
    if k is None:
        return False
    r.events = r.events.drop(index=k).reset_index(drop=True)
    return True


def backhaul(change: str) -> Callable:
    def tamper(r: Written) -> bool:
        e = r.events
        k = row(e, e["role"] == "backhaul")
        if k is None:
            return False
        joules = float(e.at[k, "energy_j"])
        if change == "deleted":
            r.events = e.drop(index=k).reset_index(drop=True)
            delta = -joules
        else:  # twice the bytes, made consistent: latency + 8 bytes / rate, J per bit
            rate = r.settings["network.backhaul.rate_mbps"] * 1e6
            extra = 8 * float(e.at[k, "bytes"]) / rate
            e.loc[k, ["bytes"]] *= 2
            e.loc[k, ["duration_s", "t_end", "energy_j"]] += [extra, extra, joules]
            delta = joules
        for key in ("energy_j.server", "energy_j.total"):
            adjust(r.summary, key, delta)
        return True

    tamper.__doc__ = f"a backhaul row {change}"
    return tamper


def late_compute(r: Written) -> bool:
    """A computation that starts 5 ms after its download ended (bug 1's trace)."""
    k = row(r.events, computations(r.events))
    r.events.loc[k, ["t_start", "t_end"]] += 0.005
    return True


TAMPERS: list[Callable[[Written], bool]] = [
    longer_upload,
    column_times("rate_bps", factor=2.0),
    column_times("snr_db", plus=3.0),
    moved_clients,
    other_cell,
    more_flops,
    summary_times("energy_j.client_idle", 1.5),
    summary_times("energy_j.total", 1.001),
    summary_times("sim_time_s", 1.01),
    summary_times("mean_round_s", 1.01),
    summary_times("time_split_s.upload", 1.01),
    later_round_end,
    more_updates,
    handover("energy"),
    handover("break"),
    handover("deleted"),
    dropout_deleted,
    backhaul("deleted"),
    backhaul("doubled"),
    late_compute,
]


def test_an_untampered_run_passes_every_check_and_the_replay_is_exact(written):
    for name, run in written.items():
        assert not problems(run), name
        compared = [c for c in run.checks() if c.name.startswith("replay ")]
        assert len(compared) == 4 and all(c.examined for c in compared)
        assert all(error == 0.0 for c in compared for error in c.worst.values())


def test_every_kind_of_tampering_is_caught_in_every_run_it_applies_to(written):
    missed, applied = [], set()
    for name, run in written.items():
        for tamper in TAMPERS:
            forged = copy.deepcopy(run)
            if not tamper(forged):
                continue
            applied.add(tamper.__doc__)
            if not problems(forged):
                missed.append(f"{name}: {tamper.__doc__}")
    assert not missed
    assert applied == {t.__doc__ for t in TAMPERS}  # each kind was tried somewhere


def test_check_run_replays_and_fails_on_an_edited_table(tmp_path, capsys):
    out = tmp_path / "run"
    scenario, overrides = RUNS["deadline failures"]
    mecsim.run(SCENARIOS / scenario, [*QUIET, *overrides], out=out)
    assert main(["check-run", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "replay events    ok" in printed and "largest relative error" in printed
    rounds = pd.read_parquet(out / "rounds.parquet")
    rounds["updates"] += 1  # no closed form gives a round's updates: only the replay
    rounds.to_parquet(out / "rounds.parquet")
    assert main(["check-run", str(out), "--replay", "off"]) == 0
    capsys.readouterr()
    assert main(["check-run", str(out)]) == 1
    assert "replay rounds    FAIL" in capsys.readouterr().out


PROTOCOL_SETTINGS = {
    "compute_and_wait": [],
    "wait_free": [],
    "deadline": ["protocol.deadline_s=2.0"],
    "fedasync": ["protocol.concurrency=3"],
    "fedbuff": ["protocol.concurrency=3", "protocol.buffer_size=2"],
    "hierarchical": ["protocol.edge_rounds=2"],
}


@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    protocol=st.sampled_from(sorted(PROTOCOL_SETTINGS)),
    cells=st.integers(2, 3),
    reuse=st.integers(1, 2),
    mobility=st.sampled_from(["random_waypoint", "gauss_markov"]),
    transfer=st.sampled_from(["resume", "restart"]),
    fading=st.sampled_from(["none", "rayleigh"]),
    uplink_mhz=st.sampled_from([None, 60.0]),
    seed=st.integers(0, 1000),
)
def test_property_multicell_mobile_runs_pass_every_check_and_replay_exactly(
    tiny, protocol, cells, reuse, mobility, transfer, fading, uplink_mhz, seed
):
    stations = ", ".join(f"{{x_m={600 * k}, y_m=0}}" for k in range(cells))
    overrides = [
        *QUIET,
        f"protocol.kind={protocol}",
        *PROTOCOL_SETTINGS[protocol],
        "protocol.rounds=3",
        "algorithm.steps=2",
        f"seed={seed}",
        f"network.cells=[{stations}]",
        f"network.frequency_reuse={min(reuse, cells)}",
        f"network.fading={fading}",
        f'network.handover_transfer="{transfer}"',
        "network.handover_time_to_trigger_s=0.02",
        f'clients.x_m={{dist="uniform", low=-100, high={600 * cells - 500}}}',
        'clients.y_m={dist="uniform", low=-50, high=50}',
        "clients.count=8",
        f'clients.mobility.model="{mobility}"',
        "clients.mobility.speed_mps=[150, 250]",  # fast enough to hand over in a short run
    ]
    if uplink_mhz is not None:
        overrides.append(f"network.uplink.total_bandwidth_mhz={uplink_mhz}")
    result = mecsim.run(tiny, overrides, write=False)
    checks = check_result(result) + check_replay(result)
    assert not [f"{c.name}: {p}" for c in checks for p in c.problems]
    assert all(e == 0.0 for c in checks for e in c.worst.values())

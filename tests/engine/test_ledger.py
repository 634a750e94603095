"""Faults never corrupt the ledger: failed clients are their own outcome, a run's end cuts
off what is still under way with what it really used, and the invariant checker
(:mod:`mecsim.analysis.invariants`) holds on every protocol x fault x fading combination."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import simpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mecsim
from mecsim.analysis.compare import flatten
from mecsim.analysis.invariants import check_result, check_tables, run_facts
from mecsim.channels import dbm_to_w
from mecsim.commands.cli import main
from mecsim.common.errors import ConfigError
from mecsim.learning.devices import DEVICES
from mecsim.net.network import ClientProfile, Network
from mecsim.net.settings import NetworkConfig
from mecsim.runs.replay import check_replay
from mecsim.runs.runner import RunResult

SCENARIOS = Path(__file__).parents[2] / "scenarios"
COST_ONLY = ["execution.cost_only=true", "clients.num_samples=40", "output.progress=false"]
PROTOCOLS = {
    "compute_and_wait": [],
    "wait_free": [],
    "deadline": ["protocol.deadline_s=1.5"],
    "fedasync": ["protocol.concurrency=3"],
    "fedbuff": ["protocol.concurrency=3", "protocol.buffer_size=2"],
}
FAULTS = {
    "none": [],
    "max_transfer_s": ["network.max_transfer_s=0.3", "network.retries=1"],
    "outage": ["network.fading=rayleigh", "network.min_snr_db=-15", "network.max_transfer_s=1.5"],
    "dropout": ["faults.dropout=0.4"],
}


def failures(checks) -> list[str]:
    return [f"{c.name}: {p}" for c in checks for p in c.problems]


def deadline_with_failed_transfers(late: str) -> RunResult:
    """The issue's reproduction: 4 of 5 downloads fail long before the 10 s deadline."""
    return mecsim.run(
        SCENARIOS / "quickstart.toml",
        [
            "execution.cost_only=true",
            "clients.count=5",
            "protocol.rounds=2",
            "protocol.kind=deadline",
            "protocol.deadline_s=10",
            f"protocol.late={late}",
            "network.max_transfer_s=0.02",
            "output.progress=false",
        ],
        write=False,
    )


def test_deadline_carry_survives_a_failed_transfer():
    """Used to crash: carry appended a callback to a client process that had ended."""
    rounds = deadline_with_failed_transfers("carry").rounds
    assert rounds["failed"].tolist() == [4, 4]
    assert rounds["late"].tolist() == [0, 0]


@pytest.mark.parametrize("late", ["drop", "carry"])
def test_failed_clients_are_counted_as_failed_not_late(late):
    result = deadline_with_failed_transfers(late)
    rounds, events = result.rounds, result.events
    assert (rounds["t_end"] - rounds["t_start"] < 0.1).all()  # far before the deadline
    assert rounds[["on_time", "late", "failed"]].values.tolist() == [[1, 0, 4], [1, 0, 4]]
    for round_ in (0, 1):
        rows = events[(events["round"] == round_) & (events["client"] >= 0)]
        failed = {
            c for c, phases in rows.groupby("client")["phase"] if set(phases) == {"download:failed"}
        }
        assert len(failed) == 4
    assert not failures(check_result(result))


def test_synchronous_rounds_count_failed_uploads():
    result = mecsim.run(
        SCENARIOS / "quickstart.toml",
        ["clients.count=6", "protocol.rounds=2", *COST_ONLY, "network.max_transfer_s=0.02"],
        write=False,
    )
    events, rounds = result.events, result.rounds
    for r in rounds.itertuples():
        rows = events[(events["round"] == r.round) & (events["client"] >= 0)]
        arrived = rows.loc[rows["phase"] == "upload", "client"].nunique()
        assert r.failed == r.num_selected - arrived
    assert rounds["failed"].sum() > 0


def fedbuff_run() -> RunResult:
    return mecsim.run(
        SCENARIOS / "ditto_async_digits.toml",
        [
            "execution.cost_only=true",
            "clients.count=10",
            "protocol.rounds=10",
            "protocol.kind=fedbuff",
            "protocol.buffer_size=3",
            "protocol.concurrency=6",
            "output.progress=false",
        ],
        write=False,
    )


def busy_time(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of intervals, by hand."""
    total, reach = 0.0, -math.inf
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def test_fedbuff_send_energy_is_full_power_over_the_radios_busy_time():
    """Transfers on the air when the last update lands are recorded, cut off: before, a
    download alone on the radio by the ledger took 4x its full-band time."""
    result = fedbuff_run()
    events = result.events
    sends = events[(events["client"] == -1) & (events["role"] == "sender")]
    power = dbm_to_w(result.scenario.network.downlink.tx_power_dbm)
    busy = busy_time(list(zip(sends["t_start"], sends["t_end"], strict=True)))
    assert sends["energy_j"].sum() == pytest.approx(power * busy, rel=1e-9)
    cut = events[events["phase"].str.endswith(":cutoff")]
    assert len(cut) and (cut["t_end"] == result.rounds["t_end"].iloc[-1]).all()
    received = cut[cut["role"] == "receiver"]
    assert (received["bytes"] < 54_000).all()  # partial payloads, not whole ones
    assert not failures(check_result(result))


def test_summary_energy_includes_the_cut_off_transfers():
    result = fedbuff_run()
    events = result.events
    cut = events["phase"].str.endswith(":cutoff") & (events["direction"] == "down")
    receive = events.loc[(events["client"] >= 0) & (events["direction"] == "down"), "energy_j"]
    assert events.loc[cut & (events["client"] >= 0), "energy_j"].sum() > 0
    assert result.summary["energy_j"]["client_receive"] == pytest.approx(receive.sum(), rel=1e-12)


def test_a_cut_off_computation_keeps_the_flops_of_the_time_it_ran():
    result = fedbuff_run()
    events = result.events
    cut = events[events["phase"].str.startswith("compute") & events["phase"].str.endswith("cutoff")]
    assert len(cut)
    by_client = result.clients.set_index("client")
    rate = by_client.loc[cut["client"], "device_flops_per_s"].to_numpy()
    np.testing.assert_allclose(cut["flops"], cut["duration_s"] * rate, atol=1.0)


def test_stored_durations_keep_nanosecond_steps_exact_late_in_a_run(tmp_path):
    """t_end - t_start loses low digits of a nanosecond server step at t = 9,000 s; the
    stored duration is the step itself, so energy = power x duration exactly."""
    trace = tmp_path / "trace.csv"
    trace.write_text("client,start_s,end_s\n" + "".join(f"{c},9000,1e9\n" for c in range(4)))
    result = mecsim.run(
        SCENARIOS / "quickstart.toml",
        ["clients.count=4", "protocol.rounds=2", *COST_ONLY, f"faults.availability={trace}"],
        write=False,
    )
    events = result.events
    server = events[events["phase"] == "aggregate"]
    device = DEVICES.get(result.scenario.server.device)
    assert (server["t_start"] > 9000).all()
    np.testing.assert_array_equal(server["duration_s"], server["flops"] / device.flops_per_s)
    np.testing.assert_array_equal(server["energy_j"], device.power_w * server["duration_s"])
    assert (server["t_end"] - server["t_start"] != server["duration_s"]).any()


# --- the engine, without the simulator -----------------------------------------------
def test_an_upload_cut_off_halfway_has_half_its_bits_in_closed_form():
    config = NetworkConfig()
    client = ClientProfile(0, 200.0, 20e6, 23.0, DEVICES.get("phone-mid"))
    network = Network(config, [client], seed=0)
    network.bind(simpy.Environment())
    whole = network.upload_progress(0, 1000, ("job", 0, 0), 5.0, math.inf)
    half_time = 5.0 + (whole.end - 5.0) / 2
    half = network.upload_progress(0, 1000, ("job", 0, 0), 5.0, half_time)
    assert half.end is None
    cut = half.cut(half_time)
    rate = whole.bits / (whole.end - 5.0)
    assert cut.bits == pytest.approx(rate * (half_time - 5.0), rel=1e-12)
    assert cut.bits == pytest.approx(4000, rel=1e-9)
    assert (cut.end, cut.failed) == (half_time, False)


# --- the checker itself finds what is wrong ---------------------------------------------
@pytest.fixture(scope="module")
def clean() -> RunResult:
    return mecsim.run(
        SCENARIOS / "ditto_async_digits.toml",
        [
            "execution.cost_only=true",
            "clients.count=6",
            "protocol.rounds=4",
            "output.progress=false",
        ],
        write=False,
    )


def check_with(result, events=None, rounds=None, summary=None) -> dict[str, list[str]]:
    facts = run_facts(flatten(result.scenario.model_dump(mode="json")))
    checks = check_tables(
        result.events if events is None else events,
        result.rounds if rounds is None else rounds,
        result.clients,
        facts,
        result.summary if summary is None else summary,
    )
    return {c.name: c.problems for c in checks}


def test_the_checker_passes_a_clean_run_and_finds_each_kind_of_corruption(clean):
    assert not any(check_with(clean).values())
    events = clean.events
    send = events.index[(events["client"] == -1) & (events["role"] == "sender")][0]
    upload = events.index[events["phase"] == "upload"][0]
    compute = events.index[events["phase"].str.startswith("compute")]

    def corrupted(row: int, column: str, value: float) -> pd.DataFrame:
        copy = events.copy()
        copy.loc[row, column] = value
        return copy

    wrong_send = corrupted(send, "energy_j", events.loc[send, "energy_j"] * 0.5)
    assert check_with(clean, events=wrong_send)["send energy"]
    wrong_upload = corrupted(upload, "energy_j", events.loc[upload, "energy_j"] * 1.01)
    assert check_with(clean, events=wrong_upload)["row energy"]
    first = compute[0]
    same_client = compute[(events.loc[compute, "client"] == events.loc[first, "client"]).to_numpy()]
    second = same_client[1]
    overlapping = corrupted(second, "t_start", events.loc[first, "t_start"])
    assert check_with(clean, events=overlapping)["overlaps"]
    longer = corrupted(upload, "t_end", events.loc[upload, "t_end"] + 1.0)
    assert check_with(clean, events=longer)["durations"]
    rounds = clean.rounds.copy()
    rounds.loc[0, "bytes_up"] += 1
    assert check_with(clean, rounds=rounds)["round bytes"]
    summary = {**clean.summary, "bytes_down_total": clean.summary["bytes_down_total"] + 8}
    assert check_with(clean, summary=summary)["summary"]


def test_check_run_cli_passes_a_written_run_and_refuses_a_folder_that_is_not_one(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["run", str(SCENARIOS / "quickstart.toml"), "--out", str(out), "--no-progress"]
    overrides = ["clients.count=4", "protocol.rounds=2", *COST_ONLY]
    assert main([*args, *[x for o in overrides for x in ("--set", o)]]) == 0
    capsys.readouterr()
    assert main(["check-run", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "send energy" in printed and "FAIL" not in printed
    for name in ("send energy", "compute time", "promptness", "idle energy", "replay events"):
        assert f"\n{name:<16} ok" in printed
    assert main(["check-run", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a mecsim run directory" in err[0]


# --- every protocol x fault, and a property-based sweep --------------------------------
@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("protocol", sorted(PROTOCOLS))
def test_every_protocol_and_fault_keeps_the_ledger_consistent(tiny, protocol, fault):
    overrides = [
        f"protocol.kind={protocol}",
        *PROTOCOLS[protocol],
        *FAULTS[fault],
        *COST_ONLY,
        "algorithm.name=ditto",
        "protocol.rounds=4",
        "clients.count=6",
    ]
    result = mecsim.run(tiny, overrides, write=False)
    assert not failures(check_result(result))
    assert "failed" in result.rounds
    if fault in ("max_transfer_s", "dropout"):  # it happened: failures are in the ledger
        assert result.events["phase"].str.contains("failed|fault:").any()


RUNS_CHECKED: list[int] = []


@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    protocol=st.sampled_from(sorted(PROTOCOLS)),
    fading=st.sampled_from(["none", "rayleigh", "rician", "lognormal"]),
    max_transfer_s=st.sampled_from([None, 0.4, 1.5]),
    min_snr_db=st.sampled_from([None, -15.0]),
    retries=st.integers(0, 2),
    dropout=st.sampled_from([0.0, 0.3]),
    downlink=st.sampled_from(["broadcast", "unicast"]),
    cell_mhz=st.sampled_from([None, 40.0]),
    seed=st.integers(0, 1000),
)
def test_property_the_ledger_is_consistent_under_any_faults(
    tiny, protocol, fading, max_transfer_s, min_snr_db, retries, dropout, downlink, cell_mhz, seed
):
    overrides = [
        f"protocol.kind={protocol}",
        *PROTOCOLS[protocol],
        *COST_ONLY,
        "protocol.rounds=3",
        "clients.count=5",
        f"seed={seed}",
        f"network.fading={fading}",
        f"network.retries={retries}",
        f"faults.dropout={dropout}",
        f"network.downlink.mode={downlink}",
    ]
    if max_transfer_s is not None:
        overrides.append(f"network.max_transfer_s={max_transfer_s}")
    if min_snr_db is not None and max_transfer_s is not None:
        overrides.append(f"network.min_snr_db={min_snr_db}")
    if cell_mhz is not None:
        overrides.append(f"network.uplink.total_bandwidth_mhz={cell_mhz}")
    try:
        result = mecsim.run(tiny, overrides, write=False)
    except ConfigError as error:  # every update lost: refused with one line
        assert "no client update reached the server" in str(error) or "failed" in str(error)
        return
    assert not failures(check_result(result))
    RUNS_CHECKED.append(1)


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.toml")), ids=lambda p: p.stem)
def test_every_shipped_scenario_keeps_the_ledger_consistent(path):
    overrides = ["execution.cost_only=true", "protocol.rounds=2", "output.progress=false"]
    overrides.append("clients.num_samples=50")  # no dataset is loaded (CIFAR files absent)
    if path.stem.startswith("persfl"):
        overrides.append("algorithm.fl_rounds=1")
    result = mecsim.run(path, overrides, write=False)
    assert not failures(check_result(result) + check_replay(result))


MOVING_CELLS = [
    "network.cells=[{x_m=0, y_m=0}, {x_m=600, y_m=0}, {x_m=1200, y_m=0}]",
    'clients.x_m={dist="uniform", low=-100, high=1300}',
    'clients.y_m={dist="uniform", low=-50, high=50}',
    "clients.count=8",
    'clients.mobility.model="random_waypoint"',
    "clients.mobility.speed_mps=[150, 250]",  # fast enough to hand over in three rounds
    "network.handover_time_to_trigger_s=0.02",
    "algorithm.steps=2",
    "protocol.rounds=3",
]
"""Three cells and clients driving through them: handovers within a short run."""


def documented_phases() -> list[str]:
    """The phase patterns of docs/using.md's phase table (``<task>`` stands for a name)."""
    import re

    readme = (Path(__file__).resolve().parents[2] / "docs" / "using.md").read_text()
    table = readme.split("<!-- phases -->", 1)[1].split("<!-- /phases -->", 1)[0]
    first_cells = [row.split("|")[1] for row in table.splitlines() if row.startswith("| `")]
    return [p for cell in first_cells for p in re.findall(r"`([^`]+)`", cell)]


def test_every_phase_a_run_emits_is_documented_in_the_run_directory_guide(tiny):
    import re

    patterns = [
        re.compile("^" + re.escape(p).replace(re.escape("<task>"), "[a-z0-9_]+") + "$")
        for p in documented_phases()
    ]
    runs = [
        fedbuff_run(),
        deadline_with_failed_transfers("drop"),
        mecsim.run(
            SCENARIOS / "comet_digits.toml",
            ["execution.cost_only=true", "protocol.rounds=1", "output.progress=false"],
            write=False,
        ),
        mecsim.run(
            SCENARIOS / "quickstart.toml",
            [*COST_ONLY, "clients.count=6", "protocol.rounds=2", "faults.dropout=0.5"]
            + ["network.uplink.total_bandwidth_mhz=30"],
            write=False,
        ),
        *(
            mecsim.run(copy.deepcopy(tiny), [*COST_ONLY, *MOVING_CELLS, *extra], write=False)
            for extra in (
                ["protocol.kind=hierarchical", "protocol.edge_rounds=2"],
                ['network.downlink.mode="unicast"'],
            )
        ),
    ]
    emitted = {p for r in runs for p in r.events["phase"].unique()}
    assert {"download:public", "wait:spectrum", "fault:dropout", "download:cutoff"} <= emitted
    edges = {"backhaul", "aggregate:cloud", "handover", "downlink-send:handover"}
    assert edges | {"handover:cutoff"} <= emitted  # multi-cell, moving, hierarchical
    undocumented = sorted(p for p in emitted if not any(rx.match(p) for rx in patterns))
    assert not undocumented

"""Uplink power control (issue 47): each policy's power in closed form, the ledger's
energy at the power chosen, the decisions table's record of it checked by check-run,
and bad settings as one line."""

from __future__ import annotations

import math

import numpy as np
import pytest

import mecsim
from mecsim.analysis.compare import flatten
from mecsim.analysis.invariants import check_result, check_tables, run_facts
from mecsim.channels import dbm_to_w

RUN = ["execution.cost_only=true", "output.progress=false", "protocol.rounds=2", "clients.count=8"]
QUICKSTART = "scenarios/quickstart.toml"


def uploads_with_power(result):
    events, clients = result.events, result.clients.set_index("client")
    up = events[events["phase"] == "upload"].copy()
    power = result.decisions[result.decisions["decision"] == "power"]
    chosen = power.set_index(["client", "t"])["value"]
    up["power_w"] = chosen.reindex(list(zip(up["client"], up["t_start"], strict=True))).to_numpy()
    up["max_w"] = dbm_to_w(clients["tx_power_dbm"].reindex(up["client"]).to_numpy())
    return up


def test_channel_inversion_brings_each_reachable_upload_to_the_target_snr():
    result = mecsim.run(QUICKSTART, [*RUN, "network.uplink.power=channel_inversion",
                                     "network.uplink.target_snr_db=0"], write=False)  # fmt: skip
    up = uploads_with_power(result)
    reached = up["power_w"] < up["max_w"]
    assert reached.any() and (~reached).any()  # near clients lower their power, far ones cannot
    np.testing.assert_allclose(up.loc[reached, "snr_db"], 0.0, atol=1e-9)
    capped = up[~reached]
    assert (capped["power_w"] == capped["max_w"]).all() and (capped["snr_db"] < 0).all()
    assert not [p for c in check_result(result) for p in c.problems]


def test_min_energy_stretches_early_uploads_to_the_deadline_at_less_energy():
    deadline = 0.5
    fixed = mecsim.run(QUICKSTART, RUN, write=False)
    saving = mecsim.run(QUICKSTART, [*RUN, "network.uplink.power=min_energy",
                                     f"network.uplink.power_deadline_s={deadline}"],
                        write=False)  # fmt: skip
    up = uploads_with_power(saving)
    before = fixed.events[fixed.events["phase"] == "upload"].set_index(["round", "client"])
    after = up.set_index(["round", "client"]).reindex(before.index)
    early = before["duration_s"] < deadline
    assert early.any() and (~early).any()
    # early ones: exactly the deadline, at (2^(b/(B T)) - 1) N0 B / g < P_max, less energy
    np.testing.assert_allclose(after.loc[early, "duration_s"], deadline, rtol=1e-9)
    assert (after.loc[early, "energy_j"] < before.loc[early, "energy_j"]).all()
    np.testing.assert_allclose(
        after.loc[early, "energy_j"], after.loc[early, "power_w"] * deadline, rtol=1e-12
    )
    # the others at full power, as under fixed
    np.testing.assert_allclose(
        after.loc[~early, "duration_s"], before.loc[~early, "duration_s"], rtol=1e-12
    )
    bits = 8 * after.loc[early, "bytes"]
    band = saving.clients.set_index("client")["bandwidth_mhz"] * 1e6
    b = band.reindex(after.loc[early].index.get_level_values("client")).to_numpy()
    snr = 10 ** (after.loc[early, "snr_db"] / 10)
    np.testing.assert_allclose(b * np.log2(1 + snr) * deadline, bits, rtol=1e-9)
    total = saving.summary["energy_j"]["client_transmit"]
    assert total < fixed.summary["energy_j"]["client_transmit"]
    assert not [p for c in check_result(saving) for p in c.problems]


def test_check_run_catches_a_power_above_the_maximum_or_an_energy_at_another_power():
    result = mecsim.run(QUICKSTART, [*RUN, "network.uplink.power=min_energy",
                                     "network.uplink.power_deadline_s=0.5"], write=False)  # fmt: skip
    settings = flatten(result.scenario.model_dump(mode="json"))
    tables = (result.events, result.rounds, result.clients)

    def failed(decisions):
        facts = run_facts(settings)
        facts.decisions = decisions
        return {c.name for c in check_tables(*tables, facts, result.summary, settings)
                if c.problems}  # fmt: skip

    assert failed(result.decisions) == set()
    louder = result.decisions.copy()
    power = louder["decision"] == "power"
    louder.loc[power, "value"] *= 1000  # above every client's maximum
    assert {"power limits", "row energy"} <= failed(louder)
    quieter = result.decisions.copy()
    quieter.loc[power, "value"] *= 0.5
    assert "row energy" in failed(quieter)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (["network.uplink.power=channel_inversion"],
         "network.uplink: power = 'channel_inversion' needs target_snr_db"),
        (["network.uplink.power=channel_inversion", "network.uplink.target_snr_db=-3"],
         "network.uplink.target_snr_db"),
        (["network.uplink.power=min_energy"], "needs power_deadline_s"),
        (["network.uplink.power=loud"], "network.uplink.power: unknown power control 'loud'"),
        (["network.uplink.power=min_energy", "network.uplink.power_deadline_s=1",
          "network.cells=[{x_m=0, y_m=0}, {x_m=500, y_m=0}]", "clients.x_m=100", "clients.y_m=0"],
         "network.uplink.power: 'min_energy' runs on one cell"),
        (["network.uplink.power=min_energy", "network.uplink.power_deadline_s=1e-6"],
         "network.uplink.power_deadline_s: 1e-06 s is shorter than every client's upload"),
        (["protocol.kind=deadline", "protocol.deadline_s=1e-6"],
         "protocol.deadline_s: 1e-06 s is shorter than every client's upload"),
    ],
)  # fmt: skip
def test_bad_power_settings_are_one_line(tiny, refused, overrides, field):
    refused(tiny, overrides, field)


def test_fixed_power_records_no_power_decisions_and_the_maximum_energy():
    result = mecsim.run(QUICKSTART, RUN, write=False)
    assert set(result.decisions["decision"]) == {"schedule"}
    up = result.events[result.events["phase"] == "upload"]
    watts = dbm_to_w(result.clients.set_index("client")["tx_power_dbm"].reindex(up["client"]))
    np.testing.assert_allclose(up["energy_j"], watts.to_numpy() * up["duration_s"], rtol=1e-12)
    assert math.isfinite(result.summary["energy_j"]["client_transmit"])

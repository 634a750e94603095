"""Bandwidth allocation on a finite cell band (issue 47): two like clients whose uploads
start together share the band as each policy says, in closed form; min-max ends
concurrent uploads together and sooner than equal shares on unlike channels; check-run
holds the bands to the cell's; bad settings are one line."""

from __future__ import annotations

import math

import numpy as np
import pytest

import mecsim
from mecsim.analysis.compare import flatten
from mecsim.analysis.invariants import check_result, check_tables, run_facts

QUICKSTART = "scenarios/quickstart.toml"
TWINS = [
    "execution.cost_only=true",
    "output.progress=false",
    "protocol.rounds=1",
    "clients.count=2",
    "clients.num_samples=50",
    "clients.distance_m=200",
    "clients.bandwidth_mhz=10",
    "clients.tx_power_dbm=23",
    'clients.device="phone-high"',
    "network.uplink.total_bandwidth_mhz=10",
]


def seconds_on(band_hz: float, bits: float) -> float:
    """Air time of ``bits`` on ``band_hz`` at 23 dBm, 200 m (KAPC Table 4's path loss)."""
    gain = 10 ** (-40 / 10) * 200.0**-4
    snr = 10 ** (23 / 10) / 1e3 * gain / (10 ** (-174 / 10) / 1e3 * band_hz)
    return bits / (band_hz * math.log2(1 + snr))


@pytest.mark.parametrize("allocation", ["equal", "proportional", "min_max"])
def test_two_like_uploads_share_the_band_in_halves_and_end_together(allocation):
    result = mecsim.run(QUICKSTART, [*TWINS, f"network.uplink.allocation={allocation}"],
                        write=False)  # fmt: skip
    up = result.events[result.events["phase"] == "upload"]
    assert len(up) == 2 and up["t_start"].nunique() == 1  # they start together
    bits = 8.0 * up["bytes"].iloc[0]
    np.testing.assert_allclose(up["duration_s"], seconds_on(5e6, bits), rtol=1e-9)
    bands = result.decisions[result.decisions["decision"] == "band"]["value"]
    np.testing.assert_allclose(bands, 5e6, rtol=1e-9)
    assert not [p for c in check_result(result) for p in c.problems]


def test_first_come_first_served_makes_the_second_wait_for_the_whole_band():
    result = mecsim.run(QUICKSTART, TWINS, write=False)
    up = result.events[result.events["phase"] == "upload"].sort_values("t_end")
    bits = 8.0 * up["bytes"].iloc[0]
    alone = seconds_on(10e6, bits)
    np.testing.assert_allclose(up["duration_s"], alone, rtol=1e-9)
    wait = result.events[result.events["phase"] == "wait:spectrum"]
    np.testing.assert_allclose(wait["duration_s"], alone, rtol=1e-9)


def test_min_max_ends_concurrent_uploads_together_and_before_equal_shares():
    base = ["execution.cost_only=true", "output.progress=false", "protocol.rounds=2",
            "clients.count=6", "network.uplink.total_bandwidth_mhz=40"]  # fmt: skip
    runs = {
        a: mecsim.run(QUICKSTART, [*base, f"network.uplink.allocation={a}"], write=False)
        for a in ("equal", "min_max")
    }
    ends = {}
    for name, run in runs.items():
        up = run.events[(run.events["phase"] == "upload") & (run.events["round"] == 0)]
        ends[name] = up["t_end"].to_numpy()
        assert not [p for c in check_result(run) for p in c.problems]
    # the three slow uploads overlap at the end: min-max has them finish at one instant
    last = np.sort(ends["min_max"])[-3:]
    np.testing.assert_allclose(last, last[-1], rtol=1e-9)
    assert ends["min_max"].max() < ends["equal"].max()


def test_check_run_refuses_bands_that_add_up_to_more_than_the_cell():
    result = mecsim.run(QUICKSTART, [*TWINS, "network.uplink.allocation=equal"], write=False)
    settings = flatten(result.scenario.model_dump(mode="json"))
    facts = run_facts(settings)
    wider = result.decisions.copy()
    wider.loc[wider["decision"] == "band", "value"] *= 1.5  # 7.5 + 7.5 MHz of a 10 MHz band
    facts.decisions = wider
    tables = (result.events, result.rounds, result.clients)
    found = next(c for c in check_tables(*tables, facts, result.summary, settings)
                 if c.name == "band limits")  # fmt: skip
    assert found.problems and "more than" in found.problems[-1]


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (["network.uplink.allocation=equal"],
         "network.uplink.allocation: 'equal' splits a finite band"),
        (["network.uplink.allocation=fair", "network.uplink.total_bandwidth_mhz=40"],
         "network.uplink.allocation: unknown bandwidth allocation 'fair'"),
        (["network.uplink.allocation=min_max", "network.uplink.total_bandwidth_mhz=40",
          "network.cells=[{x_m=0, y_m=0}, {x_m=500, y_m=0}]", "clients.x_m=100", "clients.y_m=0"],
         "network.uplink.allocation: 'min_max' runs on one cell"),
    ],
)  # fmt: skip
def test_bad_allocation_settings_are_one_line(tiny, refused, overrides, field):
    refused(tiny, overrides, field)


def test_min_max_ends_unlike_uploads_at_the_time_an_independent_solution_predicts():
    # three clients alike but for their distance start uploading together: the least T
    # with sum_i b_i(T) = W, b_i(T) solving b log2(1 + P g_i / (N0 b)) = R_i / T
    from scipy.optimize import brentq

    overrides = [o for o in TWINS if not o.startswith(("clients.count", "clients.distance_m",
                                                      "network.uplink.total"))]  # fmt: skip
    overrides += [
        "clients.count=3",
        'clients.distance_m={dist="uniform", low=100, high=500}',
        "network.uplink.total_bandwidth_mhz=10",
        "network.uplink.allocation=min_max",
        'network.downlink.broadcast_rate="worst"',  # downloads end together: so do computations
    ]
    result = mecsim.run(QUICKSTART, overrides, write=False)
    up = result.events[result.events["phase"] == "upload"]
    assert up["t_start"].nunique() == 1
    distance = result.clients.set_index("client")["distance_m"].reindex(up["client"]).to_numpy()
    assert len(set(np.round(distance))) == 3
    bits = 8.0 * up["bytes"].to_numpy()
    power, noise = 10 ** (23 / 10) / 1e3, 10 ** (-174 / 10) / 1e3
    gain = 10 ** (-40 / 10) * distance**-4.0

    def rate(i: int, b: float) -> float:
        return b * math.log2(1 + power * gain[i] / (noise * b))

    def band(i: int, t: float) -> float:
        return brentq(lambda b: rate(i, b) - bits[i] / t, 1e-3, 10e6, xtol=1e-9, rtol=1e-14)

    alone = max(bits[i] / rate(i, 10e6) for i in range(3))  # the slowest on the whole band
    t_star = brentq(lambda t: sum(band(i, t) for i in range(3)) - 10e6, alone, 1e3,
                    xtol=1e-15, rtol=1e-13)  # fmt: skip
    np.testing.assert_allclose(up["duration_s"], t_star, rtol=1e-7)


def test_band_utilization_is_the_band_time_used_over_the_band_time_on_offer():
    """Two like clients sharing 10 MHz in halves use the whole band while they upload (1);
    measured against a 20 MHz offer, half of it; each client on its own band: NaN."""
    from mecsim.analysis.scheduling import band_utilization

    def utilization(overrides, band_mhz):
        result = mecsim.run(QUICKSTART, [*TWINS, *overrides], write=False)
        return band_utilization(result.events, result.decisions, band_mhz * 1e6)

    assert utilization(["network.uplink.allocation=equal"], 10) == pytest.approx(1, rel=1e-9)
    # a 20 MHz offer while the two split 10 MHz: half the band idle
    assert utilization(["network.uplink.allocation=equal"], 20) == pytest.approx(0.5, rel=1e-9)
    result = mecsim.run(QUICKSTART, TWINS[:-1], write=False)  # each client its own band
    assert math.isnan(band_utilization(result.events, result.decisions, None))


def test_compare_shows_the_band_utilization_of_each_run(tmp_path):
    from mecsim.analysis.compare import compare_runs, load_run

    for name in ("equal", "min_max"):
        overrides = [*TWINS, f"network.uplink.allocation={name}"]
        mecsim.run(QUICKSTART, overrides, out=tmp_path / name)
    table = compare_runs([load_run(tmp_path / n) for n in ("equal", "min_max")], [])
    np.testing.assert_allclose(table["band_utilization"], 1.0, rtol=1e-9)

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


def snr_hz(distance_m):
    """P g(d) / N0 (Hz): the SNR on 1 Hz at 23 dBm and KAPC Table 4's path loss."""
    return 10 ** (23 / 10) / 1e3 * 10 ** (-40 / 10) * distance_m**-4.0 / (10 ** (-174 / 10) / 1e3)


def seconds_on(band_hz: float, bits: float) -> float:
    """Air time of ``bits`` on ``band_hz`` at 23 dBm, 200 m."""
    return bits / (band_hz * math.log2(1 + snr_hz(200.0) / band_hz))


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
    wider.loc[wider["decision"] == "band_change", "value"] *= 1.5
    facts.decisions = wider
    tables = (result.events, result.rounds, result.clients)
    found = next(c for c in check_tables(*tables, facts, result.summary, settings)
                 if c.name == "band limits")  # fmt: skip
    assert any("more than" in p for p in found.problems)
    assert any("held 15000000 Hz of 10000000" in p for p in found.problems)


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


UNLIKE = [o for o in TWINS if not o.startswith(("clients.count", "clients.distance_m",
                                              "network.uplink.total"))] + [
    "clients.count=3",
    'clients.distance_m={dist="uniform", low=100, high=500}',
    "network.uplink.total_bandwidth_mhz=10",
    'network.downlink.broadcast_rate="worst"',  # downloads end together: so do computations
]  # fmt: skip
"""Three clients alike but for their distance, whose uploads start together on 10 MHz."""


class Unlike:
    """The three :data:`UNLIKE` uploads by hand: Shannon rates at 23 dBm, KAPC's path
    loss, and scipy's ``brentq`` for every band and time."""

    W = 10e6

    def __init__(self, up) -> None:
        from scipy.optimize import brentq

        self.brentq = brentq
        self.bits = 8.0 * up["bytes"].to_numpy()
        self.snr_hz = snr_hz(up["distance_m"].to_numpy())

    def rate(self, i: int, b: float) -> float:
        return b * math.log2(1 + self.snr_hz[i] / b)

    def band(self, i: int, bits: float, t: float) -> float:
        """The band on which client ``i`` sends ``bits`` in ``t`` s (inf: more than W)."""
        if self.rate(i, self.W) < bits / t:
            return math.inf
        return self.brentq(lambda b: self.rate(i, b) - bits / t, 1e-3, 1e9, xtol=1e-9, rtol=1e-14)

    def common_end(self) -> float:
        alone = max(self.bits[i] / self.rate(i, self.W) for i in range(3))
        return self.brentq(lambda t: sum(self.band(i, self.bits[i], t) for i in range(3)) - self.W,
                           alone, 1e3, xtol=1e-15, rtol=1e-13)  # fmt: skip

    def equal_ends(self) -> np.ndarray:
        """Processor sharing: W / n to each of the n on the air, re-split as each ends."""
        left, ends, now = self.bits.copy(), np.zeros(3), 0.0
        on = set(range(3))
        while on:
            rates = {i: self.rate(i, self.W / len(on)) for i in on}
            first = min(on, key=lambda i: left[i] / rates[i])
            step = left[first] / rates[first]
            now += step
            for i in on:
                left[i] -= rates[i] * step
            ends[first] = now
            on.remove(first)
        return ends


def unlike_uploads(*overrides: str):
    result = mecsim.run(QUICKSTART, [*UNLIKE, *overrides], write=False)
    events = result.events
    up = events[events["phase"].str.startswith("upload") & (events["round"] == 0)]
    up = up.merge(result.clients[["client", "distance_m"]], on="client").sort_values("client")
    assert up["t_start"].nunique() == 1 and up["distance_m"].round().nunique() == 3
    return result, up


def test_min_max_ends_unlike_uploads_at_the_time_an_independent_solution_predicts():
    """The least T with sum_i b_i(T) = W, b_i(T) solving b log2(1 + P g_i / (N0 b)) = R_i / T;
    equal shares end as processor sharing does, later by the ratio the two closed forms give."""
    _, up = unlike_uploads("network.uplink.allocation=min_max")
    hand = Unlike(up)
    t_star = hand.common_end()
    np.testing.assert_allclose(up["duration_s"], t_star, rtol=1e-7)
    _, equal = unlike_uploads("network.uplink.allocation=equal")
    np.testing.assert_allclose(equal["duration_s"], hand.equal_ends(), rtol=1e-9)
    shortened = equal["duration_s"].max() / up["duration_s"].max()
    assert shortened == pytest.approx(hand.equal_ends().max() / t_star, rel=1e-7) and shortened > 1


def test_min_max_under_a_deadline_admits_the_uploads_needing_least_band_and_ends_them_on_it():
    """With a deadline before the common end: the uploads needing the least band to end by
    it are admitted while the band lasts and end exactly at it; the rest end later."""
    _, free = unlike_uploads("network.uplink.allocation=min_max")
    start, t_star = float(free["t_start"].iloc[0]), float(free["duration_s"].iloc[0])
    deadline = start + 0.6 * t_star
    _, up = unlike_uploads("network.uplink.allocation=min_max", "protocol.kind=deadline",
                           f"protocol.deadline_s={deadline!r}", "protocol.rounds=2")  # fmt: skip
    hand = Unlike(up)
    need = [hand.band(i, hand.bits[i], deadline - start) for i in range(3)]
    admitted, left = [], hand.W
    for i in np.argsort(need):
        if need[i] > left:
            break
        admitted.append(int(i))
        left -= need[i]
    assert 0 < len(admitted) < 3
    ends = up["t_end"].to_numpy()
    np.testing.assert_allclose(ends[admitted], deadline, rtol=1e-9)
    assert (np.delete(ends, admitted) > deadline).all()


def test_band_changes_hold_at_most_the_cell_and_integrate_to_each_uploads_mean_band():
    from mecsim.analysis.decisions import band_peak

    result, up = unlike_uploads("network.uplink.allocation=equal")
    changes = result.decisions[result.decisions["decision"] == "band_change"]
    mean = result.decisions[result.decisions["decision"] == "band"].set_index("client")["value"]
    # W/3 each, then W/2 for two, then W for the last: 3 + 2 + 1 changes
    assert len(changes) == 6
    at, peak = band_peak(changes, up)
    assert peak == pytest.approx(10e6, rel=1e-12)
    for client, rows in changes.groupby("client"):
        upload = up.set_index("client").loc[client]
        times = [*rows["t"], upload["t_end"]]
        held = sum(v * (b - a) for v, a, b in zip(rows["value"], times, times[1:], strict=False))
        assert held == pytest.approx(mean[client] * upload["duration_s"], rel=1e-9)


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

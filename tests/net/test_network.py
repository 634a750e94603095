"""The radio through whole runs: shared server transmitter, fading, outage, cell band, ledger."""

import math

import numpy as np
import pandas as pd
import pytest

import mecsim
from mecsim.channels import dbm_to_w
from mecsim.commands.cli import main

FAST = ["algorithm.steps=2", "protocol.rounds=2", "clients.distance_m=200"]


def union_length(intervals) -> float:
    total, reach = 0.0, -math.inf
    for a, b in sorted(intervals):
        if b > reach:
            total += b - max(a, reach)
            reach = b
    return total


def test_equal_unicast_receivers_take_n_times_the_broadcast_download(tiny):
    broadcast = mecsim.run(tiny, FAST, write=False).events
    unicast = mecsim.run(tiny, FAST + ["network.downlink.mode=unicast"], write=False).events

    def durations(e):
        d = e[e["phase"] == "download"]
        return (d["t_end"] - d["t_start"]).to_numpy()

    # 4 clients at the same distance: each unicast holds a quarter of the band and power
    np.testing.assert_allclose(durations(unicast), 4 * durations(broadcast), rtol=1e-9)


@pytest.mark.parametrize("kind", ["compute_and_wait", "fedasync"])
def test_server_transmit_energy_is_full_power_times_airtime(tiny, kind):
    """Overlapping transmissions share the server's power: nothing creates energy. (An
    asynchronous run ends with transmissions in flight, which are not recorded but did
    share the power, so there the recorded energy may fall short of power x airtime.)"""
    overrides = FAST + ["network.downlink.mode=unicast", f"protocol.kind={kind}"]
    if kind == "fedasync":
        overrides += ["protocol.rounds=8", "protocol.concurrency=4", "clients.distance_m=300"]
    result = mecsim.run(tiny, overrides, write=False)

    sends = result.events[result.events["phase"] == "downlink-send"]
    power = dbm_to_w(result.scenario.network.downlink.tx_power_dbm)
    airtime = union_length(zip(sends["t_start"], sends["t_end"], strict=True))
    assert sends["energy_j"].sum() <= power * airtime * (1 + 1e-9)
    if kind == "compute_and_wait":
        assert sends["energy_j"].sum() == pytest.approx(power * airtime)
    overlapping = sends["t_start"].to_numpy()[1:] < np.maximum.accumulate(sends["t_end"])[:-1]
    assert overlapping.any()  # the case under test: concurrent transmissions


def test_async_clients_that_start_together_share_one_broadcast(tiny):
    result = mecsim.run(
        tiny, FAST + ["protocol.kind=fedasync", "protocol.concurrency=4"], write=False
    )
    sends = result.events[result.events["phase"] == "downlink-send"]
    downloads = result.events[result.events["phase"] == "download"]

    first = sends[sends["t_start"] == 0.0]
    assert len(first) == 1  # the four clients of version 0 at t = 0: one transmission
    assert (downloads["t_start"] == 0.0).sum() == 4


def test_rayleigh_round_time_is_finite_and_near_no_fading(tiny):
    overrides = [
        "execution.cost_only=true",
        "clients.num_samples=50",
        "clients.count=40",
        "protocol.rounds=5",
    ]
    plain = mecsim.run(tiny, overrides, write=False).rounds
    faded = mecsim.run(tiny, overrides + ["network.fading=rayleigh"], write=False).rounds

    mean = (plain["t_end"] - plain["t_start"]).mean()
    faded_mean = (faded["t_end"] - faded["t_start"]).mean()
    # block fading averages over a transfer's blocks: close to the no-fading time, never
    # orders of magnitude off as one draw held for a whole transfer was
    assert 0.85 * mean < faded_mean < 1.15 * mean


def test_a_transfer_past_max_transfer_s_fails_and_is_retried(tiny, caplog):
    overrides = FAST + [
        "network.fading=rayleigh",
        "network.min_snr_db=-4",  # most blocks are in outage at 200 m
        "network.max_transfer_s=0.04",
        "network.retries=1",
    ]
    with caplog.at_level("WARNING", logger="mecsim"):
        result = mecsim.run(tiny, overrides, write=False)
    events, rounds = result.events, result.rounds

    failed = events[events["phase"] == "download:failed"]
    assert len(failed) > 0 and (failed["bytes"] == 0).all()
    np.testing.assert_allclose(failed["t_end"] - failed["t_start"], 0.04)
    # a retry follows a failure: some client has two download attempts in one round
    attempts = events[events["phase"].str.startswith("download")].groupby(["round", "client"])
    assert (attempts.size() == 2).any()
    # a client whose download failed twice sits the round out: no compute, no upload
    for (round_, client), rows in attempts:
        if (rows["phase"] == "download:failed").all():
            mine = events[(events["round"] == round_) & (events["client"] == client)]
            assert not mine["phase"].str.startswith(("compute", "upload")).any()
    # rounds where nothing arrived are counted and logged, not silent
    assert (rounds["updates"] == 0).any() and rounds["updates"].sum() > 0
    assert "no client update reached the server" in caplog.text


def test_a_run_in_which_no_update_ever_arrives_is_an_error(tiny, tmp_path, capsys):
    import tomli_w

    tiny["protocol"].update({"kind": "deadline", "deadline_s": 1e-4})
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(tiny))

    assert main(["run", str(path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "protocol.deadline_s" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_permanent_outage_is_a_clear_error_before_the_run(tiny, tmp_path, capsys):
    import tomli_w

    tiny["network"] = {"min_snr_db": 200}
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(tiny))

    assert main(["run", str(path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert "network.min_snr_db" in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_uploads_beyond_the_cell_band_wait_first_come_first_served(tiny):
    overrides = FAST + [
        "clients.bandwidth_mhz=10",
        "network.uplink.total_bandwidth_mhz=20",  # two uploads at a time
    ]
    result = mecsim.run(tiny, overrides, write=False)
    events = result.events

    waits = events[events["phase"] == "wait:spectrum"]
    assert len(waits) > 0
    uploads = events[events["phase"] == "upload"]
    for t in uploads["t_start"]:
        on_air = ((uploads["t_start"] <= t) & (uploads["t_end"] > t)).sum()
        assert on_air <= 2
    # first come, first served: uploads start in the order their clients asked
    asked = pd.concat(
        [
            waits.set_index(["round", "client"])["t_start"],
            uploads.set_index(["round", "client"])["t_start"].drop(
                waits.set_index(["round", "client"]).index
            ),
        ]
    ).sort_index()
    started = uploads.set_index(["round", "client"])["t_start"].reindex(asked.index)
    for _, group in pd.DataFrame({"asked": asked, "started": started}).groupby(level="round"):
        order = group.sort_values(["asked", "started"])
        assert order["started"].is_monotonic_increasing


@pytest.mark.parametrize(
    "protocol",
    [
        ["protocol.kind=compute_and_wait"],
        ["protocol.kind=wait_free"],
        ["protocol.kind=deadline", "protocol.deadline_s=1.0", "protocol.late=carry"],
        ["protocol.kind=fedasync", "protocol.rounds=6"],
        ["protocol.kind=fedbuff", "protocol.rounds=3", "protocol.buffer_size=2"],
    ],
    ids=lambda p: p[0].split("=")[1],
)
def test_rounds_bytes_are_the_events_summed_per_round_and_direction(tiny, protocol):
    result = mecsim.run(
        tiny, FAST + ["algorithm.name=ditto", "algorithm.personal_steps=2"] + protocol, write=False
    )
    events, rounds = result.events, result.rounds

    up = events[(events["direction"] == "up") & (events["role"] == "sender")]
    down = events[(events["direction"] == "down") & (events["role"] == "receiver")]
    for _, row in rounds.iterrows():
        assert row["bytes_up"] == up.loc[up["round"] == row["round"], "bytes"].sum()
        assert row["bytes_down"] == down.loc[down["round"] == row["round"], "bytes"].sum()
    assert result.summary["bytes_down_total"] == down["bytes"].sum()
    # server send rows repeat the payload on air, never counted as bytes moved twice
    assert set(events.loc[events["phase"] == "downlink-send", "role"]) == {"sender"}
    assert (events.loc[events["client"] >= 0, "job"] >= 0).all()


def test_receive_and_idle_energy_are_charged_and_reported(tiny):
    result = mecsim.run(tiny, FAST, write=False)
    events, clients = result.events, result.clients

    downloads = events[events["phase"] == "download"].merge(clients, on="client")
    np.testing.assert_allclose(
        downloads["energy_j"], downloads["rx_power_w"] * (downloads["t_end"] - downloads["t_start"])
    )
    energy = result.summary["energy_j"]
    assert energy["client_receive"] == pytest.approx(downloads["energy_j"].sum())
    assert energy["client_idle"] > 0
    report = mecsim.analysis.render_report("tiny", result.summary)
    assert "client receive" in report and "client idle" in report


def test_wait_free_saves_idle_energy(tiny):
    base = FAST + ["algorithm.name=ditto", "algorithm.personal_steps=6", "clients.device=iot-low"]
    caw = mecsim.run(tiny, base, write=False).summary["energy_j"]["client_idle"]
    wf = mecsim.run(tiny, base + ["protocol.kind=wait_free"], write=False).summary["energy_j"]

    assert wf["client_idle"] < caw


def test_interference_psd_equal_to_the_noise_costs_exactly_3_db(tiny):
    plain = mecsim.run(tiny, FAST, write=False).events
    noisy = mecsim.run(
        tiny, FAST + ["network.downlink.interference_dbm_hz=-174"], write=False
    ).events

    def snr(e):
        return e[e["phase"] == "download"]["snr_db"].to_numpy()

    np.testing.assert_allclose(snr(plain) - snr(noisy), 10 * math.log10(2), atol=1e-9)


def test_worst_rate_broadcast_delivers_to_everyone_at_the_slowest_time(tiny):
    spread = ["algorithm.steps=2", "protocol.rounds=1"]  # clients at their own distances
    rateless = mecsim.run(tiny, spread, write=False).events
    worst = mecsim.run(tiny, spread + ["network.downlink.broadcast_rate=worst"], write=False).events

    def ends(e):
        return e[e["phase"] == "download"]["t_end"].to_numpy()

    assert len(set(ends(rateless))) > 1
    np.testing.assert_allclose(ends(worst), ends(rateless).max())


def test_transfer_time_limits_follow_the_closed_form_rate():
    """At 1 bit/s/Hz and 1 Hz a client moves 1 bit/s: 1.25e8 bytes take exactly 1e9 s."""
    from mecsim.common.errors import ConfigError
    from mecsim.learning.devices import DEVICES
    from mecsim.net.link_checks import MAX_BLOCKS, MAX_TRANSFER_S
    from mecsim.net.network import ClientProfile, Network
    from mecsim.net.settings import NetworkConfig

    device = DEVICES.get("phone-mid")
    client = [ClientProfile(0, 100.0, 1.0, 20.0, device)]
    network = Network(NetworkConfig(spectral_efficiency=1.0), client, seed=0)
    limit = int(MAX_TRANSFER_S / 8)
    network.check_transfer_times({0: limit}, "the model")
    with pytest.raises(ConfigError) as refused:
        network.check_transfer_times({0: limit + 1}, "the model")
    assert refused.value.field == "clients.distance_m"

    # with fading, the same link at 1 ms blocks spans bits / (1 bit/s x 1 ms) blocks
    fading = NetworkConfig(spectral_efficiency=1.0, fading="rayleigh", coherence_ms=1.0)
    network = Network(fading, client, seed=0)
    most = int(MAX_BLOCKS * 1e-3 / 8)
    network.check_transfer_times({0: most}, "the model")
    with pytest.raises(ConfigError) as refused:
        network.check_transfer_times({0: most + 1}, "the model")
    assert refused.value.field == "network.coherence_ms"

    # without fading, a deadline shorter than every client's transfer fails every transfer
    short = Network(NetworkConfig(spectral_efficiency=1.0, max_transfer_s=799.0), client, seed=0)
    with pytest.raises(ConfigError, match="every transfer would fail"):
        short.check_transfer_times({0: 100}, "the model")

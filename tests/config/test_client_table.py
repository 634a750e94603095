"""clients.table: per-client distance, bandwidth, power, device and sample counts from a CSV."""

from __future__ import annotations

import math

import pytest
import tomli_w

import mecsim
from mecsim.commands.cli import main
from mecsim.config.scenario import ScenarioError

TABLE = """client,distance_m,bandwidth_mhz,tx_power_dbm,device,num_samples
2,300,1,20,iot-low,30
0,100,5,23,phone-mid,10
1,200,2,30,phone-mid,20
"""


@pytest.fixture
def scenario(tiny, tmp_path):
    (tmp_path / "devices.csv").write_text(TABLE)
    tiny.pop("clients")
    tiny["clients"] = {"table": "devices.csv"}
    tiny["execution"] = {"cost_only": True}
    tiny["network"] = {"fading": "none"}
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(tiny))
    return path


def test_the_table_sets_every_client_and_the_population(scenario, tmp_path):
    result = mecsim.run(scenario, out=tmp_path / "run")
    clients = result.clients
    assert clients["distance_m"].tolist() == [100, 200, 300]  # ordered by the client column
    assert clients["bandwidth_mhz"].tolist() == [5, 2, 1]
    assert clients["tx_power_dbm"].tolist() == [23, 30, 20]
    assert clients["device"].tolist() == ["phone-mid", "phone-mid", "iot-low"]
    assert clients["num_train"].tolist() == [10, 20, 30]
    # client 2's upload: the model's bytes at its own rate, B log2(1 + SNR), from the table
    events = result.events
    up = events[(events["phase"] == "upload") & (events["client"] == 2)].iloc[0]
    net = result.scenario.network
    gain_db = net.pathloss_db - 10 * net.exponent * math.log10(300 / net.reference_m)
    noise_w = 10 ** ((net.noise_psd_dbm_hz - 30) / 10) * 1e6
    snr = 10 ** ((20 - 30 + gain_db) / 10) / noise_w
    rate = 1e6 * math.log2(1 + snr)
    assert up["t_end"] - up["t_start"] == pytest.approx(8 * up["bytes"] / rate, rel=1e-9)


def test_a_relative_table_is_read_beside_the_scenario(scenario, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path.parent)
    assert mecsim.load_scenario(scenario).clients.count == 3


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("distance,bandwidth_mhz\n1,2\n", "unknown column 'distance'; did you mean 'distance_m'?"),
        ("distance_m\n100\n-5\n", "client 1: distance_m = -5 must lie in (0, 1e+06]"),
        ("client,distance_m\n0,1\n0,2\n", "column client must number the rows 0..1"),
        ("device\nphone-mid\ntoaster\n", "unknown device 'toaster' in"),
        ("client\n0\n", "at least one row and one attribute column"),
    ],
)
def test_a_bad_table_is_one_line_before_any_work(tiny, tmp_path, capsys, table, message):
    (tmp_path / "devices.csv").write_text(table)
    tiny["clients"] = {"table": "devices.csv"}
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(tiny))
    assert main(["run", str(path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert message in err and "clients.table: " in err and err.count("\n") <= 3
    assert not (tmp_path / "run").exists()


def test_count_must_agree_and_sample_counts_need_cost_only(scenario, tiny):
    with pytest.raises(ScenarioError, match="count = 5 but .* has 3 rows"):
        mecsim.load_scenario(scenario, ["clients.count=5"])
    with pytest.raises(ScenarioError, match="column num_samples is only used with"):
        mecsim.load_scenario(scenario, ["execution.cost_only=false"])

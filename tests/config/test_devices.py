"""Devices as data (issue 51): ``[[devices]]`` tables in a scenario define compute
devices that clients, a client table and the server name like the built-in ones."""

from __future__ import annotations

import numpy as np
import pytest

import mecsim
from mecsim.learning.devices import DEVICES

QUICK = ["protocol.rounds=1", "execution.cost_only=true", "output.progress=false"]
SLOW = 'devices=[{name="slow-phone", flops_per_s=5e9, power_w=2.0, idle_power_w=0.1}]'


def test_a_scenario_device_times_and_powers_its_clients_computation():
    result = mecsim.run(
        "scenarios/quickstart.toml", [*QUICK, SLOW, 'clients.device="slow-phone"'], write=False
    )
    assert set(result.clients["device"]) == {"slow-phone"}
    compute = result.events[result.events["phase"].str.startswith("compute:")]
    np.testing.assert_allclose(compute["duration_s"], compute["flops"] / 5e9, rtol=1e-12)
    np.testing.assert_allclose(compute["energy_j"], 2.0 * compute["duration_s"], rtol=1e-12)
    assert "slow-phone" not in DEVICES  # the scenario's own, not the process's


def test_the_server_and_a_client_table_name_scenario_devices(tmp_path):
    table = tmp_path / "clients.csv"
    table.write_text("client,device\n" + "".join(f"{i},slow-phone\n" for i in range(20)))
    overrides = [*QUICK, SLOW, f'clients.table="{table}"', 'server.device="slow-phone"']
    result = mecsim.run("scenarios/quickstart.toml", overrides, write=False)
    assert set(result.clients["device"]) == {"slow-phone"}
    server = result.events[(result.events["client"] < 0) & (result.events["flops"] > 0)]
    np.testing.assert_allclose(server["duration_s"], server["flops"] / 5e9, rtol=1e-12)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        (['devices=[{name="jetson", flops_per_s=1e9, power_w=1}]'], "devices"),
        (['devices=[{name="a", flops_per_s=1e9, power_w=1}, {name="a", flops_per_s=2e9, '
          'power_w=1}]'], "devices"),
        (['devices=[{name="a", flops_per_s=0, power_w=1}]'], "devices.0.flops_per_s"),
        (['devices=[{name="a", flops_per_s=1e9}]'], "devices.0.power_w"),
        ([SLOW, 'clients.device="slow-phon"'], "clients.device: unknown device 'slow-phon'"),
    ],
)  # fmt: skip
def test_bad_devices_are_one_line(tiny, refused, overrides, field):
    refused(tiny, overrides, field)


def test_two_scenarios_in_one_process_may_define_one_name_differently():
    runs = [
        mecsim.run(
            "scenarios/quickstart.toml",
            [*QUICK, f'devices=[{{name="x", flops_per_s={f}, power_w=1}}]', 'clients.device="x"'],
            write=False,
        )
        for f in (1e9, 4e9)
    ]
    slow, fast = (
        r.events[r.events["phase"].str.startswith("compute:")].set_index("client")["duration_s"]
        for r in runs
    )
    np.testing.assert_allclose(slow.sort_index(), 4 * fast.sort_index(), rtol=1e-12)

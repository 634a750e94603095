"""Values valid but implausible for their unit get one warning line each and still run
(issue 51, item 7): a unit slip (0.3 m where 0.3 km was meant) no longer runs silently."""

from __future__ import annotations

from pathlib import Path

import pytest

from mecsim.commands.cli import main

QUICKSTART = str(Path(__file__).resolve().parents[2] / "scenarios" / "quickstart.toml")
CELLS = ["network.cells=[{x_m=0, y_m=0}, {x_m=1000, y_m=0}]", "clients.y_m=0"]


def _warnings(caplog) -> list[str]:
    return [m for m in caplog.messages if m.startswith("warning")]


@pytest.mark.parametrize(
    ("settings", "says"),
    [
        (["clients.distance_m=0.3"], "clients.distance_m: 20 of 20 clients are under 1 m"),
        (
            ['clients.distance_m={dist="uniform", low=50e3, high=200e3}', "network.exponent=2"],
            "beyond 100 km",
        ),
        (["clients.bandwidth_mhz=0.0005"], "clients.bandwidth_mhz: 20 of 20 clients have a band"),
        (["clients.tx_power_dbm=60"], "clients.tx_power_dbm: 20 of 20 clients send above 50 dBm"),
        (["network.downlink.bandwidth_mhz=0.0002"], "network.downlink.bandwidth_mhz = 0.0002"),
        ([*CELLS, 'clients.x_m={dist="uniform", low=0, high=0.5}'], "clients.x_m/y_m: 20 of"),
    ],
)
def test_an_implausible_value_is_one_warning_line_and_the_scenario_still_validates(
    caplog, settings, says
):
    args = ["validate", QUICKSTART]
    for setting in settings:
        args += ["--set", setting]
    assert main(args) == 0
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and says in warnings[0], warnings


def test_a_client_table_is_checked_as_drawn(tmp_path, caplog):
    table = tmp_path / "clients.csv"
    table.write_text("distance_m\n" + "\n".join(["200"] * 19 + ["0.4"]) + "\n")
    assert main(["validate", QUICKSTART, "--set", f'clients.table="{table}"']) == 0
    warnings = _warnings(caplog)
    assert len(warnings) == 1 and "1 of 20 clients are under 1 m" in warnings[0]
    assert "clients.table" in warnings[0] and "closest 0.4 m" in warnings[0]


def test_plausible_values_and_a_client_beside_its_base_station_warn_of_nothing(tmp_path, caplog):
    table = tmp_path / "clients.csv"  # one client of twenty within a metre of a base station
    table.write_text("x_m,y_m\n0.5,0\n" + "".join(f"{50 * i},0\n" for i in range(1, 20)))
    args = ["validate", QUICKSTART, "--set", CELLS[0], "--set", f'clients.table="{table}"']
    assert main(args) == 0
    assert not _warnings(caplog)
    assert main(["validate", QUICKSTART]) == 0
    assert not _warnings(caplog)


def test_every_physical_key_names_its_unit_or_says_it_in_its_description():
    from mecsim.config.sections import Scenario
    from mecsim.net.settings import BackhaulConfig, CellConfig, MobilityConfig

    units = ("_m", "_mhz", "_dbm", "_db", "_s", "_ms", "_w", "_hz", "_mbps", "_per_bit",
             "_mps", "_per_s", "_gb")  # fmt: skip
    said = ("dimensionless", "linear", "bit/s/Hz", "probability", "count")
    sections = [Scenario.model_fields[k].annotation for k in ("clients",)]
    sections += [CellConfig, BackhaulConfig, MobilityConfig]
    network = Scenario.model_fields["network"].annotation
    sections += [network, network.model_fields["uplink"].annotation]
    sections += [network.model_fields["downlink"].annotation]
    missing = []
    for section in sections:
        for name, field in section.model_fields.items():
            numeric = field.annotation in (float, float | None)
            text = field.description or ""
            if numeric and not name.endswith(units) and not any(s in text for s in said):
                missing.append(f"{section.__name__}.{name}")
    assert not missing

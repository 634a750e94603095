from pathlib import Path

import pytest
import tomllib

import mecsim
from mecsim.common.distributions import Choice, Uniform
from mecsim.common.errors import ConfigError
from mecsim.config.scenario import (
    ScenarioError,
    apply_overrides,
    load_scenario,
    parse_override,
    resolved_toml,
    validate_scenario,
)

ROOT = Path(__file__).resolve().parents[2]


def paths(data):
    _, problems = validate_scenario(data)
    return {p.path for p in problems}, problems


def test_defaults_follow_kapc_table4():
    scenario = load_scenario({})

    assert scenario.clients.bandwidth_mhz == Uniform(low=10, high=30)
    assert scenario.clients.distance_m == Uniform(low=100, high=500)
    assert scenario.network.pathloss_db == -40.0 and scenario.network.exponent == 4.0
    assert scenario.network.downlink.bandwidth_mhz == 50.0
    assert scenario.network.downlink.tx_power_dbm == 30.0
    assert scenario.network.uplink.interference_dbm is None


def test_every_shipped_scenario_validates():
    for path in sorted((ROOT / "scenarios").glob("*.toml")):
        assert load_scenario(path).name == path.stem


def test_unknown_keys_are_reported_with_their_path():
    found, problems = paths({"data": {"datset": "digits"}, "clients": {"count": 2, "colour": 1}})

    assert found == {"data.datset", "clients.colour"}
    assert all("unknown key" in p.message for p in problems)


def test_unknown_names_list_allowed_values():
    found, problems = paths({"algorithm": {"name": "fedmagic"}})
    assert found == {"algorithm.name"}
    assert "fedavg" in problems[0].message and "fedprox" in problems[0].message

    found, problems = paths({"data": {"dataset": "imagenet"}, "model": {"name": "gpt"}})
    assert found == {"data.dataset", "model.name"}
    assert "digits" in " ".join(p.message for p in problems)


def test_algorithm_specific_keys_are_validated_by_the_algorithm():
    scenario = load_scenario({"algorithm": {"name": "fedprox", "mu": 0.5}})
    assert scenario.algorithm.mu == 0.5

    found, _ = paths({"algorithm": {"name": "fedavg", "mu": 0.5}})
    assert found == {"algorithm.mu"}
    found, _ = paths({"algorithm": {"name": "fedprox", "mu": -1}})
    assert found == {"algorithm.mu"}


@pytest.mark.parametrize(
    "data, path",
    [
        ({"clients": {"bandwidth_mhz": -5}}, "clients.bandwidth_mhz"),
        ({"clients": {"bandwidth_mhz": 0}}, "clients.bandwidth_mhz"),
        (
            {"clients": {"bandwidth_mhz": {"dist": "uniform", "low": 30, "high": 10}}},
            "clients.bandwidth_mhz",
        ),
        (
            {"clients": {"distance_m": {"dist": "uniform", "low": 0, "high": 10}}},
            "clients.distance_m.low",
        ),
        ({"protocol": {"participation": 0}}, "protocol.participation"),
        ({"protocol": {"participation": 1.5}}, "protocol.participation"),
        ({"protocol": {"kind": "telepathy"}}, "protocol.kind"),
        ({"network": {"downlink": {"bandwidth_mhz": 0}}}, "network.downlink.bandwidth_mhz"),
        ({"clients": {"device": "abacus"}}, "clients.device"),
        ({"protocol": {"clients_per_round": 50}}, "protocol.clients_per_round"),
        ({"protocol": {"kind": "deadline"}}, "protocol"),
        (
            {
                "protocol": {
                    "kind": "wait_free",
                    "personal_budget": "window_uncapped",
                    "participation": 0.5,
                }
            },
            "protocol.max_personal_steps",
        ),
    ],
)
def test_bad_values_name_their_field(data, path):
    found, problems = paths(data)

    assert path in found, problems


def test_distribution_low_above_high_names_the_rule():
    _, problems = paths({"clients": {"tx_power_dbm": {"dist": "uniform", "low": 30, "high": 20}}})

    assert problems and "low (30.0) must be <= high (20.0)" in problems[0].message


def test_choice_weights_must_match_values():
    with pytest.raises(ValueError, match="weights has 1 entries"):
        Choice(values=["a", "b"], weights=[1.0])


def test_all_problems_are_reported_at_once():
    with pytest.raises(ScenarioError) as info:
        load_scenario({"clients": {"count": 0}, "protocol": {"rounds": 0}, "seed": "x"})

    assert {p.path for p in info.value.problems} == {"clients.count", "protocol.rounds", "seed"}


def test_overrides_parse_toml_values_and_nest():
    assert parse_override("protocol.rounds=5") == ("protocol.rounds", 5)
    assert parse_override("model.name=mlp") == ("model.name", "mlp")
    key, value = parse_override('clients.bandwidth_mhz={dist="uniform",low=1,high=2}')
    assert value == {"dist": "uniform", "low": 1, "high": 2}

    data = apply_overrides(
        {"protocol": {"rounds": 3}}, ["protocol.rounds=7", "algorithm.name=fedprox"]
    )
    assert data == {"protocol": {"rounds": 7}, "algorithm": {"name": "fedprox"}}
    with pytest.raises(ConfigError, match="protocol.rounds"):
        apply_overrides({"protocol": {"rounds": 3}}, ["protocol.rounds.x=1"])


def test_resolved_toml_round_trips_with_versions():
    scenario = load_scenario({"algorithm": {"name": "fedprox", "mu": 0.2}, "seed": 9})
    text = resolved_toml(scenario)

    again = load_scenario(__import__("tomllib").loads(text))
    assert again.algorithm.mu == 0.2 and again.seed == 9
    assert "torch" in again.versions and "python" in again.versions and "mecsim" in again.versions
    assert again.model_dump(exclude={"versions"}) == scenario.model_dump(exclude={"versions"})


def test_table5_preset_fixes_spectral_efficiency():
    assert load_scenario({"network": {"preset": "table5"}}).network.spectral_efficiency == 1.0
    assert load_scenario({}).network.spectral_efficiency is None


@pytest.mark.parametrize("path", sorted(Path("scenarios").glob("*.toml")), ids=lambda p: p.stem)
def test_every_shipped_scenario_and_comparison_point_validates(path):
    from mecsim.commands.sweeps import apply_point, axis, expand
    from mecsim.config.scenario import read_scenario_file

    scenario = mecsim.load_scenario(path)
    axes = [axis(k, v) for k, v in scenario.compare.sweep.items()]
    data = read_scenario_file(path)
    for point in expand(axes, scenario.compare.runs, scenario.compare.seeds, scenario.compare.mode):
        mecsim.load_scenario(apply_point(data, point))


def test_a_run_directorys_resolved_scenario_validates_from_anywhere(tiny, tmp_path, monkeypatch):
    import pandas as pd
    import tomli_w

    from mecsim.commands.cli import main

    folder = tmp_path / "study"
    folder.mkdir()
    pd.DataFrame({"distance_m": [120.0, 250.0, 380.0]}).to_csv(folder / "near.csv", index=False)
    pd.DataFrame({"distance_m": [150.0, 300.0]}).to_csv(tmp_path / "set.csv", index=False)
    tiny["clients"] = {"table": "near.csv"}  # relative to the scenario file
    (folder / "s.toml").write_text(tomli_w.dumps(tiny))
    monkeypatch.chdir(tmp_path)
    fast = ["--set", "execution.cost_only=true", "--set", "protocol.rounds=1"]
    assert main(["run", "study/s.toml", *fast, "--out", "a", "--no-progress"]) == 0
    assert (
        main(
            [
                "run",
                "study/s.toml",
                *fast,
                "--set",
                "clients.table=set.csv",
                "--out",
                "b",
                "--no-progress",
            ]
        )
        == 0
    )  # fmt: skip  (relative to the working directory)
    resolved = {run: tomllib.loads((tmp_path / run / "scenario.resolved.toml").read_text())
                for run in ("a", "b")}  # fmt: skip
    assert resolved["a"]["clients"]["table"] == str(folder / "near.csv")
    assert resolved["b"]["clients"]["table"] == str(tmp_path / "set.csv")
    monkeypatch.chdir(folder)  # elsewhere: the resolved scenarios still name their files
    for run in ("a", "b"):
        assert main(["validate", str(tmp_path / run / "scenario.resolved.toml")]) == 0

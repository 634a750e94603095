"""Every shipped scenario's header claims hold: each ``# claim: KEY = VALUE`` line names a
setting the file really has (the COMET header said c = 3 while c = 2 ran)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomllib

from mecsim.analysis.compare import flatten
from mecsim.scenario import load_scenario, read_scenario_file

SCENARIOS = sorted((Path(__file__).resolve().parents[1] / "scenarios").glob("*.toml"))
CLAIM = re.compile(r"^# claim: (?P<key>[\w.]+) = (?P<value>.+)$")


def claims(path: Path) -> list[tuple[str, object]]:
    found = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break  # the header is the leading comment block
        match = CLAIM.match(line)
        if match:
            value = tomllib.loads(f"v = {match['value']}")["v"]
            found.append((match["key"], value))
    return found


@pytest.mark.parametrize("path", SCENARIOS, ids=lambda p: p.stem)
def test_every_claim_of_a_scenario_header_is_its_setting(path):
    stated = claims(path)
    assert stated, f"{path.name}: its header states no '# claim:' line"
    data = read_scenario_file(path)
    data.setdefault("clients", {})
    if data.get("data", {}).get("dataset", "digits").startswith("cifar"):
        data["clients"]["num_samples"] = 50  # cost-only shapes: no CIFAR files needed
        data.setdefault("execution", {})["cost_only"] = True
    settings = flatten(load_scenario(data).model_dump(mode="json"))
    wrong = [
        f"{key}: header says {value!r}, the file gives {settings.get(key)!r}"
        for key, value in stated
        if settings.get(key) != value
    ]
    assert not wrong, wrong


QUICK = re.compile(
    r"^# quick: (?P<sets>(--set \S+ ?)+) -> personalized accuracy (?P<acc>[\d.]+) \+- (?P<tol>[\d.]+)$"
)


def quick_claims() -> list[tuple[Path, list[str], float, float]]:
    found = []
    for path in SCENARIOS:
        for line in path.read_text().splitlines():
            match = QUICK.match(line)
            if match:
                sets = match["sets"].split()[1::2]
                found.append((path, sets, float(match["acc"]), float(match["tol"])))
    return found


@pytest.mark.parametrize(
    "path, overrides, accuracy, tolerance",
    quick_claims(),
    ids=[p.stem for p, *_ in quick_claims()],
)
def test_a_scenarios_quick_run_reaches_the_accuracy_its_header_states(
    path, overrides, accuracy, tolerance
):
    import mecsim

    result = mecsim.run(path, [*overrides, "output.progress=false"], write=False)
    assert result.summary["final_personal_acc"] == pytest.approx(accuracy, abs=tolerance)


def test_every_scenario_on_bundled_data_states_a_quick_run():
    bundled = [p for p in SCENARIOS if "cifar" not in p.stem and "persfl" not in p.stem]
    assert {p for p, *_ in quick_claims()} == set(bundled)

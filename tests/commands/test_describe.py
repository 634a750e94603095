"""Self-documenting settings: did-you-mean for unknown keys, `mecsim describe`, --version."""

from __future__ import annotations

import pytest

import mecsim
from mecsim.commands.cli import main
from mecsim.config.scenario import ScenarioError, load_scenario


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("algorithm.lambda=0.1", "algorithm.lambda: unknown key; did you mean 'lam'?"),
        (
            "clients.bandwith_mhz=3",
            "clients.bandwith_mhz: unknown key; did you mean 'bandwidth_mhz'?",
        ),
        ("algorithm.mu=0.1", "algorithm.mu: is a setting of algorithm 'fedprox'"),
        ("algorithm.zzz=1", "algorithm.zzz: unknown key; known keys here: name, epochs"),
    ],
)
def test_unknown_keys_get_a_suggestion(tiny, override, expected):
    with pytest.raises(ScenarioError) as error:
        load_scenario(tiny, ["algorithm.name=ditto", override])
    assert expected in str(error.value)


def test_describe_lists_every_key_with_type_default_and_range(capsys):
    assert main(["describe", "algorithm", "ditto"]) == 0
    out = capsys.readouterr().out
    lam = next(line for line in out.splitlines() if line.startswith("lam "))
    assert lam.split()[:4] == ["lam", "float", "0.1", ">="]
    assert "pull of the personal model" in lam
    assert "--set algorithm.KEY=VALUE" in out

    assert main(["describe", "protocol", "fedbuff"]) == 0
    assert "buffer_size" in capsys.readouterr().out
    assert main(["describe", "section", "network"]) == 0
    assert "preset" in capsys.readouterr().out


def test_describe_refuses_an_unknown_name(capsys):
    assert main(["describe", "algorithm", "dito"]) == 2
    assert "unknown name 'dito'; allowed: apfl, comet, ditto" in capsys.readouterr().err


def test_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"mecsim {mecsim.__version__}"


def test_the_checked_in_reference_is_current():
    from pathlib import Path

    from mecsim.commands.describe import reference_markdown

    path = Path(__file__).resolve().parents[2] / "docs" / "reference.md"
    assert path.read_text() == reference_markdown(), (
        "docs/reference.md is stale: python -m mecsim.commands.describe > docs/reference.md"
    )


@pytest.mark.parametrize(
    ("kind", "name", "expected"),
    [
        ("model", "cnn-small", "on digits (1, 8, 8): 13,706 parameters"),
        ("dataset", "digits", "input shape (1, 8, 8), 10 classes"),
        ("device", "iot-low", "flops_per_s = 1000000000.0"),
        ("fading", "rician", "rician_k"),
        ("partition", "dirichlet", "alpha               float, default 0.5, > 0"),
    ],
)
def test_registered_names_are_described_with_the_keys_that_tune_them(kind, name, expected):
    from mecsim.commands.describe import render

    text = render(kind, name)
    assert text.startswith(f"{kind} {name}: ") and expected in text


def test_describing_an_unknown_model_lists_the_known_ones(capsys):
    from mecsim.commands.cli import main

    assert main(["describe", "model", "cnn-large"]) == 2
    assert "unknown name 'cnn-large'; allowed: " in capsys.readouterr().err


def _every_settings_model():
    from mecsim.algorithms import ALGORITHMS
    from mecsim.commands.describe import section_models
    from mecsim.protocols import PROTOCOLS
    from mecsim.protocols.registry import protocol_settings

    yield from (("section", path, model, ()) for path, model in section_models().items())
    for name in ALGORITHMS.names():
        yield "algorithm", name, ALGORITHMS.get(name).Settings, ("name",)
    for name in PROTOCOLS.names():
        yield "protocol", name, protocol_settings(name), ("kind",)


def test_every_key_of_every_table_has_a_description_and_is_in_the_reference():
    from pathlib import Path

    from mecsim.commands.describe import settings_rows

    reference = (Path(__file__).resolve().parents[2] / "docs" / "reference.md").read_text()
    undescribed = []
    for kind, name, model, skip in _every_settings_model():
        assert f"## {kind} `{name}`" in reference, (kind, name)
        for row in settings_rows(model, skip):
            if not row["description"].strip():
                undescribed.append(f"{kind} {name}: {row['key']}")
    assert not undescribed, undescribed


@pytest.mark.parametrize("path", ["faults", "network.uplink", "network.downlink", "server"])
def test_describe_section_accepts_every_section_path(path, capsys):
    from mecsim.commands.cli import main

    assert main(["describe", "section", path]) == 0
    out = capsys.readouterr().out
    assert f"keys under [{path}]" in out


def test_every_sections_description_is_whole_sentences(capsys):
    """A docstring's first paragraph, however many lines it spans, never its first line
    alone (``[[devices]]``'s stopped at "usable wherever a device")."""
    from mecsim.commands.cli import main
    from mecsim.commands.describe import section_models

    for name in section_models():
        assert main(["describe", "section", name]) == 0
        first = capsys.readouterr().out.splitlines()[0]
        assert first.rstrip().endswith((".", ")", ".)")), first

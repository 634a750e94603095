"""Plug-ins that return what mecsim cannot send or time (issue 49): one line, exit 2."""

from __future__ import annotations

from pathlib import Path

import pytest

from mecsim.commands.cli import main

QUICKSTART = Path(__file__).resolve().parents[2] / "scenarios" / "quickstart.toml"
FAST = ["execution.cost_only=true", "clients.count=4", "protocol.rounds=1"]


def _plugin(tmp_path: Path, name: str, body: str) -> None:
    (tmp_path / f"{name}.py").write_text(
        "import torch\n"
        "from mecsim.algorithms import ALGORITHMS\n"
        "from mecsim.algorithms.fedavg import FedAvg\n"
        f"@ALGORITHMS.register({name!r})\n"
        "class Plugin(FedAvg):\n" + body
    )


@pytest.mark.parametrize(
    ("name", "body", "says"),
    [
        ("floatupload", "    def upload(self, state, ctx):\n        return {'w': 3.0}\n",
         "Plugin.upload() returned a float as 'w'"),
        ("listupload", "    def upload(self, state, ctx):\n        return [torch.zeros(2)]\n",
         "Plugin.upload() returned a list"),
    ],
)  # fmt: skip
@pytest.mark.parametrize("command", ["run", "check"])
def test_an_upload_that_is_not_tensors_is_one_line(tmp_path, capsys, monkeypatch, name, body,
                                                   says, command):  # fmt: skip
    monkeypatch.chdir(tmp_path)
    name = f"{name}_{command}"  # a module and an algorithm of its own
    _plugin(tmp_path, name, body)
    if command == "run":
        settings = [*FAST, f"algorithm.name={name}"]
        args = ["run", str(QUICKSTART), "--no-progress", "--out", "out"]
        args += [x for s in settings for x in ("--set", s)]
    else:
        args = ["check", name]
    code = main([*args, "--import", name])
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert code in (1, 2) and "Traceback" not in text and "internal error" not in text, text
    assert says in text
    assert not (tmp_path / "out").exists()

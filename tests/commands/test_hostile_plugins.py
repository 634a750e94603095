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


HIERARCHICAL = Path(__file__).resolve().parents[2] / "scenarios" / "multicell_hierfavg.toml"


@pytest.mark.parametrize(
    ("name", "body", "says"),
    [
        ("hier_raises", "    def aggregate(self, *a, **k):\n        raise ValueError('boom')\n",
         "hier_raises.aggregate() line 8 raised ValueError: boom"),
        ("hier_nan", "    def upload(self, state, ctx):\n"
         "        return {k: torch.full_like(v, float('nan'))\n"
         "                for k, v in super().upload(state, ctx).items()}\n",
         "the weights became NaN or infinite"),
    ],
)  # fmt: skip
def test_a_failing_plugin_inside_an_edge_round_is_one_line(tmp_path, capsys, monkeypatch, name,
                                                           body, says):  # fmt: skip
    # an edge round is a SimPy process the cloud waits for: SimPy re-raises its error as a
    # copy built from the error's args (a ConfigError did not rebuild; a plug-in's frame
    # was only in the copy's cause)
    monkeypatch.chdir(tmp_path)
    _plugin(tmp_path, name, "    hierarchical = True\n" + body)
    settings = ["protocol.rounds=2", f"algorithm.name={name}", "algorithm.steps=2"]
    args = ["run", str(HIERARCHICAL), "--no-progress", "--out", "out", "--import", name]
    code = main([*args, *(x for s in settings for x in ("--set", s))])
    err = capsys.readouterr().err
    assert code == 2 and "internal error" not in err and says in err, err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


def test_every_mecsim_error_rebuilds_from_its_args():
    import pickle

    from mecsim.common.errors import (
        ConfigError,
        DatasetNotFoundError,
        ExecutorLost,
        MecsimError,
        UnknownNameError,
    )
    from mecsim.config.validation import Problem, ScenarioError
    from mecsim.engine.checkpoint import CheckpointMismatch

    for error in (
        MecsimError("plain"),
        ConfigError("a.b", "fix it"),
        UnknownNameError("algorithm.name", "algorithm", "fedavgg", ["fedavg", "ditto"]),
        ScenarioError([Problem("a.b", "wrong")]),
        CheckpointMismatch("round 3"),
        DatasetNotFoundError("no files"),
        ExecutorLost("gone"),
    ):
        for copy in (type(error)(*error.args), pickle.loads(pickle.dumps(error))):
            assert type(copy) is type(error) and str(copy) == str(error)

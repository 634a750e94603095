"""Files named by a scenario (issue 49): a byte-order mark, and paths spelled two ways."""

from __future__ import annotations

from pathlib import Path

from mecsim.commands.cli import main

QUICKSTART = Path(__file__).resolve().parents[2] / "scenarios" / "quickstart.toml"


def test_a_scenario_file_starting_with_a_byte_order_mark_is_read(tmp_path, capsys):
    path = tmp_path / "bom.toml"
    path.write_bytes(QUICKSTART.read_text(encoding="utf-8").encode("utf-8-sig"))
    assert main(["validate", str(path)]) == 0
    assert "Invalid statement" not in capsys.readouterr().err


def test_a_mobility_trace_spelled_two_ways_is_one_scenario_to_resume(tmp_path, monkeypatch):
    from mecsim.config.scenario import absolute_file_paths
    from mecsim.engine.checkpoint import scenario_digest

    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    relative = {"clients": {"mobility": {"model": "trace", "trace": "sub/../t.csv"}}}
    absolute = {"clients": {"mobility": {"model": "trace", "trace": str(tmp_path / "t.csv")}}}
    assert scenario_digest(absolute_file_paths(relative)) == scenario_digest(absolute)
    assert relative["clients"]["mobility"]["trace"] == "sub/../t.csv"  # the input untouched


def test_a_plugin_counting_negative_aggregation_flops_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "negflops.py").write_text(
        "from mecsim.algorithms import ALGORITHMS\n"
        "from mecsim.algorithms.fedavg import FedAvg\n"
        "@ALGORITHMS.register('negflops')\n"
        "class NegFlops(FedAvg):\n"
        "    def aggregation_flops(self, server_state, uploads):\n"
        "        return -1e12\n"
    )
    settings = ["execution.cost_only=true", "clients.count=4", "protocol.rounds=1",
                "algorithm.name=negflops"]  # fmt: skip
    args = ["run", str(QUICKSTART), "--no-progress", "--import", "negflops", "--out", "out"]
    code = main([*args, *(x for s in settings for x in ("--set", s))])
    err = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and "Traceback" not in "\n".join(err) and "Negative delay" not in err[-1]
    assert (
        "-1000000000000.0 FLOPs" in err[-1]
        and "'aggregate'" in err[-1]
        and "finite count" in err[-1]
    )
    assert not (tmp_path / "out").exists()

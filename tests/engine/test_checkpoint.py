"""Checkpoint and resume: an interrupted run continued with ``resume=True`` writes the
tables an uninterrupted run writes (all columns but wall-clock ones)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch

import mecsim
import mecsim.runs.runner
from mecsim.commands.cli import main
from mecsim.common.errors import ConfigError
from mecsim.config.scenario import load_scenario
from mecsim.engine.checkpoint import Ledger, checkpoint_path, load_checkpoint, scenario_digest
from mecsim.engine.simulation import Simulation
from mecsim.learning.state import ModelState

WALL = ["wall_s", "wall_train_s"]


def _scenario(tiny: dict[str, Any], **sections: dict[str, Any]) -> dict[str, Any]:
    sc = copy.deepcopy(tiny)
    sc["protocol"] = {"rounds": 5}
    sc["clients"] = {"count": 6, "distance_m": {"dist": "uniform", "low": 100, "high": 400}}
    sc["output"] = {"progress": False, "checkpoint_every": 1, "checkpoint_minutes": 0}
    for name, values in sections.items():
        sc.setdefault(name, {}).update(values)
    return sc


class Stop(BaseException):
    """Stands in for SIGINT/SIGTERM (raised where the run is, like KeyboardInterrupt)."""


def _interrupt_after(monkeypatch: pytest.MonkeyPatch, rounds: int, also: int = 0) -> None:
    """Raise Stop at the end of round ``rounds`` (after its checkpoint), or ``also`` events
    later (mid-round) when ``also`` > 0."""
    original_end_round = Simulation.end_round
    original_event = mecsim.engine.recorder.Recorder.event
    state = {"rows": 0, "events_after": None}

    def end_round(self: Simulation, *args: Any, **kwargs: Any) -> None:
        original_end_round(self, *args, **kwargs)
        state["rows"] += 1
        if state["rows"] == rounds:
            if also == 0:
                raise Stop
            state["events_after"] = 0

    def event(self: Any, *args: Any, **kwargs: Any) -> None:
        original_event(self, *args, **kwargs)
        if state["events_after"] is not None:
            state["events_after"] += 1
            if state["events_after"] == also:
                raise Stop

    monkeypatch.setattr(Simulation, "end_round", end_round)
    monkeypatch.setattr(mecsim.engine.recorder.Recorder, "event", event)


def _interrupted_run(
    monkeypatch: pytest.MonkeyPatch,
    sc: dict[str, Any],
    out: Path,
    rounds: int,
    also: int = 0,
    resume: bool = False,
) -> None:
    """Run ``sc`` into ``out`` and stop it as :func:`_interrupt_after` says."""
    with monkeypatch.context() as patch:
        _interrupt_after(patch, rounds, also)
        with pytest.raises(Stop):
            mecsim.run(copy.deepcopy(sc), out=out, resume=resume)


def _tables(run_dir: Path) -> dict[str, pd.DataFrame]:
    return {
        name: pd.read_parquet(run_dir / f"{name}.parquet")
        for name in ("events", "rounds", "clients")
    }


def _assert_same_tables(a: Path, b: Path) -> None:
    ta, tb = _tables(a), _tables(b)
    pd.testing.assert_frame_equal(ta["events"], tb["events"])
    pd.testing.assert_frame_equal(ta["clients"], tb["clients"])
    pd.testing.assert_frame_equal(ta["rounds"].drop(columns=WALL), tb["rounds"].drop(columns=WALL))


CASES = {
    "compute_and_wait": {"algorithm": {"name": "ditto", "lam": 0.5}},
    "wait_free_window": {"protocol": {"kind": "wait_free"}, "algorithm": {"name": "ditto"}},
    "wait_free_epochs": {
        "protocol": {"kind": "wait_free", "personal_budget": "epochs"},
        "algorithm": {"name": "ditto"},
    },
    "deadline_carry": {
        "protocol": {"kind": "deadline", "deadline_s": 1.0, "late": "carry"},
    },
    "fedasync": {"protocol": {"kind": "fedasync", "concurrency": 3}},
    "fedbuff": {"protocol": {"kind": "fedbuff", "concurrency": 4, "buffer_size": 2}},
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_resume_reproduces_the_uninterrupted_tables(
    tiny: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    sc = _scenario(tiny, **CASES[case])
    whole = mecsim.run(copy.deepcopy(sc), out=tmp_path / "whole").run_dir
    target = tmp_path / "cut"
    _interrupted_run(monkeypatch, sc, target, 2, also=3 if case in ("fedasync", "fedbuff") else 0)
    assert not target.exists()  # nothing at the target
    assert checkpoint_path(target).is_file()
    resumed = mecsim.run(copy.deepcopy(sc), out=target, resume=True).run_dir
    assert resumed is not None and whole is not None
    _assert_same_tables(whole, resumed)
    assert not checkpoint_path(target).exists()  # removed once the run is written


@pytest.mark.parametrize("executor", ["serial", "batched"])
def test_resume_matches_under_each_executor(
    tiny: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, executor: str
) -> None:
    sc = _scenario(tiny, execution={"executor": executor})
    whole = mecsim.run(copy.deepcopy(sc), out=tmp_path / "whole").run_dir
    for cut in (1, 3):  # interrupted twice, resumed twice
        _interrupted_run(monkeypatch, sc, tmp_path / "cut", cut, resume=cut > 1)
    resumed = mecsim.run(copy.deepcopy(sc), out=tmp_path / "cut", resume=True).run_dir
    assert whole is not None and resumed is not None
    _assert_same_tables(whole, resumed)


def test_checkpoint_holds_states_and_the_rows_so_far(
    tiny: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sc = _scenario(tiny)
    _interrupted_run(monkeypatch, sc, tmp_path / "cut", 3)
    digest = scenario_digest(load_scenario(sc).model_dump(mode="json"))
    saved = load_checkpoint(checkpoint_path(tmp_path / "cut"), digest)
    assert saved["rounds_done"] == 3
    assert [row["round"] for row in saved["rounds"]] == [0, 1, 2]
    assert len(saved["client_states"]) == 6
    assert saved["sim_time"] == saved["rounds"][-1]["t_end"]


def test_resume_refuses_a_missing_or_foreign_checkpoint(
    tiny: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sc = _scenario(tiny)
    with pytest.raises(ConfigError, match="--resume.*no checkpoint"):
        mecsim.run(copy.deepcopy(sc), out=tmp_path / "none", resume=True)
    _interrupted_run(monkeypatch, sc, tmp_path / "cut", 2)
    other = copy.deepcopy(sc)
    other["algorithm"]["lr"] = 0.01
    with pytest.raises(ConfigError, match="different scenario"):
        mecsim.run(other, out=tmp_path / "cut", resume=True)
    checkpoint_path(tmp_path / "cut").write_bytes(b"truncated")
    with pytest.raises(ConfigError, match="is not a mecsim checkpoint"):
        mecsim.run(copy.deepcopy(sc), out=tmp_path / "cut", resume=True)
    assert not (tmp_path / "cut").exists()


def test_settings_that_do_not_change_results_may_change_on_resume(
    tiny: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sc = _scenario(tiny)
    whole = mecsim.run(copy.deepcopy(sc), out=tmp_path / "whole").run_dir
    _interrupted_run(monkeypatch, sc, tmp_path / "cut", 2)
    later = copy.deepcopy(sc)
    later["output"]["checkpoint_every"] = 2
    later["execution"] = {"executor": "serial"}
    resumed = mecsim.run(later, out=tmp_path / "cut", resume=True).run_dir
    assert whole is not None and resumed is not None
    _assert_same_tables(whole, resumed)


def test_ledger_forgets_objects_nothing_refers_to() -> None:
    ledger = Ledger()
    kept = ledger.add({"a": 1})
    ledger.add({"b": 2})  # dropped at once
    ledger.add(None)  # never numbered
    assert ledger.count == 2
    assert list(ledger.live()) == [0]
    assert ledger.live()[0] is kept


def test_a_ledger_without_checkpoints_numbers_objects_but_holds_none() -> None:
    ledger = Ledger(keep=False)
    ledger.add({"a": 1})
    ledger.add(None)
    assert ledger.count == 1 and ledger.live() == {}


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGKILL"])
def test_cli_resume_after_a_signal(tiny: dict[str, Any], tmp_path: Path, sig: str) -> None:
    import signal
    import subprocess
    import sys
    import time

    import tomli_w

    sc = _scenario(tiny)
    sc["protocol"]["rounds"] = 20  # the signal lands within ~50 ms of round 1's checkpoint
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(sc))
    target = tmp_path / "run"
    command = [sys.executable, "-m", "mecsim", "run", str(path), "--out", str(target)]
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not checkpoint_path(target).exists() and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(getattr(signal, sig))
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == {"SIGINT": 130, "SIGTERM": 143, "SIGKILL": -9}[sig], err
    assert not target.exists() and checkpoint_path(target).is_file()
    if sig != "SIGKILL":
        assert "--resume" in err and "Traceback" not in err

    done = subprocess.run([*command, "--resume"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "replaying the first" in done.stderr
    whole = mecsim.run(copy.deepcopy(sc), out=tmp_path / "whole").run_dir
    assert whole is not None
    _assert_same_tables(whole, target)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "s.toml", "whole"]


def test_interrupted_while_writing_keeps_the_checkpoint(
    tiny: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sc = _scenario(tiny)
    target = tmp_path / "cut"

    def write_file(path: Path, write: Any) -> None:
        raise Stop

    with monkeypatch.context() as patch:
        patch.setattr(mecsim.runs.runner, "write_file", write_file)
        with pytest.raises(Stop):
            mecsim.run(copy.deepcopy(sc), out=target)
    assert not target.exists() and checkpoint_path(target).is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".cut.checkpoint.pt"]
    whole = mecsim.run(copy.deepcopy(sc), out=tmp_path / "whole").run_dir
    resumed = mecsim.run(copy.deepcopy(sc), out=target, resume=True).run_dir
    assert whole is not None and resumed is not None
    _assert_same_tables(whole, resumed)


# --- a checkpoint cannot run code, and tampering or corruption is refused -------------------
def _checkpoint(tiny: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    sc = _scenario(tiny)
    _interrupted_run(monkeypatch, sc, tmp_path / "cut", 2)
    path = checkpoint_path(tmp_path / "cut")
    digest = scenario_digest(load_scenario(sc).model_dump(mode="json"))
    return sc, path, digest


def _rewrite(path: Path, payload: bytes, **header_changes: Any) -> None:
    """Write ``payload`` with a header whose hash and length match it (a careful forger)."""
    import hashlib
    import json

    from mecsim.engine.checkpoint import MAGIC

    with open(path, "rb") as f:
        f.read(len(MAGIC))
        header = json.loads(f.readline())
    header.update(sha256=hashlib.sha256(payload).hexdigest(), bytes=len(payload))
    header.update(header_changes)
    path.write_bytes(MAGIC + json.dumps(header).encode() + b"\n" + payload)


class _RunsCode:
    def __reduce__(self):
        import os

        return (os.system, ("touch PWNED",))


def test_a_checkpoint_whose_pickle_calls_a_function_is_refused_without_running_it(
    tiny: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    sc, path, digest = _checkpoint(tiny, tmp_path, monkeypatch)
    buffer = io.BytesIO()
    torch.save({"rounds_done": 2, "payload": _RunsCode()}, buffer)
    _rewrite(path, buffer.getvalue())  # even with a matching hash
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError, match="holds objects mecsim does not write"):
        load_checkpoint(path, digest)
    assert not (tmp_path / "PWNED").exists()
    with pytest.raises(ConfigError, match="holds objects mecsim does not write"):
        mecsim.run(copy.deepcopy(sc), out=tmp_path / "cut", resume=True)
    assert not (tmp_path / "PWNED").exists()


def test_an_edited_or_corrupted_checkpoint_is_refused(
    tiny: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mecsim.engine.checkpoint import MAGIC

    sc, path, digest = _checkpoint(tiny, tmp_path, monkeypatch)
    whole = path.read_bytes()
    header_end = whole.index(b"\n", len(MAGIC)) + 1
    payload = bytearray(whole[header_end:])
    payload[len(payload) // 2] ^= 0xFF  # one flipped byte
    path.write_bytes(whole[:header_end] + bytes(payload))
    with pytest.raises(ConfigError, match="corrupted or was edited"):
        load_checkpoint(path, digest)
    path.write_bytes(whole[: len(whole) - 10])  # truncated
    with pytest.raises(ConfigError, match="corrupted or was edited"):
        load_checkpoint(path, digest)
    path.write_bytes(whole)
    assert load_checkpoint(path, digest)["rounds_done"] == 2


def test_a_checkpoint_missing_a_key_or_of_the_wrong_type_is_refused_in_one_line(
    tiny: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    _, path, digest = _checkpoint(tiny, tmp_path, monkeypatch)
    saved = load_checkpoint(path, digest)
    for change, says in (
        ({"log": None}, "lacks 'log'"),
        ({"rounds_done": "2"}, "holds a str as 'rounds_done'"),
        ({"rounds_done": 7}, "inconsistent round counts"),
    ):
        edited = {k: v for k, v in {**saved, **change}.items() if v is not None}
        buffer = io.BytesIO()
        torch.save(edited, buffer)
        _rewrite(path, buffer.getvalue())
        with pytest.raises(ConfigError, match=says):
            load_checkpoint(path, digest)


def test_a_full_disk_at_a_checkpoint_warns_and_the_run_goes_on(
    tiny: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog
) -> None:
    import builtins

    sc = _scenario(tiny)
    real_open = builtins.open

    def full(file, mode="r", *args, **kwargs):
        if "checkpoint.pt.tmp" in str(file) and "w" in mode:
            raise OSError(28, "No space left on device")
        return real_open(file, mode, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", full)
    result = mecsim.run(copy.deepcopy(sc), out=tmp_path / "full")
    monkeypatch.undo()
    assert len(result.rounds) == sc["protocol"]["rounds"]
    warnings = [r for r in caplog.records if "without checkpoints" in r.getMessage()]
    assert len(warnings) == 1 and "No space left" in warnings[0].getMessage()


def test_a_huge_sparse_checkpoint_is_refused_before_its_payload_is_read(
    tiny: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tracemalloc

    _, path, digest = _checkpoint(tiny, tmp_path, monkeypatch)
    with open(path, "r+b") as f:
        f.truncate(1 << 30)  # 1 GiB, mostly a hole: the header's length no longer matches
    tracemalloc.start()
    with pytest.raises(ConfigError, match="length does not match"):
        load_checkpoint(path, digest)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 64 << 20  # read 2.2 GB before


def test_a_signed_checkpoint_refuses_an_edit_whose_hash_was_recomputed(
    tiny: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    monkeypatch.setenv("MECSIM_CHECKPOINT_KEY", "a shared secret")
    _, path, digest = _checkpoint(tiny, tmp_path, monkeypatch)
    saved = load_checkpoint(path, digest)  # signed and checked with the same key
    assert saved["rounds_done"] == 2
    buffer = io.BytesIO()
    torch.save(saved, buffer)
    forged = bytearray(buffer.getvalue())
    forged[len(forged) // 2] ^= 0x01  # a forger's edit, its hash and length recomputed
    _rewrite(path, bytes(forged))
    with pytest.raises(ConfigError, match="not signed with MECSIM_CHECKPOINT_KEY"):
        load_checkpoint(path, digest)
    monkeypatch.delenv("MECSIM_CHECKPOINT_KEY")
    _rewrite(path, buffer.getvalue())  # the genuine payload, its signature now stale
    assert load_checkpoint(path, digest)["rounds_done"] == 2  # without a key: hashed only
    _, unsigned, digest = _checkpoint(tiny, tmp_path / "plain", monkeypatch)
    monkeypatch.setenv("MECSIM_CHECKPOINT_KEY", "a shared secret")
    with pytest.raises(ConfigError, match="not signed"):
        load_checkpoint(unsigned, digest)


@pytest.mark.parametrize("protocol", ["compute_and_wait", "hierarchical"])
def test_nan_weights_in_a_rehashed_checkpoint_are_refused_in_one_line_on_resume(
    tiny: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    protocol: str,
) -> None:
    import io

    import tomli_w

    cells = [{"x_m": 0.0, "y_m": 0.0}, {"x_m": 800.0, "y_m": 0.0}]
    placed = {"count": 6, "x_m": {"dist": "uniform", "low": -200, "high": 1000}, "y_m": 0.0}
    sc = _scenario(tiny, protocol={"kind": protocol}, clients=placed)
    sc["clients"].pop("distance_m")
    sc["network"] = {"cells": cells}
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(sc))
    out = tmp_path / "cut"
    _interrupted_run(monkeypatch, sc, out, 2)
    saved = checkpoint_path(out)
    digest = scenario_digest(load_scenario(path).model_dump(mode="json"))
    state = load_checkpoint(saved, digest)

    def poison(value: Any) -> Any:  # every float tensor of the saved states -> NaN
        if isinstance(value, torch.Tensor) and value.is_floating_point():
            return torch.full_like(value, float("nan"))
        if isinstance(value, ModelState):
            return ModelState(poison(value.params), poison(value.buffers))
        if isinstance(value, dict):
            return {k: poison(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return type(value)(poison(v) for v in value)
        return value

    buffer = io.BytesIO()
    torch.save(poison(state), buffer)
    _rewrite(saved, buffer.getvalue())
    capsys.readouterr()
    assert main(["run", str(path), "--out", str(out), "--resume"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "internal error" not in err[0] and "Traceback" not in err[0], err
    assert "not finite" in err[0] or "NaN" in err[0], err

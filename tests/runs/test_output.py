"""Output safety: claimed targets, overwrite only of mecsim's own directories, strict JSON."""

import json
import os
import stat

import pytest

import mecsim
from mecsim.commands.cli import main
from mecsim.runs.output import MARKER, OWNER, owner_record

COST_ONLY = ["execution.cost_only=true", "clients.num_samples=20", "protocol.rounds=1"]


def run_cli(tiny, tmp_path, *extra: str) -> int:
    import tomli_w

    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(tiny))
    return main(["run", str(path), *extra] + [f"--set={o}" for o in COST_ONLY])


def test_a_default_name_claimed_by_a_live_run_is_never_reused(tiny, tmp_path):
    tiny["output"]["dir"] = str(tmp_path)
    # another live process (our parent) has claimed the default name
    (tmp_path / ".tiny-seed3.claim").write_text(owner_record(os.getppid()))
    result = mecsim.run(tiny, COST_ONLY)

    assert result.run_dir == tmp_path / "tiny-seed3-2"
    assert not (tmp_path / "tiny-seed3").exists()
    assert not (tmp_path / ".tiny-seed3-2.claim").exists()  # released when done


def test_an_explicit_out_claimed_by_a_live_run_is_refused_before_work(tiny, tmp_path, capsys):
    target = tmp_path / "run"
    (tmp_path / ".run.claim").write_text(owner_record(os.getppid()))
    assert run_cli(tiny, tmp_path, "--out", str(target)) == 2
    assert "another running mecsim process" in capsys.readouterr().err
    assert not target.exists()


def test_a_stale_claim_is_taken_over(tiny, tmp_path):
    (tmp_path / ".run.claim").write_text(owner_record(999999999))  # no such process
    result = mecsim.run(tiny, COST_ONLY, out=tmp_path / "run")
    assert (result.run_dir / MARKER).is_file()


def test_overwrite_replaces_only_mecsims_own_directories(tiny, tmp_path, capsys, monkeypatch):
    tiny["output"]["overwrite"] = True
    mine = tmp_path / "mine"
    mecsim.run(tiny, COST_ONLY, out=mine)
    assert run_cli(tiny, tmp_path, "--out", str(mine)) == 0  # a mecsim run: replaced

    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "thesis.tex").write_text("years of work")
    assert run_cli(tiny, tmp_path, "--out", str(theirs)) == 2
    assert (theirs / "thesis.tex").read_text() == "years of work"
    assert "not written by mecsim" in capsys.readouterr().err

    monkeypatch.chdir(mine)  # even a mecsim directory is not replaced while we stand in it
    assert run_cli(tiny, tmp_path, "--out", ".") == 2
    assert (mine / MARKER).is_file()

    a_file = tmp_path / "notes.txt"
    a_file.write_text("keep")
    assert run_cli(tiny, tmp_path, "--out", str(a_file)) == 2
    assert a_file.read_text() == "keep"


def test_summary_is_strict_json_with_null_for_missing_accuracy(tiny, tmp_path):
    result = mecsim.run(tiny, COST_ONLY, out=tmp_path / "run")  # no curve: accuracy is NaN
    text = (result.run_dir / "summary.json").read_text()

    summary = json.loads(text, parse_constant=lambda c: pytest.fail(f"bare {c} in JSON"))
    assert summary["final_generic_acc"] is None


def test_names_cannot_leave_the_output_directory(tiny, tmp_path):
    from mecsim.config.scenario import ScenarioError

    for bad in ({"name": "../../x"}, {"output": {"name": "../x"}}, {"name": "a/b"}):
        with pytest.raises(ScenarioError, match="name"):
            mecsim.load_scenario(tiny | bad)


def test_output_name_names_the_run_directory_and_permissions_follow_the_umask(tiny, tmp_path):
    tiny["output"].update({"dir": str(tmp_path), "name": "chosen"})
    old = os.umask(0o022)
    try:
        result = mecsim.run(tiny, COST_ONLY)
    finally:
        os.umask(old)

    assert result.run_dir == tmp_path / "chosen"
    assert stat.S_IMODE(result.run_dir.stat().st_mode) == 0o755


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ("clients.bandwidth_mhz=nan", "clients.bandwidth_mhz"),
        ("clients.distance_m=inf", "clients.distance_m"),
        ("clients.tx_power_dbm=inf", "clients.tx_power_dbm"),
        ("network.noise_psd_dbm_hz=nan", "network.noise_psd_dbm_hz"),
        ("clients.bandwidth_mhz=1e308", "clients.bandwidth_mhz"),
        ('clients.bandwidth_mhz={dist="lognormal",mu=1000}', "clients.bandwidth_mhz"),
        ('clients.distance_m={dist="uniform",low=1,high=inf}', "clients.distance_m"),
        ("execution.accuracy_curve=[[0,0.1],[5,1.5]]", "execution"),
    ],
)
def test_non_finite_and_absurd_numbers_are_refused_by_validate_and_run(
    tiny, tmp_path, capsys, override, field
):
    import tomli_w

    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(tiny))
    extra = [f"--set={o}" for o in COST_ONLY] + [f"--set={override}"]

    assert main(["validate", str(path), *extra]) == 2
    assert main(["run", str(path), "--out", str(tmp_path / "run"), *extra]) == 2
    err = capsys.readouterr().err
    assert field in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize(
    "overrides, field",
    [
        (["data.partition=natural"], "data.partition"),
        (["clients.count=3000"], "clients.count"),
        (["data.dataset=mnist"], "data.root"),
        (["data.dataset=synthetic", "model.name=cnn-small"], "model.name"),
        (["network.exponent=7.6", "network.fading=rayleigh"], "network.coherence_ms"),
        (["network.exponent=10"], "clients.distance_m"),
        (["network.fading=rayleigh", "network.min_snr_db=60"], "network.min_snr_db"),
        (["network.max_transfer_s=1e-6"], "network.max_transfer_s"),
        (
            ["network.fading=rayleigh", "network.coherence_ms=0.01", "network.exponent=6"],
            "network.coherence_ms",
        ),
    ],
)
def test_validate_runs_every_check_run_makes_before_work(tiny, tmp_path, capsys, overrides, field):
    """Each of these passed ``validate`` and failed only in ``run`` (after loading data,
    or hung in the simulation): both now refuse with the same line, nothing written."""
    import tomli_w

    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(tiny))
    extra = [f"--set={o}" for o in overrides]
    out = str(tmp_path / "run")

    assert main(["validate", str(path), "--out", out, *extra]) == 2
    checked = capsys.readouterr().err
    assert main(["run", str(path), "--out", out, *extra]) == 2
    ran = capsys.readouterr().err
    assert field in checked and checked.strip() == ran.strip().splitlines()[-1].strip()
    assert "Traceback" not in checked + ran
    assert not (tmp_path / "run").exists()


def test_validate_checks_the_output_location(tiny, tmp_path, capsys):
    import tomli_w

    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(tiny))
    (tmp_path / "file").write_text("x")
    assert main(["validate", str(path), "--out", str(tmp_path / "file" / "run")]) == 2
    assert main(["validate", str(path), "--out", "/proc/run"]) == 2
    assert main(["validate", str(path), "--out", str(tmp_path / "file")]) == 2
    assert "output.dir" in capsys.readouterr().err
    assert main(["validate", str(path), "--out", str(tmp_path / "new")]) == 0
    assert not (tmp_path / "new").exists()


def test_sigterm_mid_run_stops_cleanly_and_writes_nothing(endless_file, tmp_path):
    import signal
    import subprocess
    import sys
    import time

    path = endless_file
    target = tmp_path / "run"
    proc = subprocess.Popen(
        [sys.executable, "-m", "mecsim", "run", str(path), "--out", str(target)],
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 60
    while not (tmp_path / ".run.claim").exists() and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)  # well into training
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)

    assert proc.returncode == 143
    assert "interrupted (SIGTERM)" in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.toml"]  # no target, claim, partial


def test_leftovers_of_a_killed_run_are_removed_by_the_next_run(tiny, tmp_path, caplog):
    dead = tmp_path / ".old-run.partial-999999999-abcd"
    dead.mkdir()
    (dead / OWNER).write_text(owner_record(999999999))
    (dead / "events.csv").write_text("half")
    (tmp_path / ".old-run.claim").write_text(owner_record(999999999))
    with caplog.at_level("WARNING", logger="mecsim"):
        mecsim.run(tiny, COST_ONLY, out=tmp_path / "new-run")

    assert not dead.exists() and not (tmp_path / ".old-run.claim").exists()
    assert "left by a mecsim run that was killed" in caplog.text


def test_unreadable_inputs_and_internal_errors_end_in_one_line(tmp_path, capsys, monkeypatch):
    latin = tmp_path / "latin.toml"
    latin.write_bytes('name = "caf\xe9"\n'.encode("latin-1"))
    assert main(["validate", str(latin)]) == 2
    assert "not UTF-8" in capsys.readouterr().err

    assert main(["compare", "--out", str(tmp_path / "c"), "--targets", "x", "nowhere"]) == 2

    import mecsim.runs.runner

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(mecsim.runs.runner, "run", broken)
    assert main(["run", "scenarios/quickstart.toml"]) == 1
    err = capsys.readouterr().err
    assert "internal error" in err and "Traceback" not in err
    saved = err.rsplit("traceback saved to ", 1)[1].strip()
    assert "RuntimeError: boom" in open(saved).read()


def test_a_users_hidden_files_that_look_like_leftovers_are_never_removed(tiny, tmp_path):
    """Names matching mecsim's patterns with a dead pid, but no owner record inside."""
    photos = tmp_path / ".photos.old-999999-keep"
    photos.mkdir()
    (photos / "holiday.jpg").write_text("irreplaceable")
    draft = tmp_path / ".thesis.partial-999998-draft"
    draft.mkdir()
    (draft / "chapter1.tex").write_text("years of work")
    lock = tmp_path / ".lock.claim"
    lock.write_text("999997")
    forged = tmp_path / ".x.partial-999996-y"  # an owner file that is not a record
    forged.mkdir()
    (forged / OWNER).write_text("999996")
    mecsim.run(tiny, COST_ONLY, out=tmp_path / "new-run")
    assert (photos / "holiday.jpg").read_text() == "irreplaceable"
    assert (draft / "chapter1.tex").read_text() == "years of work"
    assert lock.read_text() == "999997" and (forged / OWNER).is_file()


def test_a_claim_that_is_not_mecsims_is_refused_with_one_line_and_kept(tiny, tmp_path, capsys):
    (tmp_path / ".run.claim").write_text("999997")
    assert run_cli(tiny, tmp_path, "--out", str(tmp_path / "run")) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not mecsim's claim" in err[0]
    assert (tmp_path / ".run.claim").read_text() == "999997"


def test_a_claim_whose_pid_now_belongs_to_another_process_is_stale(tiny, tmp_path):
    """The pid is alive (our parent) but started at another time than the claim says."""
    record = json.loads(owner_record(os.getppid()))
    record["started"] = "1"  # not when our parent started
    (tmp_path / ".run.claim").write_text(json.dumps(record))
    result = mecsim.run(tiny, COST_ONLY, out=tmp_path / "run")
    assert (result.run_dir / MARKER).is_file() and not (result.run_dir / OWNER).exists()
    assert not (tmp_path / ".run.claim").exists()  # taken over, then released


def _interrupting_owner_record(monkeypatch):
    """owner_record as a SIGINT lands while mecsim writes it (Ctrl-C at the worst moment)."""
    import signal

    from mecsim.runs import output

    real = output.owner_record

    def interrupted(*args):
        os.kill(os.getpid(), signal.SIGINT)
        return real(*args)

    monkeypatch.setattr(output, "owner_record", interrupted)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C raises, as in Python


@pytest.mark.parametrize("kind", ["claim", "partial"])
def test_an_interrupt_while_proving_a_file_ours_leaves_it_provably_ours(tmp_path, monkeypatch,
                                                                         kind):  # fmt: skip
    # an empty .out.claim blocked its folder until deleted by hand (2 of 15 tries), and a
    # .out.partial-* without its owner record was never cleaned
    from mecsim.runs import output

    run_dir = tmp_path / "out"
    _interrupting_owner_record(monkeypatch)
    with pytest.raises(KeyboardInterrupt):
        if kind == "claim":
            output._try_claim(run_dir)
        else:
            output._owned_temporary(run_dir, "partial")
    monkeypatch.undo()
    left = list(tmp_path.glob(".out.*"))
    assert len(left) == 1
    record = output._read_owner(left[0] if kind == "claim" else left[0] / output.OWNER)
    assert record is not None and record["pid"] == os.getpid()

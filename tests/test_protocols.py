"""Protocols: wait-free vs compute-and-wait, Gantt invariants, async causality, deadlines."""

import numpy as np
import pandas as pd
import pytest
import torch

import mecsim

BASE = [
    "algorithm.steps=4",
    "algorithm.momentum=0.5",
    "protocol.rounds=3",
    "clients.device=iot-low",
]
PFL = BASE + ["algorithm.personal_steps=6"]


@pytest.mark.parametrize("algorithm", ["ditto", "fedrod", "scd"])
def test_wait_free_epochs_matches_compute_and_wait_accuracy_and_is_faster(tiny, algorithm):
    caw = mecsim.run(tiny, PFL + [f"algorithm.name={algorithm}"], write=False)
    wf = mecsim.run(
        tiny, PFL + [f"algorithm.name={algorithm}", "protocol.kind=wait_free"], write=False
    )

    for column in ("generic_acc", "personal_acc"):
        assert wf.rounds[column].tolist() == caw.rounds[column].tolist()
    window = caw.events[caw.events["phase"].isin(["upload", "download"])]
    assert (window["t_end"] > window["t_start"]).any()  # a non-zero communication window
    assert wf.rounds["t_personal"].iloc[-1] < caw.rounds["t_personal"].iloc[-1]
    assert wf.summary["time_split_s"] == pytest.approx(caw.summary["time_split_s"])


def personal_gaps(events):
    """Per (round, client): personal-task start minus generic-task end."""
    generic = events[events["phase"] == "compute:generic"].set_index(["round", "client"])["t_end"]
    personal = events[events["phase"] == "compute:personal"].set_index(["round", "client"])[
        "t_start"
    ]
    return (personal - generic.reindex(personal.index)).to_numpy()


@pytest.mark.parametrize("budget", ["epochs", "window"])
def test_wait_free_client_is_never_idle_with_personal_work_left(tiny, budget):
    result = mecsim.run(
        tiny,
        PFL
        + ["algorithm.name=ditto", "protocol.kind=wait_free", f"protocol.personal_budget={budget}"],
        write=False,
    )

    events = result.events
    gaps = personal_gaps(events)
    assert len(gaps) > 0
    np.testing.assert_allclose(
        gaps, 0.0, atol=1e-12
    )  # personal training starts as the generic ends
    # and the personal task overlaps the upload (it runs during the communication window)
    uploads = events[events["phase"] == "upload"].set_index(["round", "client"])
    personal = events[events["phase"] == "compute:personal"].set_index(["round", "client"])
    both = pd.merge(personal, uploads, left_index=True, right_index=True, suffixes=("_p", "_u"))
    assert (both["t_start_p"] < both["t_end_u"]).all()


def test_compute_and_wait_runs_personal_before_upload(tiny):
    events = mecsim.run(tiny, PFL + ["algorithm.name=ditto"], write=False).events

    for _, rows in events[events["client"] >= 0].groupby(["round", "client"]):
        assert list(rows["phase"]) == ["download", "compute:generic", "compute:personal", "upload"]


def test_window_budget_fits_personal_training_into_the_window(tiny):
    overrides = PFL + [
        "algorithm.name=scd",
        "protocol.kind=wait_free",
        "protocol.personal_budget=window",
        "protocol.max_personal_steps=1000",
    ]
    result = mecsim.run(tiny, overrides, write=False)

    events = result.events
    personal = events[events["phase"] == "compute:personal"].set_index(["round", "client"])
    downloads = events[events["phase"] == "download"].copy()
    downloads["round"] -= 1  # the next model closes the previous round's window
    closes = downloads.set_index(["round", "client"])["t_end"]
    closes = closes.reindex(personal.index).fillna(result.rounds["t_end"].iloc[-1])
    duration = personal["t_end"] - personal["t_start"]
    window = closes - personal["t_start"]
    step = duration / (personal["flops"] / personal["flops"].min())  # same-size steps across rows
    assert (
        duration <= window + 1e-9 + step
    ).all()  # at most one step's FLOP rounding past the window
    assert (duration > 0.5 * window).all()  # and it uses the window


def test_window_budget_caps_steps(tiny):
    base = PFL + [
        "algorithm.name=ditto",
        "protocol.kind=wait_free",
        "protocol.personal_budget=window",
    ]
    capped = mecsim.run(tiny, base + ["protocol.max_personal_steps=2"], write=False).events
    free = mecsim.run(tiny, base + ["protocol.max_personal_steps=1000"], write=False).events

    def personal_flops(e):
        return e[e["phase"] == "compute:personal"]["flops"]

    assert personal_flops(capped).max() < personal_flops(free).max()


def test_wait_free_broadcasts_to_unselected_clients(tiny):
    base = PFL + ["algorithm.name=ditto", "protocol.kind=wait_free", "protocol.participation=0.5"]
    plain = mecsim.run(tiny, base, write=False).events
    broadcast = mecsim.run(tiny, base + ["protocol.broadcast_unselected=true"], write=False).events

    def downloads_per_round(e):
        return e[e["phase"] == "download"].groupby("round")["client"].nunique().tolist()

    assert downloads_per_round(plain) == [2, 2, 2]
    assert downloads_per_round(broadcast) == [4, 4, 4]


@pytest.mark.parametrize("kind", ["fedasync", "fedbuff"])
def test_async_updates_respect_causality(tiny, kind):
    overrides = (
        BASE
        + [
            "algorithm.name=fedavg",
            f"protocol.kind={kind}",
            "protocol.rounds=6",
        ]
        + (["protocol.buffer_size=2"] if kind == "fedbuff" else [])
    )
    result = mecsim.run(tiny, overrides, write=False)

    rounds, events = result.rounds, result.events
    uploads = events[events["phase"] == "upload"].set_index(["round", "client"])["t_end"]
    for _, row in rounds.iterrows():
        arrived = uploads.loc[(row["job"], row["applied_client"])]
        assert row["arrived_at"] == pytest.approx(arrived)
        assert row["t_end"] >= row["arrived_at"]  # applied only after the upload finished
        aggregate = events[
            (events["phase"] == "aggregate") & (events["round"] == row["round"])
        ].iloc[0]
        assert aggregate["t_start"] >= row["arrived_at"] - 1e-12
    # a client starts its next job only after its previous upload arrived
    for _, rows in events[events["client"] >= 0].groupby("client"):
        starts = rows[rows["phase"] == "download"]["t_start"].to_numpy()
        ends = rows[rows["phase"] == "upload"]["t_end"].to_numpy()
        assert all(s >= e - 1e-12 for s, e in zip(starts[1:], ends, strict=False))
    assert (rounds["staleness"] >= 0).all() and rounds["staleness"].max() > 0
    # rounds tile the timeline: each server update starts where the previous one ended
    np.testing.assert_allclose(rounds["t_start"].iloc[1:], rounds["t_end"].iloc[:-1])
    assert rounds["t_start"].iloc[0] == 0.0


def test_fedasync_weight_follows_the_staleness_function(tiny):
    overrides = BASE + [
        "algorithm.name=fedavg",
        "protocol.kind=fedasync",
        "protocol.rounds=6",
        "protocol.staleness=polynomial",
        "protocol.staleness_a=0.5",
        "protocol.mixing=0.6",
    ]
    rounds = mecsim.run(tiny, overrides, write=False).rounds

    np.testing.assert_allclose(rounds["weight"], 0.6 * (rounds["staleness"] + 1) ** -0.5)


@pytest.mark.parametrize("late", ["drop", "carry"])
def test_deadline_aggregates_only_what_arrived_in_time(tiny, late):
    overrides = BASE + [
        "algorithm.name=fedavg",
        "protocol.kind=deadline",
        "protocol.rounds=4",
        f"protocol.late={late}",
    ]
    caw = mecsim.run(
        tiny, BASE + ["algorithm.name=fedavg", "protocol.rounds=4"], write=False
    ).rounds
    deadline = float((caw["t_end"] - caw["t_start"]).median()) * 0.6
    result = mecsim.run(tiny, overrides + [f"protocol.deadline_s={deadline}"], write=False)

    rounds = result.rounds
    assert (rounds["t_end"] - rounds["t_start"] <= deadline + 1e-6).all() or (
        rounds["late"] == 0
    ).any()
    assert rounds["late"].sum() > 0
    assert (rounds["num_selected"] <= 4).all()


def test_compare_cli_prints_speedups(tmp_path, tiny, capsys):
    import tomli_w

    from mecsim.cli import main

    tiny["algorithm"].update({"name": "ditto", "steps": 4, "personal_steps": 6})
    tiny["clients"]["device"] = "iot-low"
    tiny["compare"] = {
        "sweep": {"algorithm.name": ["ditto"], "protocol.kind": ["compute_and_wait", "wait_free"]},
        "targets": [0.2],
    }
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(tiny))

    assert main(["compare", "--scenario", str(path), "--out", str(tmp_path / "cmp")]) == 0
    out = capsys.readouterr().out
    assert "ditto / wait_free/epochs" in out and "pm_speedup_0.2" in out
    table = pd.read_csv(tmp_path / "cmp" / "comparison" / "compare.csv")
    baseline = table[table["protocol"] == "compute_and_wait"]
    assert baseline["pm_speedup_0.2"].fillna(1.0).eq(1.0).all()
    for name in ("compare.md", "curves.png", "gantt.png"):
        assert (tmp_path / "cmp" / "comparison" / name).is_file()


@pytest.mark.parametrize("kind", ["wait_free", "fedasync", "fedbuff"])
def test_protocols_that_need_uploads_reject_local_training(tiny, kind):
    from mecsim.scenario import ScenarioError

    with pytest.raises(ScenarioError, match=f"'local' does not run under '{kind}'"):
        mecsim.run(tiny, ["algorithm.name=local", f"protocol.kind={kind}"], write=False)


def test_a_key_of_another_protocol_names_the_protocol_it_belongs_to(tiny):
    from mecsim.scenario import ScenarioError

    with pytest.raises(ScenarioError, match="buffer_size: is a setting of protocol 'fedbuff'"):
        mecsim.load_scenario(tiny, ["protocol.kind=fedasync", "protocol.buffer_size=3"])


@pytest.mark.parametrize(
    "protocol",
    [
        ["protocol.kind=compute_and_wait"],
        ["protocol.kind=wait_free", "protocol.personal_budget=epochs"],
        ["protocol.kind=wait_free", "protocol.personal_budget=window"],
    ],
)
def test_dittos_lambda_shapes_the_personal_model_under_every_budget(tiny, protocol):
    """A deferred (window) task sees the payload of its round, so lambda is never lost."""

    def personal(lam):
        result = mecsim.run(
            tiny, PFL + ["algorithm.name=ditto", f"algorithm.lam={lam}"] + protocol, write=False
        )
        return result.client_states[0]["personal"].params

    free, pulled = personal(0.0), personal(50.0)
    assert any(not torch.equal(free[k], pulled[k]) for k in free)

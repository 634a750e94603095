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
        tiny,
        PFL
        + [
            f"algorithm.name={algorithm}",
            "protocol.kind=wait_free",
            "protocol.personal_budget=epochs",
        ],
        write=False,
    )

    for column in ("generic_acc", "personal_acc"):
        assert wf.rounds[column].tolist() == caw.rounds[column].tolist()
    window = caw.events[caw.events["phase"].isin(["upload", "download"])]
    assert (window["t_end"] > window["t_start"]).any()  # a non-zero communication window
    assert wf.rounds["t_personal"].iloc[-1] < caw.rounds["t_personal"].iloc[-1]
    # the last round ends with its aggregation; personal work after it shows in t_personal
    last_aggregate = wf.events[wf.events["phase"] == "aggregate"]["t_end"].max()
    assert wf.rounds["t_end"].iloc[-1] == last_aggregate
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
    uploads = events[events["phase"] == "upload"].set_index(["job", "client"])["t_end"]
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


@pytest.mark.parametrize(
    ("function", "keys", "expected"),
    [
        ("polynomial", ["protocol.polynomial_a=0.3"], lambda s: (s + 1) ** -0.3),
        (
            "hinge",
            ["protocol.hinge_a=2", "protocol.hinge_b=1"],
            lambda s: np.where(s <= 1, 1.0, 1.0 / (2 * (s - 1) + 1)),
        ),
    ],
)
def test_fedasync_weight_follows_the_staleness_function(tiny, function, keys, expected):
    overrides = BASE + [
        "algorithm.name=fedavg",
        "clients.count=6",
        "protocol.concurrency=5",
        "protocol.kind=fedasync",
        "protocol.rounds=8",
        f"protocol.staleness={function}",
        "protocol.mixing=0.6",
        *keys,
    ]
    rounds = mecsim.run(tiny, overrides, write=False).rounds

    assert rounds["staleness"].max() > 1  # the hinge's bend is exercised
    np.testing.assert_allclose(rounds["weight"], 0.6 * expected(rounds["staleness"].to_numpy()))


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

    from mecsim.commands.cli import main

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
    assert "ditto / wait_free/window" in out and "pm_speedup_0.2" in out
    table = pd.read_csv(tmp_path / "cmp" / "comparison" / "compare.csv")
    baseline = table[table["protocol"] == "compute_and_wait"]
    assert baseline["pm_speedup_0.2"].fillna(1.0).eq(1.0).all()
    for name in ("compare.md", "curves.png", "gantt.png"):
        assert (tmp_path / "cmp" / "comparison" / name).is_file()


def test_compare_runs_points_that_differ_in_several_keys(tmp_path, tiny):
    import tomli_w

    from mecsim.commands.cli import main

    tiny["algorithm"].update({"name": "ditto", "steps": 2, "personal_steps": 2})
    tiny["compare"] = {
        "runs": [
            {"protocol.kind": "compute_and_wait"},
            {"protocol.kind": "fedbuff", "protocol.rounds": 4, "protocol.buffer_size": 2},
        ],
        "targets": [0.2],
    }
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(tiny))

    assert main(["compare", "--scenario", str(path), "--out", str(tmp_path / "cmp")]) == 0
    runs = sorted(p.name for p in (tmp_path / "cmp" / "runs").iterdir())
    assert runs == ["protocol=compute_and_wait", "protocol=fedbuff__rounds=4__buffer_size=2"]
    fedbuff = pd.read_csv(tmp_path / "cmp" / "runs" / runs[1] / "rounds.csv")
    assert len(fedbuff) == 4 and (fedbuff["buffered"] == 2).all()

    # a bad point stops the sweep before any run starts
    tiny["compare"]["runs"].append({"protocol.kind": "fedbuff", "protocol.buffer_size": 0})
    path.write_text(tomli_w.dumps(tiny))
    assert main(["compare", "--scenario", str(path), "--out", str(tmp_path / "bad")]) == 2
    assert not (tmp_path / "bad").exists()


@pytest.mark.parametrize("kind", ["wait_free", "fedasync", "fedbuff"])
def test_protocols_that_need_uploads_reject_local_training(tiny, kind):
    from mecsim.config.scenario import ScenarioError

    with pytest.raises(ScenarioError, match=f"'local' does not run under '{kind}'"):
        mecsim.run(tiny, ["algorithm.name=local", f"protocol.kind={kind}"], write=False)


def test_a_key_of_another_protocol_names_the_protocol_it_belongs_to(tiny):
    from mecsim.config.scenario import ScenarioError

    with pytest.raises(ScenarioError, match="buffer_size: is a setting of protocol 'fedbuff'"):
        mecsim.load_scenario(tiny, ["protocol.kind=fedasync", "protocol.buffer_size=3"])


@pytest.mark.parametrize(
    "protocol",
    [
        ["protocol.kind=compute_and_wait"],
        ["protocol.kind=wait_free", "protocol.personal_budget=epochs"],
        ["protocol.kind=wait_free", "protocol.personal_budget=window"],
        ["protocol.kind=wait_free", "protocol.personal_budget=window_uncapped"],
        ["protocol.kind=deadline", "protocol.deadline_s=1000"],
        ["protocol.kind=fedasync", "protocol.concurrency=2"],
        ["protocol.kind=fedbuff", "protocol.concurrency=2", "protocol.buffer_size=2"],
    ],
    ids=lambda p: "-".join(k.split("=")[1] for k in p[:2]),
)
def test_dittos_lambda_shapes_the_personal_model_under_every_protocol(tiny, protocol):
    """A deferred (window) task sees the payload of its round, so lambda is never lost."""

    def personal(lam):
        result = mecsim.run(
            tiny, PFL + ["algorithm.name=ditto", f"algorithm.lam={lam}"] + protocol, write=False
        )
        return result.client_states[0]["personal"].params

    free, pulled = personal(0.0), personal(50.0)
    assert any(not torch.equal(free[k], pulled[k]) for k in free)


def next_round_delays(events):
    """Per (round, client), round >= 1: first compute start minus the end of that round's download."""
    clients = events[events["client"] >= 0]
    downloads = clients[clients["phase"] == "download"].set_index(["round", "client"])["t_end"]
    computes = clients[clients["phase"] == "compute:generic"].set_index(["round", "client"])
    delays = computes["t_start"] - downloads.reindex(computes.index)
    return delays[delays.index.get_level_values("round") >= 1].to_numpy()


def test_default_wait_free_budget_never_delays_the_next_round(tiny):
    """Personal work long next to the window (fast, equal links; 40 personal steps): the default
    budget cuts it at the next model's arrival; ``epochs`` runs it all and starts late."""
    base = BASE + [
        "algorithm.name=ditto",
        "algorithm.personal_steps=40",
        "protocol.kind=wait_free",
        "clients.bandwidth_mhz=50",
        "clients.distance_m=100",
    ]
    default = mecsim.run(tiny, base, write=False)
    epochs = mecsim.run(tiny, base + ["protocol.personal_budget=epochs"], write=False)

    assert default.scenario.protocol.personal_budget == "window"
    np.testing.assert_allclose(next_round_delays(default.events), 0.0, atol=1e-12)
    assert next_round_delays(epochs.events).max() > 0  # the setup does delay with fixed epochs
    personal = default.events[default.events["phase"] == "compute:personal"]
    assert (personal["flops"] > 0).all()  # and the window still trains the personal model


def test_window_budget_is_capped_at_the_personal_tasks_epochs(tiny):
    """Slow links, a long window: the default budget stops at E_p epochs of steps, the
    uncapped window trains on."""
    base = PFL + [
        "algorithm.name=ditto",
        "protocol.kind=wait_free",
        "clients.bandwidth_mhz=0.2",
    ]
    capped = mecsim.run(tiny, base, write=False).events
    uncapped = mecsim.run(
        tiny, base + ["protocol.personal_budget=window_uncapped"], write=False
    ).events
    fixed = mecsim.run(tiny, base + ["protocol.personal_budget=epochs"], write=False).events

    def personal_flops(e):
        p = e[(e["phase"] == "compute:personal") & (e["round"] < e["round"].max())]
        return p.set_index(["round", "client"])["flops"].sort_index()

    # 6 personal steps (algorithm.personal_steps) per window, exactly the fixed budget's work
    pd.testing.assert_series_equal(personal_flops(capped), personal_flops(fixed))
    assert (personal_flops(uncapped) > personal_flops(capped)).all()


def test_window_budget_evaluates_a_round_once_its_window_has_closed(tiny):
    """Long windows (slow links): each window fits the personal task's E_p, so the window
    budget trains the same personalized models as compute-and-wait, round for round; the
    row's personalized accuracy includes its window's training, which ended before the
    aggregation did (so t_personal is t_end)."""
    base = PFL + ["algorithm.name=ditto", "clients.bandwidth_mhz=0.2"]
    caw = mecsim.run(tiny, base, write=False).rounds
    wf = mecsim.run(tiny, base + ["protocol.kind=wait_free"], write=False).rounds

    assert wf["personal_acc"].tolist()[:-1] == caw["personal_acc"].tolist()[:-1]
    assert wf["t_personal"].tolist() == wf["t_end"].tolist()
    assert (wf["t_end"] < caw["t_end"]).all()


def test_fedasync_proximal_term_pulls_toward_the_received_model_and_is_metered(tiny):
    base = BASE + ["algorithm.name=fedavg", "protocol.kind=fedasync", "protocol.concurrency=2"]
    plain = mecsim.run(tiny, base, write=False)
    prox = mecsim.run(tiny, base + ["protocol.rho=5.0"], write=False)

    assert plain.rounds["applied_client"].tolist() == prox.rounds["applied_client"].tolist()
    assert not torch.equal(
        plain.server_state["global"].params["classifier.2.weight"],
        prox.server_state["global"].params["classifier.2.weight"],
    )
    # metered: 7 FLOPs per anchored weight and step on top of the plain task (forward
    # subtract, square, sum; backward pow, x2, x grad; the gradient sum), 4 steps
    flops = [
        r.events[r.events["phase"] == "compute:local"]["flops"].to_numpy() for r in (plain, prox)
    ]
    params = plain.clients["num_params"].iloc[0]
    np.testing.assert_array_equal(flops[1] - flops[0], 7 * params * 4)

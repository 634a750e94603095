"""End-to-end runs of the tiny scenario: timing identities, outputs, determinism."""

import json
import math

import numpy as np
import pandas as pd
import pytest

import mecsim
from mecsim.common.rng import derive_seed
from mecsim.learning.models import build_model
from mecsim.learning.state import ModelState, payload_nbytes

OUTPUT_FILES = {
    ".mecsim-run",
    "scenario.resolved.toml",
    "summary.json",
    "report.md",
    "accuracy.png",
    "accuracy.svg",
    *(
        f"{t}.{ext}"
        for t in ("events", "rounds", "clients", "decisions")
        for ext in ("parquet", "csv")
    ),
}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory, tiny_module):
    out = tmp_path_factory.mktemp("runs") / "tiny"
    return mecsim.run(tiny_module, out=out)


def test_run_directory_has_every_file(tiny_run):
    assert {p.name for p in tiny_run.run_dir.iterdir()} == OUTPUT_FILES
    summary = json.loads((tiny_run.run_dir / "summary.json").read_text())
    assert summary["rounds"] == 2
    report = (tiny_run.run_dir / "report.md").read_text()
    for phase in ("upload", "download", "client compute", "server"):
        assert f"| {phase} |" in report
    assert pd.read_parquet(tiny_run.run_dir / "events.parquet").equals(tiny_run.events)


def test_upload_duration_is_bits_over_rate(tiny_run):
    uploads = tiny_run.events[tiny_run.events["phase"] == "upload"]

    assert len(uploads) == 2 * 4
    np.testing.assert_allclose(
        uploads["t_end"] - uploads["t_start"], 8 * uploads["bytes"] / uploads["rate_bps"], rtol=1e-9
    )


def test_download_duration_is_bits_over_rate(tiny_run):
    downloads = tiny_run.events[tiny_run.events["phase"] == "download"]

    assert len(downloads) == 2 * 4
    np.testing.assert_allclose(
        downloads["t_end"] - downloads["t_start"],
        8 * downloads["bytes"] / downloads["rate_bps"],
        rtol=1e-9,
    )


def test_compute_duration_is_metered_flops_over_device_rate(tiny_run):
    compute = tiny_run.events[tiny_run.events["phase"] == "compute:local"]
    device_rate = compute["client"].map(tiny_run.clients.set_index("client")["device_flops_per_s"])

    assert (compute["flops"] > 0).all()
    np.testing.assert_allclose(
        compute["t_end"] - compute["t_start"], compute["flops"] / device_rate, rtol=1e-9
    )


# cnn-small on 1x8x8 digits, forward FLOPs per sample and layer, by hand (2 x MACs):
CONV1 = 2 * (8 * 8 * 16) * (1 * 3 * 3)  # 18,432
CONV2 = 2 * (4 * 4 * 32) * (16 * 3 * 3)  # 147,456
FC1 = 2 * (32 * 2 * 2) * 64  # 16,384
HEAD = 2 * 64 * 10  # 1,280
FORWARD = CONV1 + CONV2 + FC1 + HEAD


def test_compute_flops_are_forward_plus_the_backward_autograd_runs(tiny_run):
    compute = tiny_run.events[tiny_run.events["phase"] == "compute:local"]

    # forward, weight gradients of every layer, input gradients of all but the first
    per_sample = FORWARD + FORWARD + (FORWARD - CONV1)
    assert (compute["flops"] == 3 * 16 * per_sample).all()  # 3 steps of batch 16


def test_a_head_only_task_costs_forward_plus_head_backward(tiny):
    result = mecsim.run(tiny, ["algorithm.name=fedrod", "algorithm.personal_steps=2"], write=False)
    personal = result.events[result.events["phase"] == "compute:personal"]

    assert len(personal) > 0
    assert (personal["flops"] == 2 * 16 * (FORWARD + HEAD)).all()


def test_payload_bytes_are_tensor_nbytes(tiny_run):
    model = build_model("cnn-small", input_shape=(1, 8, 8), num_classes=10, seed=0)
    expected = payload_nbytes(ModelState.of(model).to_payload())
    moved = tiny_run.events[tiny_run.events["phase"].isin(["upload", "download"])]

    assert (moved["bytes"] == expected).all()
    assert (tiny_run.rounds["bytes_up"] == 4 * expected).all()


def test_round_ends_when_last_upload_arrives_and_server_aggregates(tiny_run):
    events, rounds = tiny_run.events, tiny_run.rounds
    for r, row in rounds.set_index("round").iterrows():
        last_upload = events[(events["round"] == r) & (events["phase"] == "upload")]["t_end"].max()
        aggregate = events[(events["round"] == r) & (events["phase"] == "aggregate")].iloc[0]
        assert aggregate["t_start"] == pytest.approx(last_upload)
        assert row["t_end"] == pytest.approx(aggregate["t_end"])


def test_clients_do_work_in_order_download_compute_upload(tiny_run):
    for _, rows in tiny_run.events[tiny_run.events["client"] >= 0].groupby(["round", "client"]):
        assert list(rows["phase"]) == ["download", "compute:local", "upload"]
        assert (rows["t_start"].to_numpy()[1:] >= rows["t_end"].to_numpy()[:-1] - 1e-12).all()


def test_same_scenario_and_seed_give_identical_tables(tiny):
    a = mecsim.run(tiny, write=False)
    b = mecsim.run(tiny, write=False)

    pd.testing.assert_frame_equal(a.events, b.events)
    pd.testing.assert_frame_equal(a.clients, b.clients)
    pd.testing.assert_frame_equal(
        a.rounds.drop(columns=["wall_s", "wall_train_s"]),
        b.rounds.drop(columns=["wall_s", "wall_train_s"]),
    )


def test_a_different_seed_changes_the_run(tiny):
    a = mecsim.run(tiny, write=False)
    b = mecsim.run(tiny, ["seed=4"], write=False)

    assert not a.clients["distance_m"].equals(b.clients["distance_m"])


@pytest.mark.parametrize("name", ["local", "fedavg", "fedprox"])
def test_each_algorithm_runs_and_learns(tiny, name):
    overrides = [
        f"algorithm.name={name}",
        "algorithm.steps=20",
        "algorithm.momentum=0.9",
        "protocol.rounds=3",
    ]
    result = mecsim.run(tiny, overrides, write=False)

    rounds = result.rounds
    assert len(rounds) == 3
    assert rounds["personal_acc"].iloc[-1] > 0.5  # 10 classes: chance is 0.1
    if name == "local":
        assert math.isnan(rounds["generic_acc"].iloc[-1])
        assert result.events["bytes"].sum() == 0  # nothing is communicated
    else:
        assert rounds["generic_acc"].iloc[-1] > 0.5
        assert (rounds["bytes_up"] > 0).all()


def test_fedprox_differs_from_fedavg_only_through_mu(tiny):
    def drift(result):
        final = result.server_state["global"].params
        initial = build_model(
            "cnn-small", input_shape=(1, 8, 8), num_classes=10, seed=derive_seed(3, "init")
        )
        return sum(
            float((final[k] - p).pow(2).sum())
            for k, p in initial.state_dict().items()
            if k in final
        )

    fedavg = mecsim.run(tiny, write=False)
    prox0 = mecsim.run(tiny, ["algorithm.name=fedprox", "algorithm.mu=0"], write=False)
    prox = mecsim.run(tiny, ["algorithm.name=fedprox", "algorithm.mu=5.0"], write=False)

    assert prox0.rounds["generic_acc"].tolist() == fedavg.rounds["generic_acc"].tolist()
    assert drift(prox0) == pytest.approx(drift(fedavg), rel=1e-6)
    assert drift(prox) < 0.9 * drift(fedavg)  # the proximal term holds clients near w_G


def test_partial_participation_selects_the_requested_count(tiny):
    result = mecsim.run(
        tiny, ["clients.count=6", "protocol.participation=0.5", "protocol.rounds=3"], write=False
    )

    assert (result.rounds["num_selected"] == 3).all()
    uploads = result.events[result.events["phase"] == "upload"]
    assert uploads.groupby("round")["client"].nunique().tolist() == [3, 3, 3]
    assert uploads["client"].nunique() > 3  # different clients in different rounds


def test_eval_every_skips_rounds_but_not_the_last(tiny):
    result = mecsim.run(tiny, ["protocol.rounds=5", "protocol.eval_every=2"], write=False)

    evaluated = result.rounds["generic_acc"].notna().tolist()
    assert evaluated == [False, True, False, True, True]


def test_unicast_downlink_shares_the_server_bandwidth(tiny):
    broadcast = mecsim.run(tiny, ["protocol.rounds=1"], write=False).events
    unicast = mecsim.run(
        tiny, ["protocol.rounds=1", "network.downlink.mode=unicast"], write=False
    ).events

    down_b = broadcast[broadcast["phase"] == "download"].set_index("client")
    down_u = unicast[unicast["phase"] == "download"].set_index("client")
    # each receiver gets at most the full bandwidth, so unicast is never faster than broadcast
    assert ((down_u["t_end"] - down_u["t_start"]) > (down_b["t_end"] - down_b["t_start"])).all()
    sends = unicast[unicast["phase"] == "downlink-send"]  # one transmission per receiver
    assert len(sends) == len(down_u) and sends["bytes"].sum() == down_u["bytes"].sum()
    assert sends["t_end"].max() == pytest.approx(down_u["t_end"].max())


def test_rayleigh_fading_is_drawn_per_transmission_and_reproducible(tiny):
    overrides = ["network.fading=rayleigh", "protocol.rounds=3"]
    a = mecsim.run(tiny, overrides, write=False).events
    b = mecsim.run(tiny, overrides, write=False).events

    uploads = a[(a["phase"] == "upload") & (a["client"] == 0)]
    assert uploads["rate_bps"].nunique() == 3
    pd.testing.assert_frame_equal(a, b)


def test_table5_preset_sends_one_bit_per_hertz(tiny):
    result = mecsim.run(tiny, ["protocol.rounds=1", "network.preset=table5"], write=False)

    uploads = result.events[result.events["phase"] == "upload"].set_index("client")
    bandwidth_hz = result.clients.set_index("client")["bandwidth_mhz"] * 1e6
    np.testing.assert_allclose(uploads["rate_bps"], bandwidth_hz.loc[uploads.index], rtol=1e-12)


def test_interference_in_dbm_lowers_the_rate(tiny):
    clean = mecsim.run(tiny, ["protocol.rounds=1"], write=False).events
    noisy = mecsim.run(
        tiny, ["protocol.rounds=1", "network.uplink.interference_dbm=-90"], write=False
    ).events

    rate = lambda e: e[e["phase"] == "upload"]["rate_bps"].to_numpy()  # noqa: E731
    assert (rate(noisy) < rate(clean)).all()


def test_clients_without_a_local_test_set_are_left_out_with_a_warning(tiny, caplog):
    """200 one-sample requests, ties to the lowest class: only 36 clients get a test sample."""
    overrides = [
        "clients.count=200",
        "data.partition=iid",
        "data.local_test_fraction=0.1",
        "algorithm.name=local",
        "algorithm.steps=1",
        "protocol.rounds=1",
    ]
    with caplog.at_level("WARNING", logger="mecsim"):
        result = mecsim.run(tiny, overrides, write=False)

    empty = result.clients["num_test"] == 0
    assert 0 < empty.sum() < 200
    assert result.summary["clients_without_local_test"] == empty.sum()
    assert "empty local test set" in caplog.text
    acc = result.clients["final_personal_acc"]
    assert acc[empty].isna().all() and acc[~empty].notna().all()
    weights = result.clients["num_train"][~empty]
    expected = (acc[~empty] * weights).sum() / weights.sum()
    assert result.rounds["personal_acc"].iloc[-1] == pytest.approx(expected)


def test_summary_reports_dirichlet_redraws(tiny):
    overrides = ["clients.count=20", "data.alpha=0.1", "data.min_samples=10", "protocol.rounds=1"]
    overrides += ["execution.cost_only=true"]
    strict = mecsim.run(tiny, overrides, write=False).summary["partition_redraws"]
    loose = mecsim.run(tiny, overrides[:2] + ["protocol.rounds=1"], write=False)

    assert strict > 0 and loose.summary["partition_redraws"] == 0


@pytest.mark.parametrize(
    ("overrides", "source", "note"),
    [
        ([], "measured", None),
        (
            ["execution.cost_only=true", "execution.accuracy_curve=[[0, 0.1], [2, 0.5]]"],
            "assumed",
            "accuracy: **assumed**",
        ),
        (["execution.cost_only=true"], "none", "accuracy: none (cost-only run"),
    ],
)
def test_the_report_says_where_accuracy_comes_from(tiny, tmp_path, overrides, source, note):
    result = mecsim.run(tiny, overrides, out=tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["accuracy_source"] == result.summary["accuracy_source"] == source
    report = (tmp_path / "run" / "report.md").read_text()
    if note is None:
        assert "accuracy: **assumed**" not in report and "accuracy: none" not in report
    else:
        assert note in report
    # no accuracy, no plot of it
    assert (tmp_path / "run" / "accuracy.png").exists() == (source != "none")


def test_output_figures_false_skips_the_accuracy_plot_and_changes_no_table(tiny, tmp_path):
    drawn = mecsim.run(tiny, [], out=tmp_path / "drawn")
    bare = mecsim.run(tiny, ["output.figures=false"], out=tmp_path / "bare")
    assert (tmp_path / "drawn" / "accuracy.png").is_file()
    assert not list((tmp_path / "bare").glob("accuracy.*"))
    pd.testing.assert_frame_equal(drawn.events, bare.events)

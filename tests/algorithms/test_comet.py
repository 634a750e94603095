"""COMET: bytes, clustering, codistillation and heterogeneous clients (paper 000)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

import mecsim
from mecsim.algorithms.clustering import kmeans, kmeans_flops
from mecsim.algorithms.comet import nearest_centroid
from mecsim.learning.devices import DEVICES

PUBLIC = 40
CLASSES = 10
COMET = [
    "algorithm.name=comet",
    f"data.public_size={PUBLIC}",
    "algorithm.steps=4",
    "algorithm.batch_size=8",
    "algorithm.public_batch_size=8",
    "algorithm.lr=0.05",
    "protocol.rounds=3",
    "clients.count=6",
    "clients.device=phone-mid",
]


@pytest.fixture(scope="module")
def comet_run(tiny_module):
    return mecsim.run(tiny_module, [*COMET, "algorithm.clusters=2"], write=False)


def test_logits_up_and_centroids_down_are_exactly_public_times_classes(comet_run):
    events = comet_run.events
    uploads = events[events["phase"] == "upload"]
    assert len(uploads) == 6 * 3
    assert (uploads["bytes"] == PUBLIC * CLASSES * 4).all()
    downloads = events[events["phase"] == "download"]
    assert len(downloads) == 6 * 2  # round 0 has no centroids to send
    assert (downloads["bytes"] == 2 * PUBLIC * CLASSES * 4).all()
    public = events[events["phase"] == "download:public"]
    assert sorted(public["client"]) == list(range(6))  # once per client, before round 0
    assert (public["bytes"] == PUBLIC * 64 * 4).all()  # unlabeled: inputs only


def test_kmeans_is_metered_in_closed_form(comet_run):
    aggregate = comet_run.events.query("phase == 'aggregate'")
    m, d, c, iters = 6, PUBLIC * CLASSES, 2, 30
    by_hand = 3 * m * d * c + iters * (3 * m * c * d + m * d + c * d)
    assert (aggregate["flops"] == by_hand).all()
    assert by_hand == kmeans_flops(m, d, c, iters)
    server = DEVICES.get("edge-server").flops_per_s
    np.testing.assert_allclose(aggregate["t_end"] - aggregate["t_start"], by_hand / server)


def test_round_zero_trains_privately_then_clients_probe_and_codistill(comet_run):
    events = comet_run.events
    phases = events[events["phase"].str.startswith("compute:")].groupby("round")["phase"]
    assert set(phases.get_group(0)) == {"compute:local", "compute:logits"}
    assert set(phases.get_group(1)) == {"compute:probe", "compute:codistill", "compute:logits"}
    probe = events[events["phase"] == "compute:probe"]
    logits = events[events["phase"] == "compute:logits"]
    assert probe["flops"].iloc[0] == logits["flops"].iloc[0]  # both: forward over P
    codistill = events[events["phase"] == "compute:codistill"]["flops"].iloc[0]
    local = events[events["phase"] == "compute:local"]["flops"].iloc[0]
    assert codistill > local  # every step also runs the public batch


def test_one_cluster_sends_the_mean_of_the_uploaded_logits(tiny):
    result = mecsim.run(tiny, [*COMET, "algorithm.clusters=1", "protocol.rounds=1"], write=False)
    centroids = result.server_state["centroids"]
    assert centroids.shape == (1, PUBLIC, CLASSES)
    torch.testing.assert_close(centroids.sum(dim=-1), torch.ones(1, PUBLIC))  # probabilities
    assert not result.events["phase"].eq("compute:probe").any()  # c = 1: nothing to choose


def test_the_codistillation_term_changes_the_models(tiny):
    with_term = mecsim.run(tiny, [*COMET, "algorithm.lam=5"], write=False)
    without = mecsim.run(tiny, [*COMET, "algorithm.lam=0"], write=False)
    pd.testing.assert_frame_equal(with_term.events, without.events)  # same work and timing
    a = with_term.client_states[0]["local"].params
    b = without.client_states[0]["local"].params
    assert any(not torch.equal(a[k], b[k]) for k in a)


def test_kmeans_finds_separated_clusters_reproducibly():
    rng = np.random.default_rng(0)
    points = np.concatenate([rng.normal(0, 0.1, (5, 3)), rng.normal(10, 0.1, (4, 3))])
    a, assign = kmeans(points, 2, 10, np.random.default_rng(7))
    b, _ = kmeans(points, 2, 10, np.random.default_rng(7))
    np.testing.assert_array_equal(a, b)
    assert len(set(assign[:5])) == 1 and len(set(assign[5:])) == 1 and assign[0] != assign[5]
    np.testing.assert_allclose(sorted(a[:, 0]), [points[:5, 0].mean(), points[5:, 0].mean()])
    few, _ = kmeans(points[:2], 5, 3, np.random.default_rng(0))
    assert len(few) == 2  # never more clusters than points


def test_nearest_centroid_is_eq_4():
    centroids = torch.stack([torch.zeros(3, 2), torch.ones(3, 2), 2 * torch.ones(3, 2)])
    probe = torch.full((3, 2), 1.2)
    torch.testing.assert_close(nearest_centroid(centroids, probe), torch.ones(3, 2))


def test_heterogeneous_clients_exchange_logits_only(tiny):
    mixed = [*COMET, "model.name={dist='choice', values=['cnn-small', 'mlp']}"]
    result = mecsim.run(tiny, mixed, write=False)
    clients = result.clients
    assert clients.groupby("model")["num_params"].first().nunique() == 2
    codistill = result.events[result.events["phase"] == "compute:codistill"].merge(
        clients[["client", "model"]], on="client"
    )
    per_model = codistill.groupby("model")["flops"].unique()
    assert all(len(v) == 1 for v in per_model) and per_model.map(lambda v: v[0]).nunique() == 2
    uploads = result.events[result.events["phase"] == "upload"]
    assert (uploads["bytes"] == PUBLIC * CLASSES * 4).all()  # whatever the architecture


def test_serial_and_batched_agree(tiny):
    serial = mecsim.run(tiny, COMET, executor="serial", write=False)
    batched = mecsim.run(tiny, COMET, executor="batched", write=False)
    pd.testing.assert_frame_equal(serial.events, batched.events)
    np.testing.assert_allclose(
        serial.rounds["personal_acc"], batched.rounds["personal_acc"], atol=0.03
    )


def test_cost_only_comet_times_the_same_bytes(tiny):
    result = mecsim.run(tiny, [*COMET, "execution.cost_only=true"], write=False)
    uploads = result.events[result.events["phase"] == "upload"]
    assert (uploads["bytes"] == PUBLIC * CLASSES * 4).all()
    downloads = result.events[result.events["phase"] == "download"]
    assert (downloads["bytes"] == 2 * PUBLIC * CLASSES * 4).all()

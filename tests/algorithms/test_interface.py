"""Interface v2 end to end: heterogeneous clients, the public split, inference and server tasks."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

import mecsim
from mecsim.algorithms import ALGORITHMS, Algorithm, Task
from mecsim.algorithms.losses import cross_entropy_loss
from mecsim.learning.data import load_dataset
from mecsim.learning.devices import DEVICES
from mecsim.learning.models import build_model, forward_flops_per_sample
from mecsim.learning.state import ModelState

MIXED = [
    "algorithm.name=local",
    "model.name={dist='choice', values=['cnn-small', 'mlp']}",
    "clients.count=6",
    "clients.device=phone-mid",
]


def test_heterogeneous_clients_train_their_own_architectures(tiny):
    serial = mecsim.run(tiny, MIXED, executor="serial", write=False)
    batched = mecsim.run(tiny, MIXED, executor="batched", write=False)

    clients = serial.clients
    assert set(clients["model"]) == {"cnn-small", "mlp"}
    params = clients.groupby("model")["num_params"].first()
    assert params["cnn-small"] != params["mlp"]
    for c, row in clients.iterrows():  # each client trained its own architecture
        state = serial.client_states[c]["personal"]
        assert state.num_params() == row["num_params"]
    compute = serial.events[serial.events["phase"] == "compute:local"].merge(
        clients[["client", "model"]], on="client"
    )
    per_model = compute.groupby("model")["flops"].unique()
    assert all(len(v) == 1 for v in per_model)  # same steps and batch: FLOPs follow the model
    assert per_model["cnn-small"][0] != per_model["mlp"][0]
    flops_per_s = DEVICES.get("phone-mid").flops_per_s
    np.testing.assert_allclose(
        compute["t_end"] - compute["t_start"], compute["flops"] / flops_per_s
    )
    pd.testing.assert_frame_equal(serial.events, batched.events)
    np.testing.assert_allclose(
        serial.rounds["personal_acc"], batched.rounds["personal_acc"], atol=0.02
    )


def test_data_size_assignment_gives_larger_models_to_larger_clients(tiny):
    result = mecsim.run(
        tiny,
        MIXED[:2] + ["clients.count=6", "model.assign=data_size", "data.alpha=0.3"],
        write=False,
    )
    clients = result.clients.sort_values("num_train", ascending=False)
    larger = clients.sort_values("num_params")["model"].iloc[-1]  # mlp: 55k params, cnn: 14k
    smaller = ({"cnn-small", "mlp"} - {larger}).pop()
    assert clients["model"].tolist() == [larger] * 3 + [smaller] * 3


def test_an_averaging_algorithm_refuses_mixed_architectures(tiny):
    from mecsim.config.scenario import ScenarioError

    with pytest.raises(
        ScenarioError, match="model.name: algorithm 'fedavg' needs one architecture"
    ):
        mecsim.load_scenario(tiny, [MIXED[1]])


class PublicProbe(Algorithm):
    """Uploads logits on the public split, trains on private + public batches; the
    server fine-tunes its model on the public split (a metered server task)."""

    public_data = "labeled"
    tasks = (
        Task("logits", model="m", mode="infer", split="public", uploads=True),
        Task("local", model="m", also=(("public", 4),)),
    )

    def init_server_state(self):
        return {"global": self.initial.clone()}

    def init_client_state(self, client):
        return {"m": self.initial.clone()}

    def end_task(self, task, state, result, ctx):
        super().end_task(task, state, result, ctx)
        if task.mode == "infer":
            state["logits"] = result.outputs["logits"]

    def upload(self, state, ctx):
        return {"logits": state["logits"]}

    def loss(self, task):
        private, public = cross_entropy_loss("train"), cross_entropy_loss("public")
        if task.split == "public":
            return public
        return lambda f, p, b, c: private(f, p, b, c) + public(f, p, b, c)

    def server_tasks(self, round_):
        return (Task("tune", model="global", split="public"),)

    def personal_model(self, client_state, server_state):
        return client_state["m"]


@pytest.fixture
def public_probe():
    ALGORITHMS.add("public-probe", PublicProbe)
    yield
    del ALGORITHMS._items["public-probe"]


def test_public_split_inference_and_server_tasks_are_timed_and_counted(tiny, public_probe):
    size = 40
    result = mecsim.run(
        tiny, ["algorithm.name=public-probe", f"data.public_size={size}"], write=False
    )
    events = result.events
    model = build_model("cnn-small", input_shape=(1, 8, 8), num_classes=10, seed=0)
    forward = forward_flops_per_sample(model, (1, 8, 8))

    public = events[events["phase"] == "download:public"]
    assert sorted(public["client"]) == [0, 1, 2, 3]  # once per client
    assert (public["bytes"] == size * 64 * 4 + size * 8).all()  # float32 8x8 + int64 labels
    first_work = events[events["phase"].str.startswith("compute:")]["t_start"].min()
    assert (public["t_end"] <= first_work).all()  # before round 0
    logits = events[events["phase"] == "compute:logits"]
    assert (logits["flops"] == size * forward).all()  # forward only
    uploads = events[events["phase"] == "upload"]
    assert (uploads["bytes"] == size * 10 * 4).all()
    tune = events[events["phase"] == "server:tune"]
    assert len(tune) == 2 and (tune["flops"] > 0).all()
    server = DEVICES.get("edge-server").flops_per_s
    np.testing.assert_allclose(tune["t_end"] - tune["t_start"], tune["flops"] / server)
    assert not torch.equal(
        result.server_state["global"].params["classifier.2.weight"],
        ModelState.of(model).params["classifier.2.weight"],
    )
    pool = len(load_dataset("digits", num_clients=4, seed=3).y_train)
    assert result.clients["num_train"].sum() == pool - size  # held out of the training pool

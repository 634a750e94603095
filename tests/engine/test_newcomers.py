"""New clients (``evaluation.new_clients``): held out of training, they join after the last
round, adapt, and are scored apart (:mod:`mecsim.engine.newcomers`)."""

from __future__ import annotations

import math

import pytest
import torch

import mecsim
from mecsim.config.scenario import ScenarioError
from mecsim.learning.models import build_model
from mecsim.learning.training import predict
from mecsim.runs.world import build_data


def held_out(tiny, name: str, *extra: str):
    tiny["clients"]["count"] = 6
    return mecsim.run(
        tiny,
        [f"algorithm.name={name}", "evaluation.new_clients=2", *extra],
        write=False,
    )


def test_new_clients_never_train_and_join_after_the_last_round(tiny):
    result = held_out(tiny, "fedavg")
    events, rounds = result.events, tiny["protocol"]["rounds"]
    training = events[(events["round"] < rounds) & (events["client"] >= 0)]
    assert set(training["client"]) == {0, 1, 2, 3}  # clients 4 and 5 are held out
    joined = events[events["round"] == rounds]
    newcomers = joined[joined["client"] >= 0]
    assert set(newcomers["client"]) == {4, 5}
    for client in (4, 5):  # a download, then the fine-tuning: nothing is uploaded
        phases = list(newcomers[newcomers["client"] == client]["phase"])
        assert phases == ["download", "compute:newcomer-finetune"]
    assert joined["t_start"].min() >= events[events["round"] < rounds]["t_end"].max()
    summary = result.summary
    assert summary["new_clients"] == 2 and len(summary["new_client_accs"]) == 2
    assert summary["new_client_bytes_down"] == int(
        newcomers.loc[newcomers["phase"] == "download", "bytes"].sum()
    )
    assert summary["new_client_flops"] == int(newcomers["flops"].sum())
    assert len(result.clients) == 6 and not math.isnan(result.clients["final_personal_acc"][5])


def test_a_new_clients_fine_tuning_costs_what_a_training_epoch_costs(tiny):
    """FLOPs per step depend on the batch shape only: E epochs of fine-tuning cost
    E ceil(n / b) steps at the FLOPs of one full-batch training step."""
    result = held_out(tiny, "fedavg", "evaluation.new_client_epochs=3", "algorithm.steps=4")
    events, clients = result.events, result.clients
    step = events[(events["phase"] == "compute:local") & (events["round"] == 0)]
    b = tiny["algorithm"]["batch_size"]
    full = [c for c in step["client"] if clients["num_train"][c] >= b]
    per_step = int(step[step["client"] == full[0]]["flops"].iloc[0]) // 4
    for client in (4, 5):
        n = int(clients["num_train"][client])
        assert n >= b
        flops = events[
            (events["client"] == client) & (events["phase"] == "compute:newcomer-finetune")
        ]
        assert int(flops["flops"].iloc[0]) == 3 * math.ceil(n / b) * per_step


def test_new_clients_without_fine_tuning_score_the_final_global_model(tiny):
    """With 0 epochs a FedAvg newcomer evaluates the final global model: its accuracy is
    that model's on each newcomer's local test, computed here from the data."""
    result = held_out(tiny, "fedavg", "evaluation.new_client_epochs=0")
    data = build_data(result.scenario, torch.device("cpu"))
    model = build_model("cnn-small", input_shape=(1, 8, 8), num_classes=10, seed=0)
    final = result.server_state["global"]
    expected = []
    for client in (4, 5):
        idx = data.test[client]
        labels = predict(model, final, data.x_test[idx])
        expected.append(float((labels == data.y_test[idx]).float().mean()))
    assert result.summary["new_client_accs"] == pytest.approx(expected)
    sizes = [len(data.train[c]) for c in (4, 5)]  # the training-size weighted mean
    mean = sum(a * n for a, n in zip(expected, sizes, strict=True)) / sum(sizes)
    assert result.summary["new_client_acc"] == pytest.approx(mean)


def test_a_personalizing_algorithm_runs_its_own_step_and_uploads_nothing(tiny):
    result = held_out(tiny, "ditto", "algorithm.personal_steps=2")
    events = result.events
    joined = events[(events["round"] == tiny["protocol"]["rounds"]) & (events["client"] == 4)]
    assert list(joined["phase"]) == ["download", "compute:generic", "compute:personal"]
    assert not (events["phase"].str.startswith("upload") & (events["client"] >= 4)).any()
    finetuned = held_out(tiny, "ditto", "evaluation.new_client_adaptation=finetune")
    phases = finetuned.events[finetuned.events["client"] == 4]["phase"]
    assert list(phases) == ["download", "compute:newcomer-finetune"]


def test_new_clients_must_leave_someone_to_train(tiny):
    tiny["clients"]["count"] = 3
    with pytest.raises(ScenarioError, match="evaluation.new_clients"):
        mecsim.run(tiny, ["evaluation.new_clients=3"], write=False)


def test_cost_only_runs_time_the_join_without_scoring_it(tiny):
    result = held_out(tiny, "fedavg", "execution.cost_only=true")
    assert result.summary["new_clients"] == 2 and "new_client_acc" not in result.summary
    assert result.summary["new_client_flops"] > 0

"""Evaluation: batched personalized predictions equal one-at-a-time predictions."""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch

import mecsim
from mecsim.engine.evaluation import Evaluator, personal_mean
from mecsim.learning.models import build_model
from mecsim.learning.models.catalog import Architecture, ModelCatalog
from mecsim.learning.state import ModelState
from mecsim.learning.training import predict, predict_many

SHAPE = (1, 8, 8)


def _states(model: torch.nn.Module, count: int, seed: int) -> list[ModelState]:
    """``count`` distinct states of ``model``: perturbed weights and running statistics."""
    generator = torch.Generator().manual_seed(seed)
    base = ModelState.of(model)

    def noisy(t: torch.Tensor, scale: float) -> torch.Tensor:
        if not t.is_floating_point():
            return t
        return t + scale * torch.rand(t.shape, generator=generator)

    return [
        ModelState(
            {k: noisy(v, 0.1) for k, v in base.params.items()},
            {k: noisy(v, 0.5) for k, v in base.buffers.items()},
        )
        for _ in range(count)
    ]


@pytest.mark.parametrize(
    "limits",
    # one group, several, one state each, states whose inputs exceed a group
    [{}, {"max_samples": 40}, {"max_state_bytes": 1}, {"max_samples": 8}],
)
def test_predict_many_gives_each_states_own_predictions(limits):
    model = build_model("cnn-small-bn", input_shape=SHAPE, num_classes=10, seed=0)
    states = _states(model, 12, seed=1)
    generator = torch.Generator().manual_seed(2)
    sizes = [0, 7, 1, 13, 3, 0, 9, 20, 2, 5, 11, 4]  # ragged, with empty test sets
    inputs = [torch.randn(n, *SHAPE, generator=generator) for n in sizes]

    many = predict_many(model, states, inputs, **limits)

    assert [len(p) for p in many] == sizes
    for state, x, labels in zip(states, inputs, many, strict=True):
        assert torch.equal(labels, predict(model, state, x))


class _Personal:
    """An algorithm stand-in: client 0 has no model, client 1 the global, others their own."""

    def __init__(self, states: list[ModelState], generic: ModelState) -> None:
        self.states, self.generic = states, generic

    def generic_model(self, server_state):
        return self.generic

    def personal_model(self, client_state, server_state):
        client = client_state["id"]
        return None if client == 0 else self.generic if client == 1 else self.states[client]


def test_batched_evaluation_equals_one_client_at_a_time():
    model = build_model("cnn-small-bn", input_shape=SHAPE, num_classes=10, seed=0)
    states = _states(model, 9, seed=3)
    generator = torch.Generator().manual_seed(4)
    x_test = torch.randn(60, *SHAPE, generator=generator)
    y_test = torch.randint(0, 10, (60,), generator=generator)
    local = [torch.arange(i * 6, i * 6 + (i % 4) * 2) for i in range(9)]  # some empty
    catalog = ModelCatalog({"cnn": Architecture.of("cnn", model)}, ("cnn",) * 9, "cnn")
    algorithm = _Personal(states, states[0])
    clients = [{"id": c} for c in range(9)]

    results = [
        Evaluator(catalog, x_test, y_test, local, [1] * 9, batched=flag).evaluate(
            algorithm, {}, clients, 1
        )
        for flag in (False, True)
    ]

    assert _same_with_nans(results[0], results[1])
    assert math.isnan(results[1].client_acc[0])  # no personal model
    assert sum(not math.isnan(a) for a in results[1].client_acc) == 6  # 3 empty test sets


def _same_with_nans(a, b) -> bool:
    pairs = [(a.generic_acc, b.generic_acc), (a.personal_acc, b.personal_acc)]
    pairs += list(zip(a.client_acc, b.client_acc, strict=True))
    return all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in pairs)


def test_a_batched_run_evaluates_personalized_models_in_groups(tiny, monkeypatch):
    calls = []
    original = mecsim.engine.evaluation.predict_many

    def spy(model, states, inputs, **kwargs):
        calls.append(len(states))
        return original(model, states, inputs, **kwargs)

    monkeypatch.setattr(mecsim.engine.evaluation, "predict_many", spy)
    monkeypatch.setattr(Evaluator, "probe", lambda self, *args: True)  # grouping is faster
    overrides = ["algorithm.name=ditto", "protocol.rounds=2"]
    batched = mecsim.run(copy.deepcopy(tiny), overrides, executor="batched", write=False)
    assert calls and max(calls) > 1
    calls.clear()
    serial = mecsim.run(copy.deepcopy(tiny), overrides, executor="serial", write=False)
    assert not calls  # the serial executor's runs evaluate one client at a time
    assert batched.rounds["personal_acc"].notna().all()
    assert serial.rounds["personal_acc"].notna().all()


@pytest.mark.parametrize(
    ("serial_s", "batched_s", "batched"), [(1.0, 1.1, True), (1.0, 2.0, False)]
)
def test_the_probe_picks_groups_unless_one_at_a_time_is_clearly_faster(
    monkeypatch, serial_s, batched_s, batched
):
    model = build_model("cnn-small", input_shape=SHAPE, num_classes=10, seed=0)
    states = _states(model, 10, seed=5)
    inputs = [torch.randn(4, *SHAPE) for _ in states]
    times = iter([serial_s, batched_s])
    monkeypatch.setattr(
        mecsim.engine.evaluation, "timed", lambda fn, device: (fn(), next(times))[1]
    )
    catalog = ModelCatalog({"cnn": Architecture.of("cnn", model)}, ("cnn",) * 10, "cnn")
    evaluator = Evaluator(catalog, torch.zeros(1, *SHAPE), torch.zeros(1), [], [], batched=None)

    assert evaluator.probe(model, states, inputs) is batched
    assert evaluator.probe_result == {
        "batched": batched,
        "serial_s": serial_s,
        "batched_s": batched_s,
        "probe_clients": 8,
    }


def test_the_summary_records_the_evaluation_probe_only_where_it_ran(tiny):
    ditto = mecsim.run(
        copy.deepcopy(tiny), ["algorithm.name=ditto"], executor="batched", write=False
    )
    fedavg = mecsim.run(copy.deepcopy(tiny), executor="batched", write=False)
    serial = mecsim.run(
        copy.deepcopy(tiny), ["algorithm.name=ditto"], executor="serial", write=False
    )

    probe = ditto.summary["evaluation_probe"]
    assert probe["probe_clients"] >= 1 and probe["serial_s"] > 0 and probe["batched_s"] > 0
    assert fedavg.summary["evaluation_probe"] is None  # its clients' model is the global one
    assert serial.summary["evaluation_probe"] is None


# --- evaluation.personal_mean ----------------------------------------------------------


def test_each_personal_mean_convention_by_hand():
    acc = [0.5, 1.0, math.nan, 0.75]  # client 2 has no local test
    train, test = [10, 30, 50, 60], [5, 1, 0, 4]
    assert personal_mean(acc, train, test, "train_size")[0] == pytest.approx((5 + 30 + 45) / 100)
    assert personal_mean(acc, train, test, "test_size")[0] == pytest.approx((2.5 + 1 + 3) / 10)
    assert personal_mean(acc, train, test, "clients")[0] == pytest.approx(0.75)
    mean, std = personal_mean(acc, train, test, "selected", selected=[0, 2])
    assert mean == 0.5 and std == 0.0  # client 2 is selected but unscored
    _, population = personal_mean(acc, train, test, "clients")
    _, sample = personal_mean(acc, train, test, "clients", ddof=1)
    assert population == pytest.approx(np.std([0.5, 1.0, 0.75]))
    assert sample == pytest.approx(np.std([0.5, 1.0, 0.75], ddof=1))
    assert math.isnan(personal_mean(acc, train, test, "selected", selected=[2])[0])


def test_a_run_reports_the_mean_over_each_rounds_selection(tiny):
    from mecsim.engine.simulation import Simulation

    selections = []
    end_round = Simulation.end_round

    def record(self, round_, round_start, selected, **extra):
        selections.append(list(selected))
        return end_round(self, round_, round_start, selected, **extra)

    overrides = ["protocol.rounds=2", "clients.count=6", "protocol.clients_per_round=2"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Simulation, "end_round", record)
        run = mecsim.run(
            copy.deepcopy(tiny), [*overrides, "evaluation.personal_mean=selected"], write=False
        )
    plain = mecsim.run(tiny, [*overrides, "evaluation.personal_mean=clients"], write=False)
    final = run.clients["final_personal_acc"].to_numpy()
    assert run.rounds["personal_acc"].iloc[-1] == pytest.approx(final[selections[-1]].mean())
    assert plain.rounds["personal_acc"].iloc[-1] == pytest.approx(np.nanmean(final))

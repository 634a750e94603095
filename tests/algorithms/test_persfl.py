"""PersFL (paper 002): optimal teachers by validation loss, local distillation grid."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import mecsim
from mecsim.algorithms.persfl import persfl_loss
from mecsim.config.scenario import ScenarioError, load_scenario
from mecsim.engine.simulation import Simulation
from mecsim.learning.models import build_model, forward_flops_per_sample
from mecsim.learning.state import ModelState
from mecsim.learning.training import ModelFunction
from mecsim.runs.world import build_world

PERSFL = [
    "algorithm.name=persfl",
    "algorithm.fl_rounds=3",
    "protocol.rounds=4",
    "data.val_fraction=0.3",
    "algorithm.distill_epochs=1",
    "algorithm.temperatures=[1, 4]",
    "algorithm.imitations=[0, 0.5]",
    "algorithm.lr=0.1",
    "clients.count=4",
]


@pytest.fixture(scope="module")
def persfl_run(tiny_module):
    """A PersFL run, and the global model each round's clients received."""
    received: dict[int, dict] = {}
    original = Simulation.payloads

    def payloads(self, selected, round_=0):
        out = original(self, selected, round_)
        received[round_] = {k: v.clone() for k, v in next(iter(out.values())).items()}
        return out

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Simulation, "payloads", payloads)
        result = mecsim.run(copy.deepcopy(tiny_module), PERSFL, write=False)
    return result, received


def _val_data(tiny):
    sc = load_scenario(copy.deepcopy(tiny), PERSFL)
    world = build_world(sc, torch.device("cpu"))
    return world.data


def _cnn() -> tuple[ModelFunction, ModelState]:
    """The run's architecture in eval mode, and its initial state (a template)."""
    model = build_model("cnn-small", input_shape=(1, 8, 8), num_classes=10, seed=0)
    model.eval()
    return ModelFunction(model), ModelState.of(model)


def test_the_teacher_is_the_received_global_model_with_the_lowest_validation_loss(persfl_run, tiny):
    result, received = persfl_run
    data = _val_data(tiny)
    function, template = _cnn()
    for c, state in enumerate(result.client_states):
        idx = data.val[c]
        x, y = data.x_train[idx], data.y_train[idx]
        losses = {}
        for round_, payload in received.items():  # rounds 0-3: every global model received
            g = ModelState.from_payload(payload, template)
            with torch.no_grad():
                losses[round_] = float(
                    F.cross_entropy(function(g.params, g.buffers, x)["logits"], y)
                )
        best = min(losses, key=lambda r: (losses[r], r))
        assert state["teacher_round"] == best, (c, losses)
        assert state["teacher_loss"] == pytest.approx(losses[best], rel=1e-5)
        teacher = state["teacher"]
        expected = ModelState.from_payload(received[best], template)
        for k in expected.params:
            torch.testing.assert_close(teacher.params[k], expected.params[k])


def test_stage_two_is_local_distillation_of_every_grid_point(persfl_run):
    result, _ = persfl_run
    events = result.events
    last = events[events["round"] == 3]
    assert not last["phase"].isin(["upload", "aggregate"]).any()  # local only
    assert (last["phase"] == "download").sum() == 4  # the final global model, to check it
    names = {f"T{t}:lam{lam:g}" for t in (1, 4) for lam in (0, 0.5)}
    distill = last[last["phase"].str.startswith("compute:distill:")]
    assert set(distill["phase"].str.removeprefix("compute:distill:")) == names
    assert len(distill) == 4 * 4
    checks = last[last["phase"].str.startswith("compute:check:")].merge(
        result.clients[["client", "num_val"]], on="client"
    )
    model = build_model("cnn-small", input_shape=(1, 8, 8), num_classes=10, seed=0)
    forward = forward_flops_per_sample(model, (1, 8, 8))
    assert (checks["flops"] == checks["num_val"] * forward).all()  # forward over val only
    teacher_checks = events[events["phase"] == "compute:teacher-check"]
    assert len(teacher_checks) == 4 * 4  # every round, every client


def test_the_personal_model_is_the_best_candidate_on_validation(persfl_run, tiny):
    result, _ = persfl_run
    data = _val_data(tiny)
    function, _ = _cnn()
    for c, state in enumerate(result.client_states):
        idx = data.val[c]
        personal = state["personal"]
        with torch.no_grad():
            logits = function(personal.params, personal.buffers, data.x_train[idx])["logits"]
        accuracy = float((logits.argmax(1) == data.y_train[idx]).float().mean())
        assert state["personal_acc"] == pytest.approx(accuracy)
        assert not any(k.startswith("candidate") for k in state)  # candidates freed


def test_the_loss_is_hard_loss_at_lambda_0_and_soft_loss_at_1():
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 4)
    function = ModelFunction(model)
    params = {k: v.detach().clone() for k, v in model.named_parameters()}
    teacher = {k: v + 0.3 for k, v in params.items()}
    consts = {f"teacher.{k}": v for k, v in teacher.items()}
    batch = {"train": {"x": torch.randn(5, 3), "y": torch.tensor([0, 1, 2, 3, 0])}}
    student = batch["train"]["x"] @ params["weight"].T + params["bias"]
    teacher_logits = batch["train"]["x"] @ teacher["weight"].T + teacher["bias"]

    def value(t, lam):
        return persfl_loss(t, lam)(function.bind(params, {}), params, batch, consts)

    torch.testing.assert_close(value(3.0, 0.0), F.cross_entropy(student, batch["train"]["y"]))
    t = 3.0
    p_t = F.softmax(teacher_logits / t, dim=1)
    kl = (p_t * (p_t.log() - F.log_softmax(student / t, dim=1))).sum(1).mean()
    torch.testing.assert_close(value(t, 1.0), t**2 * kl)


@pytest.mark.parametrize(
    ("override", "field"),
    [("protocol.rounds=3", "protocol.rounds"), ("data.val_fraction=0", "data.val_fraction")],
)
def test_scenario_checks(tiny, override, field):
    with pytest.raises(ScenarioError, match=field):
        load_scenario(tiny, [*PERSFL, override])


def test_each_check_scores_its_own_trained_candidate_and_the_best_becomes_personal(tiny):
    """The checks used to score a clone of the teacher: every candidate tied, the teacher
    became the personal model and the distillation was thrown away."""
    from mecsim.algorithms.losses import inference_accuracy
    from mecsim.algorithms.persfl import PersFL

    trained: dict[tuple[int, str], ModelState] = {}
    scored: dict[tuple[int, str], tuple[ModelState, float]] = {}
    original = PersFL.end_task

    def end_task(self, task, state, result, ctx):
        if task.name.startswith("distill:"):
            trained[ctx.client, task.name.removeprefix("distill:")] = result.state
        elif task.name.startswith("check:"):
            accuracy = inference_accuracy(result.outputs)
            scored[ctx.client, task.name.removeprefix("check:")] = (result.state, accuracy)
        original(self, task, state, result, ctx)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(PersFL, "end_task", end_task)
        result = mecsim.run(copy.deepcopy(tiny), PERSFL, write=False)

    differs = 0
    for c, state in enumerate(result.client_states):
        teacher = state["teacher"]
        names = [name for client, name in scored if client == c]
        for name in names:  # the check read the candidate its distillation trained
            checked, _ = scored[c, name]
            for k in checked.params:
                torch.testing.assert_close(checked.params[k], trained[c, name].params[k])
            assert any(
                not torch.equal(checked.params[k], teacher.params[k]) for k in checked.params
            ), "a candidate equals the teacher: it was not trained"
        best = max(names, key=lambda n: (scored[c, n][1], -names.index(n)))
        personal = state["personal"]
        for k in personal.params:
            torch.testing.assert_close(personal.params[k], trained[c, best].params[k])
        assert state["personal_acc"] == pytest.approx(scored[c, best][1])
        differs += any(
            not torch.equal(personal.params[k], teacher.params[k]) for k in personal.params
        )
    assert differs == len(result.client_states)  # the personal models are distilled ones


def test_stage_two_trains_with_its_own_learning_rate_and_momentum(tiny):
    """Issue 48: the candidates start from the teacher; with stage 1's lr 0.05 and
    momentum 0.9 plain fine-tuning moved them off it. ``distill_lr`` and
    ``distill_momentum`` set stage 2's optimizer; stage 1 keeps its own."""
    own = ["algorithm.distill_lr=0.01", "algorithm.distill_momentum=0", "algorithm.momentum=0.9"]
    for overrides, expected in ((own, (0.01, 0.0)), ([], (0.1, 0.0))):
        sc = load_scenario(copy.deepcopy(tiny), [*PERSFL, *overrides])
        algorithm = build_world(sc, torch.device("cpu")).ctx.algorithm
        distills = [algorithm.schedule(task) for task in algorithm.distills]
        assert {(s.lr, s.momentum) for s in distills} == {expected}
        stage1 = algorithm.schedule(algorithm.round_tasks(0)[0])
        assert stage1.lr == 0.1 and stage1.momentum == (0.9 if overrides else 0.0)

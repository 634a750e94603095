"""StepMeter: FLOPs of one training step, counted by running the real loss once."""

from __future__ import annotations

import torch
from torch import nn

from mecsim.cost import StepMeter
from mecsim.state import ModelState
from mecsim.training import ModelFunction


def _linear(inputs: int = 6, outputs: int = 3) -> tuple[ModelFunction, ModelState]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(inputs, outputs, bias=False))
    return ModelFunction(model), ModelState.of(model)


def _teacher_loss(forward, params, batch, consts):
    """Cross-entropy plus one forward per constant model ``teacher{k}.*``."""
    x = batch["train"]["x"]
    loss = forward(x)["logits"].square().mean()
    teachers = sorted({k.split(".", 1)[0] for k in consts})
    for name in teachers:
        weights = {k.split(".", 1)[1]: v for k, v in consts.items() if k.startswith(name + ".")}
        loss = loss + forward(x, weights, {})["logits"].mean()
    return loss


def test_step_of_a_linear_model_matches_a_hand_count():
    function, state = _linear(6, 3)
    meter = StepMeter()

    flops = meter.step_flops("k", function, _teacher_loss, state, {}, {"train": (4, 6)}, None)

    forward = 2 * 4 * 6 * 3
    backward = 2 * 4 * 6 * 3  # gradient of the weight only (the input needs none)
    assert flops == forward + backward


def test_count_depends_on_the_constants_a_loss_reads():
    """A loss that runs one forward per constant model costs more with more of them."""
    function, state = _linear(6, 3)
    meter = StepMeter()
    teacher = {"0.weight": torch.ones(3, 6)}
    one = {f"teacher0.{k}": v for k, v in teacher.items()}
    two = {**one, **{f"teacher1.{k}": v for k, v in teacher.items()}}

    none = meter.step_flops("k", function, _teacher_loss, state, {}, {"train": (4, 6)}, None)
    with_one = meter.step_flops("k", function, _teacher_loss, state, one, {"train": (4, 6)}, None)
    with_two = meter.step_flops("k", function, _teacher_loss, state, two, {"train": (4, 6)}, None)

    teacher_forward = 2 * 4 * 6 * 3
    assert with_one == none + teacher_forward
    assert with_two == none + 2 * teacher_forward

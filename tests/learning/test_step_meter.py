"""StepMeter: FLOPs of one training step, counted by running the real loss once."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from mecsim.algorithms.losses import cross_entropy_loss, proximal_cross_entropy
from mecsim.algorithms.pfedme import envelope_loss
from mecsim.common.errors import MecsimError
from mecsim.learning import cost
from mecsim.learning.cost import StepMeter
from mecsim.learning.models.flops import FlopCount
from mecsim.learning.state import ModelState, zeros_like
from mecsim.learning.training import STEP_CORRECTION, ModelFunction


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


# --- element-wise work on weights, metered by dispatch ------------------------------------
def _biased_linear() -> tuple[ModelFunction, ModelState, int]:
    torch.manual_seed(0)
    model = nn.Linear(6, 3)
    return ModelFunction(model), ModelState.of(model), 6 * 3 + 3


SHAPES = {"train": (4, 6)}
MATMULS = 2 * (2 * 4 * 6 * 3)  # forward and weight gradient of Linear(6, 3) on 4 samples


def test_plain_cross_entropy_counts_matrix_products_only():
    """Per-sample work (bias add, log-softmax, the mean) is not counted, as before."""
    function, state, _ = _biased_linear()
    flops = StepMeter().step_flops("ce", function, cross_entropy_loss(), state, {}, SHAPES, None)
    assert flops == MATMULS


def test_proximal_term_is_counted_op_by_op():
    """mu/2 sum_k ||w_k - a_k||^2, per parameter: forward subtract, square, sum (3);
    backward pow(d, 1), times 2, times the incoming gradient (3, as torch's pow backward
    runs them); the proximal gradient added to the cross-entropy's (1): 7 per parameter.
    The hand-typed constant this replaces said 5."""
    function, state, params = _biased_linear()
    anchor = {k: torch.zeros_like(v) for k, v in state.params.items()}
    loss = proximal_cross_entropy("train", 0.1)
    flops = StepMeter().step_flops("prox", function, loss, state, anchor, SHAPES, None)
    assert flops == MATMULS + 7 * params


def test_pfedme_inner_loop_matches_a_hand_count():
    """pFedMe's local step, K = 5 inner steps inside the loss by torch.func.grad.

    Each inner step: the cross-entropy's matrix products (forward and weight gradient),
    the proximal term forward and backward (6 per parameter), its gradient added to the
    cross-entropy's (1) and the update theta - eta g (2): 9 per parameter. The outer
    loss lambda/2 ||w - theta~||^2 with theta~ detached: 6 per parameter, no matrix
    product (the model is not run on it)."""
    function, state, params = _biased_linear()
    loss = envelope_loss("train", 15.0, 5, 0.1)
    flops = StepMeter().step_flops("pfedme", function, loss, state, {}, SHAPES, None)
    assert flops == 5 * (MATMULS + 9 * params) + 6 * params


def test_gradient_clipping_and_step_corrections_are_counted():
    """Clipping: a norm per gradient (2 per entry), the global norm of the per-tensor
    norms (2 per tensor), the scaling (1 per entry). A step correction ``p -= lr c``:
    scale and subtract, 2 per corrected entry."""
    function, state, params = _biased_linear()
    meter = StepMeter()
    ce = cross_entropy_loss()
    clipped = meter.step_flops("clip", function, ce, state, {}, SHAPES, None, max_grad_norm=1.0)
    assert clipped == MATMULS + 3 * params + 2 * 2
    weight = state.params["weight"]
    corrections = {STEP_CORRECTION + "weight": torch.zeros_like(weight)}
    corrected = meter.step_flops("corr", function, ce, state, corrections, SHAPES, None)
    assert corrected == MATMULS + 2 * weight.numel()


def test_cost_only_meta_count_equals_the_cpu_count(monkeypatch):
    """The meta device (cost-only runs) counts what the CPU counts, element-wise work too."""
    function, state, _ = _biased_linear()
    anchor = {k: torch.zeros_like(v) for k, v in state.params.items()}
    loss = proximal_cross_entropy("train", 0.1)
    cpu = StepMeter().step_flops("prox", function, loss, state, anchor, SHAPES, None)
    monkeypatch.setattr(cost, "SMALL_STEP_ELEMENTS", 0)  # count on meta itself
    meta = ModelState(zeros_like(state.params, "meta"), zeros_like(state.buffers, "meta"))
    on_meta = StepMeter().step_flops(
        "prox", function, loss, meta, zeros_like(anchor, "meta"), SHAPES, None
    )
    assert on_meta == cpu


def test_a_loss_that_branches_on_the_batch_size_is_refused():
    function, state, _ = _biased_linear()

    def odd(forward, params, batch, consts):
        x = batch["train"]["x"]
        logits = forward(x)["logits"]
        return logits.square().mean() if len(x) < 5 else logits.abs().mean()

    with pytest.raises(MecsimError, match="must not branch on the batch size"):
        StepMeter().step_flops("odd", function, odd, state, {}, SHAPES, None)


def test_ffts_foreach_lists_and_vector_products_have_their_own_prices():
    with FlopCount(trace=True) as counter:
        torch.fft.fft(torch.zeros(8))  # a real transform of 8 points: 2.5 n log2 n
        torch.fft.fft(torch.zeros(8, dtype=torch.complex64))  # complex: 5 n log2 n
        torch.dot(torch.zeros(5), torch.zeros(5))  # multiply and add
    assert counter.total == 2.5 * 8 * 3 + 5 * 8 * 3 + 2 * 5
    with FlopCount(trace=True) as counter:
        torch._foreach_mul([torch.zeros(3), torch.zeros(4)], 2.0)
        torch._foreach_norm([torch.zeros(3), torch.zeros(4)])
        torch.zeros(6).sum()
        torch.zeros(2, 3).clone()
        torch.log_softmax(torch.zeros(6), dim=-1)  # max, subtract, exp, sum, log-subtract
    assert [(op.name, op.flops) for op in counter.ops if op.flops or op.priced] == [
        ("_foreach_mul", 7),
        ("_foreach_norm", 14),
        ("sum", 6),
        ("_log_softmax", 30),
    ]

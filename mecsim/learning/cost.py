"""Cost model: metered FLOPs, compute time and energy, transmit time and energy.

FLOPs are metered, not declared. A training step's FLOPs are what PyTorch
dispatches for it: :class:`StepMeter` runs one step of the task's real loss
(forward of every model the loss calls, then ``autograd.grad`` with respect
to the trainable parameters) under :class:`~mecsim.learning.models.flops.FlopCount` on a
zero batch of the step's shape, and caches the count per (architecture,
task, trainable set, batch sizes). So backward is charged only for what
autograd runs: weight gradients of trainable layers and input gradients
down to the lowest trainable layer; a head-only task costs forward + head
backward. The count depends only on shapes, so serial, batched and
cost-only runs (on the meta device) record the same FLOPs.

What counts: matrix products, convolutions, FFTs and vector products
wherever they run, and element-wise work (point-wise ops, reductions,
``_foreach_`` lists; :mod:`mecsim.learning.models.elementwise`) whose size does not
grow with the batch: a proximal term, an inner SGD step, a parameter
mixture, gradient clipping, a step correction. Per-sample element-wise work
(activations, bias adds, normalizations, the loss over the logits) is not
counted, the convention of ``FlopCounterMode`` and of the papers' FLOP
figures for a network's forward and backward pass. The two are told apart by
measurement, not by name: the step is traced at batch sizes b and 2b (every
slice of a batch grows with it), and an op whose tensors keep their sizes is
weight-space work (scalar arithmetic on the loss value is left out, a few
FLOPs a step). The plain SGD update (``p -= lr * b``) is not counted, for
any algorithm.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping

import torch

from mecsim.common.errors import MecsimError
from mecsim.learning.devices import DeviceProfile
from mecsim.learning.models.flops import FlopCount, TracedOp
from mecsim.learning.state import ModelState, TensorDict, zeros_like
from mecsim.learning.training import (
    STEP_CORRECTION,
    Loss,
    ModelFunction,
    Schedule,
    clip_gradients,
    correct_,
)


class StepMeter:
    """FLOPs of one training step of a loss, counted once per shape and cached."""

    def __init__(self) -> None:
        self._cache: dict[Hashable, int] = {}
        self.unpriced: set[str] = set()
        """Weight-space ops no rule priced (data movement, or a rule missing): the
        ``flops`` check of ``mecsim check`` reports any that is not known data movement."""

    def step_flops(
        self,
        key: Hashable,
        function: ModelFunction,
        loss: Loss,
        start: ModelState,
        consts: TensorDict,
        shapes: Mapping[str, tuple[int, ...]],
        trainable: frozenset[str] | None,
        max_grad_norm: float | None = None,
    ) -> int:
        """FLOPs of one step of ``loss`` on zero batches of ``shapes`` (split -> [b, ...]).

        ``key`` identifies everything the count depends on besides the shapes
        (architecture, task, trainable set). The names and shapes of ``consts``
        are part of the cache key too: a loss that runs one forward per
        constant model (FedDF's teachers) costs more when there are more. The
        step includes gradient clipping to ``max_grad_norm`` and the step
        corrections among ``consts`` (:data:`~mecsim.learning.training.STEP_CORRECTION`).
        """
        signature = tuple(sorted((k, tuple(v.shape)) for k, v in consts.items()))
        full = (key, tuple(sorted(shapes.items())), trainable, signature, max_grad_norm)
        if full not in self._cache:
            step = _Step(function, loss, start, consts, trainable, max_grad_norm)
            self._cache[full] = step.flops(shapes, key, self.unpriced)
        return self._cache[full]


class _Step:
    """One training step to count: the loss, its gradient, clipping and step corrections."""

    def __init__(
        self,
        function: ModelFunction,
        loss: Loss,
        start: ModelState,
        consts: TensorDict,
        trainable: frozenset[str] | None,
        max_grad_norm: float | None,
    ) -> None:
        self.function, self.loss, self.start, self.consts = function, loss, start, consts
        self.trainable, self.max_grad_norm = trainable, max_grad_norm

    def flops(self, shapes: Mapping[str, tuple[int, ...]], key: Hashable, unpriced: set) -> int:
        """Matrix products, convolutions and transforms, plus the element-wise work whose
        size does not grow with the batch: the step is traced at batch sizes b and 2b,
        and an op whose tensors have the same sizes in both is weight-space work, unless
        all of them are scalars (arithmetic on the loss value, a few FLOPs a step).
        Adds the names of weight-space ops no rule prices to ``unpriced``."""
        total, ops = self.trace(shapes)
        grown = self.trace({name: (2 * s[0], *s[1:]) for name, s in shapes.items()})[1]
        if [op.name for op in ops] != [op.name for op in grown]:
            raise MecsimError(
                f"cannot meter the FLOPs of {key!r}: its step runs different operations at "
                "batch sizes b and 2b; a loss must not branch on the batch size"
            )
        weight_space = [
            a for a, b in zip(ops, grown, strict=True) if a.sizes == b.sizes and max(a.sizes) > 1
        ]
        unpriced.update(op.name for op in weight_space if not op.priced)
        return total + sum(op.flops for op in weight_space)

    def trace(self, shapes: Mapping[str, tuple[int, ...]]) -> tuple[int, list[TracedOp]]:
        """(FLOPs counted by formula, every other op) of one step on zero batches."""
        start, consts = self.start, self.consts
        reference = next(iter(start.params.values()))
        device = reference.device
        if device.type == "meta" and _elements(start, consts, shapes) <= SMALL_STEP_ELEMENTS:
            device = torch.device("cpu")  # the same count, without importing Dynamo
            start = ModelState(zeros_like(start.params, device), zeros_like(start.buffers, device))
            consts = zeros_like(consts, device)
        batch = {
            name: {
                "x": torch.zeros(shape, device=device, dtype=reference.dtype),
                "y": torch.zeros(shape[0], dtype=torch.long, device=device),
                "i": torch.zeros(shape[0], dtype=torch.long, device=device),
            }
            for name, shape in shapes.items()
        }
        names = [k for k in start.params if self.trainable is None or k in self.trainable]
        leaves = {k: start.params[k].detach().requires_grad_(True) for k in names}
        params = {**{k: v.detach() for k, v in start.params.items()}, **leaves}
        buffers = {k: v.clone() for k, v in start.buffers.items()}
        self.function.model.train()
        with FlopCount(trace=True) as counter:
            value = self.loss(self.function.bind(params, buffers), params, batch, consts)
            if names:
                grads = torch.autograd.grad(value, [leaves[k] for k in names], allow_unused=True)
                with torch.no_grad():
                    self.update({k: g for k, g in zip(names, grads, strict=True) if g is not None},
                                params, consts)  # fmt: skip
        return counter.total, counter.ops

    def update(self, grads: TensorDict, params: TensorDict, consts: TensorDict) -> None:
        """What a step adds to plain SGD: clipping and step corrections (the update
        ``p -= lr * b`` itself is not counted)."""
        if self.max_grad_norm is not None and grads:
            clip_gradients(grads, self.max_grad_norm)
        corrected = {k: params[k].clone() for k in grads if STEP_CORRECTION + k in consts}
        correct_(corrected, consts, Schedule(lr=1.0))  # on copies: the weights stay as they are


SMALL_STEP_ELEMENTS = 4_000_000
"""A step on the meta device (cost-only runs) is counted on the CPU, on zeros, when its
weights, constants and batches hold at most this many elements (16 MB of float32, a few
milliseconds): the count depends only on shapes, and the meta kernels of common ops
(``addmm``, ``relu``) are Python references whose first call imports ``torch._dynamo``
(0.9 s)."""


def _elements(start: ModelState, consts: TensorDict, shapes: Mapping[str, tuple[int, ...]]) -> int:
    tensors = [*start.params.values(), *start.buffers.values(), *consts.values()]
    return sum(t.numel() for t in tensors) + sum(math.prod(s) for s in shapes.values())


def compute_cost(flops: float, device: DeviceProfile) -> tuple[float, float]:
    """(seconds, joules) to execute ``flops`` on ``device``."""
    seconds = device.compute_time(flops)
    return seconds, device.compute_energy(seconds)


def transmit_cost(nbytes: int, rate_bps: float, tx_power_w: float) -> tuple[float, float]:
    """(seconds, joules) to send ``nbytes`` at ``rate_bps`` with ``tx_power_w``."""
    if nbytes == 0:
        return 0.0, 0.0
    seconds = 8 * nbytes / rate_bps
    return seconds, tx_power_w * seconds

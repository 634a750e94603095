"""The SGD steps of stacked clients: eager, or one CUDA graph replayed per segment.

:class:`Lockstep` holds the stacked state of the clients still training (a
prefix of the stack, longest first) and takes one vmapped SGD step at a
time. Between two departures the active clients and every shape stay the
same, so on a GPU such a segment of at least :data:`GRAPH_MIN_STEPS` steps
runs its first steps eagerly (on a side stream: warming autograd, cuDNN's and
cuBLAS's caches and :mod:`~mecsim.learning.models.stacked_conv`'s choices),
captures the step once as a CUDA graph and replays it for the rest: the host
issues one launch per step instead of hundreds (thousands with many
clients). The graph runs the same kernels on the same tensors, updated in
place, so replayed steps give the eager steps' results. A loss the graph
cannot capture (one that reads a value back to the host, say) falls back to
eager steps.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import Tensor
from torch.func import vmap

from mecsim.learning.state import TensorDict
from mecsim.learning.training import (
    Loss,
    ModelFunction,
    Schedule,
    SplitData,
    clip_gradients,
    correct_,
    gather,
    sgd_update_,
)

GRAPH_MIN_STEPS = 6
"""The shortest segment worth a graph: two warm-up steps, one capture, replays."""

WARM_STEPS = 2
"""Eager steps of a segment before its capture."""


def _prefix(tensors: TensorDict, n: int) -> TensorDict:
    return {k: v[:n] for k, v in tensors.items()}


class Lockstep:
    """The stacked state of the active clients and their SGD step."""

    def __init__(
        self,
        function: ModelFunction,
        template: Mapping[str, SplitData],
        schedule: Schedule,
        loss: Loss,
        state: tuple[TensorDict, TensorDict, TensorDict, TensorDict],
        clients: int,
    ) -> None:
        self.learn, self.frozen, self.buffers, self.constants = state
        self.momentum: TensorDict = {}
        self.loss_sums: Tensor | None = None  # each client's summed step losses
        self.active = self.clients = clients
        self.template = template
        self.schedule = schedule
        self.graphs_failed = False

        def step_loss(learn, frozen, buffers, batch, consts):
            buffers = {n: b.clone() for n, b in buffers.items()}  # BN updates these in place
            current = {**frozen, **learn}
            value = loss(function.bind(current, buffers), current, batch, consts)
            return value, buffers

        self.losses = vmap(step_loss)

    def shrink(self, still: int) -> None:
        """Keep the first ``still`` clients only."""
        self.learn, self.frozen = _prefix(self.learn, still), _prefix(self.frozen, still)
        self.buffers, self.momentum = _prefix(self.buffers, still), _prefix(self.momentum, still)
        self.constants = _prefix(self.constants, still)
        self.active = still

    def step(self, indices: Mapping[str, Tensor]) -> TensorDict:
        """One SGD step of the active clients on the samples at ``indices``; the parameters,
        momentum and loss sums change in place; returns the new BatchNorm buffers."""
        batch = gather(self.template, indices)
        leaves = {n: v.detach().requires_grad_(True) for n, v in self.learn.items()}
        values, new_buffers = self.losses(leaves, self.frozen, self.buffers, batch, self.constants)
        if self.loss_sums is None:  # on the losses' device: no sync per step
            self.loss_sums = values.new_zeros(self.clients)
        self.loss_sums[: self.active] += values.detach()
        # clients are independent: the gradient of the sum is each client's own gradient
        gradients = torch.autograd.grad(values.sum(), list(leaves.values()))
        grads = dict(zip(self.learn, gradients, strict=True))
        with torch.no_grad():  # the stacks are the trainer's own: updated in place
            if self.schedule.max_grad_norm is not None:
                grads = clip_gradients(grads, self.schedule.max_grad_norm, stacked=True)
            self.momentum = sgd_update_(self.learn, grads, self.momentum, self.schedule)
            correct_(self.learn, self.constants, self.schedule)
        return new_buffers

    def eager(self, indices: Mapping[str, Tensor]) -> None:
        """One step, its new buffers taken as the state's."""
        self.buffers = {n: v.detach() for n, v in self.step(indices).items()}

    def segment(self, batches: TensorDict, start: int, end: int, graphs: bool) -> None:
        """Steps ``start`` to ``end`` (exclusive) of the active clients, all of one shape."""

        def at(t: int) -> dict[str, Tensor]:
            return {name: b[t, : self.active] for name, b in batches.items()}

        device = next(iter(self.learn.values())).device
        graphed = graphs and not self.graphs_failed and device.type == "cuda"
        if not graphed or end - start < GRAPH_MIN_STEPS:
            for t in range(start, end):
                self.eager(at(t))
            return
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            for t in range(start, start + WARM_STEPS):
                self.eager(at(t))
        torch.cuda.current_stream(device).wait_stream(side)
        replay = self._capture(at(start + WARM_STEPS), device)
        for t in range(start + WARM_STEPS, end):
            if replay is None:
                self.eager(at(t))
            else:
                replay(at(t))

    def _capture(self, indices: dict[str, Tensor], device: torch.device) -> Callable | None:
        """The step captured as a CUDA graph: ``replay(indices)``, or None if it cannot be."""
        static = {name: i.clone() for name, i in indices.items()}
        self.buffers = {n: v.clone() for n, v in self.buffers.items()}  # the graph's inputs
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                new_buffers = self.step(static)
                for name, value in new_buffers.items():
                    self.buffers[name].copy_(value)
        except Exception:  # noqa: BLE001 - any capture failure: eager steps instead
            self.graphs_failed = True
            torch.cuda.synchronize(device)
            return None

        def replay(indices: Mapping[str, Tensor]) -> None:
            for name, i in indices.items():
                static[name].copy_(i)
            graph.replay()

        return replay

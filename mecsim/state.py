"""Model state and payloads as named tensors.

A model's state is two flat dicts (``params``, ``buffers``) keyed like
``model.named_parameters()``; this is what ``torch.func.functional_call``
takes, and what batched executors stack across clients. A payload is a flat
dict of named tensors; its size in bytes is derived from dtype and numel,
never typed in by hand.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

TensorDict = dict[str, Tensor]
Payload = dict[str, Tensor]


@dataclass(slots=True)
class ModelState:
    """Parameters and buffers of one model."""

    params: TensorDict
    buffers: TensorDict

    @classmethod
    def of(cls, model: nn.Module) -> ModelState:
        """A detached copy of ``model``'s parameters and buffers."""
        return cls(
            {k: v.detach().clone() for k, v in model.named_parameters()},
            {k: v.detach().clone() for k, v in model.named_buffers()},
        )

    @classmethod
    def from_payload(cls, payload: Payload, template: ModelState) -> ModelState:
        """A state viewing a payload's tensors (at least ``template``'s keys); no copy.

        Sharing storage is safe: mecsim never updates a state in place (the
        trainer and aggregation build new tensors).
        """
        missing = [k for k in (*template.params, *template.buffers) if k not in payload]
        if missing:
            raise KeyError(
                f"payload lacks {len(missing)} model entries (first: {missing[0]!r}); "
                "merge a partial payload into a state with ModelState.merge"
            )
        return cls(
            {k: payload[k] for k in template.params},
            {k: payload[k] for k in template.buffers},
        )

    def merge(self, payload: Payload) -> ModelState:
        """A copy of this state with the entries ``payload`` holds replaced (partial downloads).

        Keys of the payload that this state lacks are ignored: a payload may
        carry other tensors (control variates, logits) beside model entries.
        """
        return ModelState(
            {k: payload.get(k, v) for k, v in self.params.items()},
            {k: payload.get(k, v) for k, v in self.buffers.items()},
        )

    def select(self, keys: Iterable[str]) -> Payload:
        """The entries named ``keys`` as a payload (shared storage, no copy)."""
        flat = self.to_payload()
        return {k: flat[k] for k in keys}

    def clone(self) -> ModelState:
        return ModelState(
            {k: v.clone() for k, v in self.params.items()},
            {k: v.clone() for k, v in self.buffers.items()},
        )

    def to_payload(self) -> Payload:
        """All parameters and buffers as one flat payload (shared storage, no copy)."""
        return {**self.params, **self.buffers}

    def num_params(self) -> int:
        return sum(p.numel() for p in self.params.values())

    @property
    def device(self) -> torch.device:
        """Where the parameters live (``meta`` in cost-only runs)."""
        return next(iter(self.params.values())).device

    def to(self, device: torch.device | str) -> ModelState:
        return ModelState(
            {k: v.to(device) for k, v in self.params.items()},
            {k: v.to(device) for k, v in self.buffers.items()},
        )


def zeros_like(tensors: TensorDict, device: torch.device | None = None) -> TensorDict:
    """A zero tensor for every entry of ``tensors`` (control variates, gradient states), on
    each entry's device or on ``device``.

    Built with ``torch.zeros`` rather than ``torch.zeros_like``: on the meta
    device (cost-only runs) the latter is a Python reference that imports
    SymPy, 0.2 s and 27 MB.
    """
    return {
        k: torch.zeros(v.shape, dtype=v.dtype, device=v.device if device is None else device)
        for k, v in tensors.items()
    }


def payload_nbytes(payload: Payload | None) -> int:
    """Bytes on the wire: sum of ``numel * element_size`` over the payload's tensors."""
    if not payload:
        return 0
    return sum(t.nbytes for t in payload.values())


def state_nbytes(state: object) -> int:
    """Bytes of the tensors ``state`` holds (nested dicts, lists, tuples, ModelStates).

    A tensor referenced twice (a payload viewed as a state) is counted once.
    Meta tensors (cost-only runs) count the bytes they stand for, every time:
    cost-only executors may let one meta tensor stand for many clients' values.
    """
    seen: set[int] = set()
    total = 0
    stack = [state]
    while stack:
        item = stack.pop()
        if isinstance(item, Tensor):
            if item.is_meta or id(item) not in seen:
                seen.add(id(item))
                total += item.nbytes
        elif isinstance(item, ModelState):
            stack.extend(item.params.values())
            stack.extend(item.buffers.values())
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return total

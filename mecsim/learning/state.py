"""Model state and payloads as named tensors.

A model's state is two flat dicts (``params``, ``buffers``) keyed like
``model.named_parameters()``; this is what ``torch.func.functional_call``
takes, and what batched executors stack across clients. A payload is a flat
dict of named tensors; its size in bytes is derived from dtype and numel,
never typed in by hand.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn

TensorDict = dict[str, Tensor]
Payload = dict[str, Tensor]


@dataclass(slots=True)
class ModelState:
    """Parameters and buffers of one model."""

    params: TensorDict
    buffers: TensorDict
    _meta_nbytes: int | None = field(default=None, init=False, repr=False, compare=False)
    _view: tuple[Payload, ModelState] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    """As a template: the payload last viewed through it, and that view."""

    def __getstate__(self) -> tuple:
        return (self.params, self.buffers, self._meta_nbytes)  # not the last view

    def __setstate__(self, state: tuple) -> None:
        self.params, self.buffers, self._meta_nbytes = state
        self._view = None

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
        trainers update copies of their own; aggregation builds new tensors).
        For the same reason, the
        clients of a broadcast share one state: a second call with the same
        payload and template, whose entries are still the same tensors, returns
        the state the first call built (100,000 clients, one view). The
        template remembers its last view (never pickled).
        """
        last = template._view
        if last is not None and last[0] is payload and last[1].views(payload):
            return last[1]
        missing = [k for k in (*template.params, *template.buffers) if k not in payload]
        if missing:
            raise KeyError(
                f"payload lacks {len(missing)} model entries (first: {missing[0]!r}); "
                "merge a partial payload into a state with ModelState.merge"
            )
        view = cls(
            {k: payload[k] for k in template.params},
            {k: payload[k] for k in template.buffers},
        )
        template._view = (payload, view)
        return view

    def views(self, payload: Payload) -> bool:
        """Whether every entry of this state is the very tensor ``payload`` holds under its key."""
        get = payload.get
        return all(get(k) is v for k, v in self.params.items()) and all(
            get(k) is v for k, v in self.buffers.items()
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

    def meta_nbytes(self) -> int | None:
        """Bytes the state's tensors stand for when all of them are meta tensors (cost-only
        runs), computed once per state; None when any tensor holds values."""
        if self._meta_nbytes is None:
            tensors = [*self.params.values(), *self.buffers.values()]
            meta = all(t.is_meta for t in tensors)
            self._meta_nbytes = sum(t.nbytes for t in tensors) if meta else -1
        return None if self._meta_nbytes < 0 else self._meta_nbytes

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


def stack(dicts: Sequence[TensorDict]) -> TensorDict:
    """Per key, the tensors of ``dicts`` stacked along a new leading dimension (one entry
    per dict, in order): what vmapped code over many clients' states takes."""
    return {k: torch.stack([d[k] for d in dicts]) for k in dicts[0]} if dicts else {}


def by_identity(size: Callable[[Any], int]) -> Callable[[Any], int]:
    """``size`` memoized by object identity, for objects alive while the memo is used."""
    memo: dict[int, int] = {}

    def sized(obj: Any) -> int:
        key = id(obj)
        found = memo.get(key)
        if found is None:
            found = memo[key] = size(obj)
        return found

    return sized


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
    if type(state) is dict and not state:  # a fresh client's state
        return 0
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
            meta = item.meta_nbytes()
            if meta is not None:
                total += meta
                continue
            stack.extend(item.params.values())
            stack.extend(item.buffers.values())
        elif isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return total


FINITE_CHUNK = 1 << 16
"""Tensors of fewer elements are checked by :func:`all_finite` in concatenated pieces of
about this many, larger ones alone (a concatenation would copy them)."""


def all_finite(tensors: Iterable[Tensor], *, through_bases: bool = False) -> bool:
    """Whether every element of every tensor is finite, read back from the device once.

    Each large tensor, and each concatenated piece of small ones (per device and
    dtype), is reduced to its least and greatest element (``aminmax``: one read, no
    copy; NaN propagates, infinities are extremes), and all of them are tested at once:
    a check of many clients' weights costs one reduction per large tensor and one
    synchronisation per device and dtype, not two kernels and a synchronisation per tensor.

    ``through_bases``: a view is checked through the tensor it views, each such base
    once (the batched trainer's clients are rows of a few stacked tensors): it never
    misses a non-finite element but may find one outside the views, so a False
    answer is only a reason to check exactly.
    """
    if through_bases:
        tensors = _distinct_bases(tensors)
    pending: dict[tuple[torch.device, torch.dtype], list[Tensor]] = {}
    held: dict[tuple[torch.device, torch.dtype], int] = {}
    extremes: dict[tuple[torch.device, torch.dtype], list[Tensor]] = {}  # in their own dtype

    def reduce(key: tuple[torch.device, torch.dtype], pieces: list[Tensor]) -> None:
        whole = pieces[0] if len(pieces) == 1 else torch.cat(pieces)
        extremes.setdefault(key, []).extend(torch.aminmax(whole))

    for t in tensors:
        if t.is_complex():  # finite when both parts are
            t = torch.view_as_real(t)
        if not t.is_floating_point() or t.is_meta or not t.numel():
            continue
        key = (t.device, t.dtype)
        if t.numel() >= FINITE_CHUNK:
            reduce(key, [t])
            continue
        group = pending.setdefault(key, [])
        group.append(t.reshape(-1))
        held[key] = held.get(key, 0) + t.numel()
        if held[key] >= FINITE_CHUNK:
            reduce(key, group)
            group.clear()
            held[key] = 0
    for key, group in pending.items():
        if group:
            reduce(key, group)
    return all(bool(torch.isfinite(torch.stack(found)).all()) for found in extremes.values())


def _distinct_bases(tensors: Iterable[Tensor]) -> list[Tensor]:
    """The tensors that ``tensors`` view (a tensor that is no view stands for itself),
    each once: aliases of one memory (two ``detach()`` of a stack) count once."""
    bases: dict[tuple, Tensor] = {}
    for t in tensors:
        base = t if t._base is None else t._base
        key = (base.device, base.dtype, base.data_ptr(), tuple(base.shape), base.stride())
        bases.setdefault(key, base)
    return list(bases.values())

"""Aggregation rules as pure functions of payloads and weights."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from mecsim.state import Payload


def weighted_average(payloads: Sequence[Payload], weights: Sequence[float]) -> Payload:
    """Weighted average of payloads with the same keys (FedAvg's rule).

    Weights are normalized to sum to 1. Floating tensors are averaged; integer
    tensors (BatchNorm's ``num_batches_tracked``) take the weighted average
    rounded down, which keeps them integers.
    """
    if not payloads:
        raise ValueError("weighted_average needs at least one payload")
    if len(payloads) != len(weights):
        raise ValueError(f"{len(payloads)} payloads but {len(weights)} weights")
    total = float(sum(weights))
    if total <= 0:
        raise ValueError("weights must have a positive sum")
    if any(t.is_meta for t in payloads[0].values()):
        # cost-only runs: meta tensors carry shapes, not values; skip O(K) stacking
        return {k: torch.empty_like(v) for k, v in payloads[0].items()}
    coefficients = [w / total for w in weights]
    averaged: Payload = {}
    for key, first in payloads[0].items():
        stacked = torch.stack([p[key].to(torch.float64) for p in payloads])
        coef = torch.tensor(coefficients, dtype=torch.float64, device=first.device)
        mean = torch.tensordot(coef, stacked, dims=1)
        averaged[key] = (
            mean.floor().to(first.dtype) if not first.is_floating_point() else mean.to(first.dtype)
        )
    return averaged

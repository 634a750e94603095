"""Model spectra and their divergence (spectral co-distillation, Chen et al. 2023, Sec. 3.2-3.3).

The weight vector w in R^d is ONE flattened vector: every trainable
parameter (weights and biases, not BatchNorm running statistics),
flattened and concatenated in the model's ``named_parameters`` order. This
follows the paper's definition of s over "an input vector of the weights of
a DNN model" of dimension d, and its stated FFT cost Theta(d log d); a
per-layer transform would instead mix spectra of different lengths.

s(w) = |DFT(w)| computed with ``torch.fft.fft`` (full length d, so
truncation to the first ceil(tau d) entries means what the paper says), then
normalized to sum 1 so the divergence is a KL divergence. Everything is
differentiable: gradients flow through the FFT into the weights.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from mecsim.state import TensorDict

EPS = 1e-12


def flatten_weights(params: TensorDict, names: list[str] | tuple[str, ...]) -> Tensor:
    """The weight vector w: ``params[name]`` flattened and concatenated in ``names`` order."""
    return torch.cat([params[n].reshape(-1) for n in names])


def spectrum(weights: Tensor, tau: float = 1.0) -> Tensor:
    """Normalized spectrum vector: |FFT(w)|, truncated to the first ceil(tau d) entries, sum 1."""
    magnitude = torch.fft.fft(weights).abs()
    keep = math.ceil(tau * weights.shape[-1])
    magnitude = magnitude[..., :keep]
    return magnitude / magnitude.sum(dim=-1, keepdim=True).clamp_min(EPS)


def divergence(p: Tensor, q: Tensor) -> Tensor:
    """D(p || q) = sum_i p_i log p_i - p_i log q_i (KL for stochastic vectors; 0 log 0 = 0)."""
    return (p * (torch.log(p.clamp_min(EPS)) - torch.log(q.clamp_min(EPS)))).sum(dim=-1)


def fft_flops(d: int) -> int:
    """FLOPs of one length-d complex FFT (5 d log2 d, the usual radix-2 count)."""
    return int(5 * d * math.log2(max(d, 2)))

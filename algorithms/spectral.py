"""Model spectra and their divergence (spectral co-distillation, Chen et al. 2023, Sec. 3.2-3.3).

Four readings, chosen by ``algorithm.spectral`` of :mod:`mecsim.algorithms.scd`: three
scalings of the same differentiable spectra, and the authors' code's intent.

``raw``, ``kl`` and ``unit_mean`` (eqs. 4-5; they differ only in the spectra's scale)
    The weight vector w in R^d is ONE flattened vector of every trainable
    parameter (weights and biases, not BatchNorm running statistics) in
    ``named_parameters`` order: the paper's "input vector of the weights of a
    DNN model", with its stated FFT cost Theta(d log d). s(w) = |DFT(w)|
    (``torch.fft.fft``, full length d, so truncation to the first ceil(tau d)
    entries means what the paper says), and D(p||q) = sum_i p_i log p_i - p_i log q_i
    (eq. 3). ``raw``: the magnitudes as computed, the definition as written.
    ``kl``: at unit sum, the KL divergence Sec. 3.5 calls it equivalent to.
    ``unit_mean`` (the default): each entry divided by the mean entry, so D is d
    times ``kl``'s (d = 13,706 for cnn-small, 11.2 M for ResNet-18): a strength
    mecsim chose, not the paper's. Why: on raw spectra D is no divergence (both sums
    differ, D goes negative and is smallest at p = q/e) and its gradient is
    160-12,000 times the cross-entropy's at lambda = 0.01; normalized to unit
    sum (a KL divergence) it is 4e-7 to 2e-3 of it, so the term did nothing.
    Unit mean keeps both vectors' sums equal (d), so D >= 0 with equality only
    at p = q, does not depend on the weights' overall scale, and, like the
    paper's sum of d raw entries, adds d per-entry log-ratios of order 1 (it
    is d times the unit-sum KL). Gradient of lambda D against the
    cross-entropy's, measured on a random batch with the two models 1-10 %
    apart: cnn-small (d = 13,706) 0.9-5.9 at lambda 0.01 and 2-13 at lambda
    0.05, tau 0.4; ResNet-18 (d = 11.2 M) 4-30 at lambda 0.01. Differentiable:
    gradients flow through the FFT into the weights.

``authors_intent`` (the loss functions of ``jimmyc96/spectral-dis-FL``, ``util/update.py``)
    The spectrum of every module's ``weight`` (conv, linear, BatchNorm): a
    2-D FFT of the weight reshaped to [out, -1] (1-D weights: a 1-D FFT),
    flattened and concatenated, magnitudes normalized to sum 1
    (:func:`layer_spectrum`). The divergence is ``KLDivLoss`` of the
    log-softmax of one spectrum against the other (``reduction="batchmean"``
    on a 1-D vector and the default ``"mean"`` both divide the sum by its
    length: :func:`authors_kl`). The spectra are computed from ``.data``
    through numpy, so **no gradient flows through the spectral terms**: they
    change the loss value, never the update. See :mod:`mecsim.algorithms.scd`
    for which models the terms compare and the proximal norm that does train.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from mecsim.learning.state import TensorDict

EPS = 1e-12


def flatten_weights(params: TensorDict, names: list[str] | tuple[str, ...]) -> Tensor:
    """The weight vector w: ``params[name]`` flattened and concatenated in ``names`` order."""
    return torch.cat([params[n].reshape(-1) for n in names])


SCALES = ("raw", "kl", "unit_mean")
"""How a spectrum is scaled: as computed (eq. 3 as written), to unit sum (a distribution:
D is the KL divergence) or to unit mean (d times the unit-sum KL)."""


def spectrum(weights: Tensor, tau: float = 1.0, scale: str = "unit_mean") -> Tensor:
    """|FFT(w)|, its first ceil(tau d) entries, scaled as ``scale`` (one of :data:`SCALES`)."""
    magnitude = torch.fft.fft(weights).abs()
    keep = math.ceil(tau * weights.shape[-1])
    magnitude = magnitude[..., :keep]
    if scale == "raw":
        return magnitude
    total = (
        magnitude.sum(dim=-1, keepdim=True)
        if scale == "kl"
        else magnitude.mean(dim=-1, keepdim=True)
    )
    return magnitude / total.clamp_min(EPS)


def divergence(p: Tensor, q: Tensor) -> Tensor:
    """D(p || q) = sum_i p_i log p_i - p_i log q_i (eq. 3; 0 log 0 = 0)."""
    return (p * (torch.log(p.clamp_min(EPS)) - torch.log(q.clamp_min(EPS)))).sum(dim=-1)


def weight_names(params: TensorDict) -> list[str]:
    """The parameters the authors' code transforms: every module's ``weight``."""
    return [name for name in params if name.rsplit(".", 1)[-1] == "weight"]


def layer_spectrum(params: TensorDict, names: Sequence[str]) -> Tensor:
    """The authors' spectrum: per weight a 2-D FFT of it as [out, -1] (a 1-D FFT of a 1-D
    weight), magnitudes flattened and concatenated, normalized to sum 1; no gradient."""
    parts = []
    for name in names:
        weight = params[name].detach()
        if weight.dim() >= 2:
            parts.append(torch.fft.fft2(weight.reshape(weight.shape[0], -1)).abs().reshape(-1))
        else:
            parts.append(torch.fft.fft(weight).abs())
    magnitude = torch.cat(parts)
    return magnitude / magnitude.sum().clamp_min(EPS)


def authors_kl(inputs: Tensor, target: Tensor) -> Tensor:
    """``KLDivLoss`` of ``log_softmax(inputs)`` against ``target`` over a 1-D vector:
    sum_i target_i (log target_i - log_softmax(inputs)_i) / length (``batchmean`` on a
    1-D input and the default ``mean`` agree)."""
    log_inputs = torch.log_softmax(inputs, dim=-1)
    pointwise = target * (torch.log(target.clamp_min(EPS)) - log_inputs)
    return pointwise.sum(dim=-1) / inputs.shape[-1]

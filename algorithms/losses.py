"""Loss helpers algorithms compose: cross-entropy, proximal terms, distillation.

Every helper is a pure tensor function, so losses built from them run
unchanged one client at a time or vmapped over many (see :mod:`mecsim.learning.training`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import Tensor

from mecsim.learning.state import ModelState, TensorDict
from mecsim.learning.training import Batch, Forward, Loss


def cross_entropy(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean cross-entropy of ``logits`` against integer ``labels``.

    Written as log-softmax, gather and mean rather than ``F.cross_entropy``:
    equal within float rounding, but under ``vmap`` ``nll_loss`` runs a Python
    decomposition that is 1.4x slower and imports sympy (0.15 s of start-up).
    """
    return -F.log_softmax(logits, dim=-1).gather(-1, labels.unsqueeze(-1)).mean()


def cross_entropy_loss(split: str = "train") -> Loss:
    """The plain supervised loss: cross-entropy of the trained model on ``batch[split]``."""

    def loss(forward: Forward, params: TensorDict, batch: Batch, consts: TensorDict) -> Tensor:
        data = batch[split]
        return cross_entropy(forward(data["x"])["logits"], data["y"])

    return loss


def proximal(
    params: TensorDict, reference: TensorDict, keys: Iterable[str] | None = None
) -> Tensor:
    """sum over ``keys`` (default: the reference's) of ||params[k] - reference[k]||^2."""
    names = reference if keys is None else keys
    return sum(((params[k] - reference[k]) ** 2).sum() for k in names)  # type: ignore[return-value]


def proximal_cross_entropy(split: str, weight: float) -> Loss:
    """CE on ``batch[split]`` + weight/2 ||params - anchor||^2, the anchor being the task's
    constants (FedProx's w_G, Ditto's w_G for the personal model, pFedMe's w in eq. 7)."""
    ce = cross_entropy_loss(split)

    def loss(forward: Forward, params: TensorDict, batch: Batch, anchor: TensorDict) -> Tensor:
        return ce(forward, params, batch, anchor) + weight / 2 * proximal(params, anchor)

    return loss


def inner_product(params: TensorDict, direction: TensorDict) -> Tensor:
    """sum over the direction's keys of <params[k], direction[k]> (linear correction terms)."""
    return sum((params[k] * direction[k]).sum() for k in direction)  # type: ignore[return-value]


def distillation_kl(student_logits: Tensor, teacher_logits: Tensor, temperature: float) -> Tensor:
    """T^2 KL(softmax(teacher / T) || softmax(student / T)), averaged over the batch.

    The T^2 factor keeps gradient magnitudes comparable across temperatures
    (Hinton et al. 2015).
    """
    log_student = F.log_softmax(student_logits / temperature, dim=-1)
    log_teacher = F.log_softmax(teacher_logits / temperature, dim=-1)
    kl = (log_teacher.exp() * (log_teacher - log_student)).sum(dim=-1).mean()
    return temperature**2 * kl


def cosine_similarity(a: Tensor, b: Tensor, eps: float = 1e-8) -> Tensor:
    """Row-wise cosine similarity of two [batch, features] tensors (features flattened)."""
    a, b = a.flatten(1), b.flatten(1)
    return (a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1)).clamp_min(eps)


def detached(outputs: dict[str, Tensor]) -> dict[str, Tensor]:
    """Outputs of a reference model with gradients cut."""
    return {k: torch.Tensor.detach(v) for k, v in outputs.items()}


def prefixed(prefix: str, state: ModelState) -> TensorDict:
    """A model's tensors as task constants named ``prefix + key`` (a teacher, the global model)."""
    return {f"{prefix}{k}": v for k, v in state.to_payload().items()}


def unprefixed(prefix: str, consts: TensorDict) -> TensorDict:
    """The tensors :func:`prefixed` stored under ``prefix``, by their own names."""
    return {k[len(prefix) :]: v for k, v in consts.items() if k.startswith(prefix)}


def soft_cross_entropy(logits: Tensor, target: Tensor) -> Tensor:
    """Cross-entropy of ``logits`` against target class probabilities, averaged over the batch."""
    return -(target * F.log_softmax(logits, dim=-1)).sum(dim=-1).mean()


def kl_to_target(logits: Tensor, target: Tensor, temperature: float = 1.0) -> Tensor:
    """T^2 KL(target || softmax(logits / T)) for target probabilities, averaged over the batch."""
    log_student = F.log_softmax(logits / temperature, dim=-1)
    kl = (torch.xlogy(target, target) - target * log_student).sum(dim=-1).mean()
    return temperature**2 * kl


def mean_absolute_error(logits: Tensor, target: Tensor) -> Tensor:
    """Mean |logits - target| over classes and batch (FedMD's digest loss on class scores)."""
    return (logits - target).abs().mean()


def inference_loss(outputs: TensorDict) -> float:
    """Mean cross-entropy of an inference task's logits against its split's labels
    (infinite without samples; 0 in cost-only runs, which have no values)."""
    if outputs["logits"].is_meta:
        return 0.0
    if len(outputs["logits"]) == 0:
        return math.inf
    return float(F.cross_entropy(outputs["logits"].float(), outputs["labels"]))


def inference_accuracy(outputs: TensorDict) -> float:
    """Accuracy of an inference task's logits against its split's labels."""
    logits = outputs["logits"]
    if logits.is_meta or len(logits) == 0:
        return 0.0
    return float((logits.argmax(dim=1) == outputs["labels"]).float().mean())

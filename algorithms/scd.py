"""Spectral co-distillation (Chen et al., NeurIPS 2023), Algorithm 1.

Weight vector and spectrum: see :mod:`mecsim.algorithms.spectral` (one
flattened vector of all trainable parameters, |FFT| normalized to sum 1).

* Generic task, eq. (5) — GMUpdate from w_G^{t-1}:
  ``L^G = CE(w_G,i) + lambda_g D( s_tau(w_G,i) || s_tau(w_p,i^{t-1}) )``,
  the truncated spectra (first ceil(tau d) entries, tau = 0.4) of the generic
  model and of the client's personal model *before* this round.
* Personal task, eq. (4) — PMUpdate from w_p,i^{t-1}:
  ``L^p = CE(w_p,i) + lambda_p D( s(w_p,i) || s(w_G,i^t) )``, the full spectra
  of the personal model and of this round's *updated* generic model.

The target spectrum of each term is a constant of the task, computed once
in :meth:`task_constants`; the trainable model's spectrum is recomputed every
step with gradients. Defaults are the paper's (appendix B and Tables 6-8 on
CIFAR-10): SGD with lr 0.01 (eta_G = eta_p), momentum 0.5, batch 10; tau 0.4,
lambda_g 0.05, lambda_p 0.01.
"""

from __future__ import annotations

from pydantic import Field

from mecsim.algorithms.base import MAX_LR, ClientState, RoundContext, Task
from mecsim.algorithms.losses import cross_entropy_loss
from mecsim.algorithms.pflplus import PFLPlus, PFLPlusSettings
from mecsim.algorithms.registry import ALGORITHMS
from mecsim.algorithms.spectral import divergence, fft_flops, flatten_weights, spectrum
from mecsim.state import ModelState, Payload, TensorDict
from mecsim.training import Loss


class SCDSettings(PFLPlusSettings):
    batch_size: int = Field(default=10, ge=1, description="appendix B: batch 10 (CIFAR-10/100)")
    lr: float = Field(default=0.01, gt=0, le=MAX_LR, description="appendix B: eta_G = eta_p = 0.01")
    momentum: float = Field(default=0.5, ge=0, lt=1, description="appendix B: SGD momentum 0.5")
    tau: float = Field(default=0.4, gt=0, le=1, description="truncation ratio of eq. (5)")
    lambda_g: float = Field(default=0.05, ge=0, description="weight of the generic term, eq. (5)")
    lambda_p: float = Field(default=0.01, ge=0, description="weight of the personal term, eq. (4)")


@ALGORITHMS.register("scd", "spectral co-distillation, eqs. (4)-(5) of Chen et al. 2023 (PFL+)")
class SCD(PFLPlus):
    """Spectral co-distillation: generic and personal models distil each other's spectra."""

    Settings = SCDSettings

    def _tau(self, task: Task) -> float:
        return self.settings.tau if task.name == "generic" else 1.0

    def task_constants(
        self, task: Task, state: ClientState, payload: Payload | None, ctx: RoundContext
    ) -> TensorDict:
        names = list(self.initial.params)
        # eq. (5): the personal model before this round; eq. (4): the updated generic model
        teacher = state["personal"] if task.name == "generic" else state["generic"]
        return {"target": spectrum(flatten_weights(teacher.params, names), self._tau(task))}

    def loss(self, task: Task) -> Loss:
        names = list(self.initial.params)
        tau = self._tau(task)
        weight = self.settings.lambda_g if task.name == "generic" else self.settings.lambda_p
        ce = cross_entropy_loss(task.split)

        def spectral_loss(forward, params, batch, consts):
            student = spectrum(flatten_weights(params, names), tau)
            return ce(forward, params, batch, consts) + weight * divergence(
                student, consts["target"]
            )

        return spectral_loss

    def extra_flops(self, task: Task, start: ModelState, steps: int) -> int:
        # per step: FFT of the weights forward and its gradient (~2 FFTs), plus the KL
        d = start.num_params()
        return steps * (2 * fft_flops(d) + 10 * d) + fft_flops(d)  # + the target, once

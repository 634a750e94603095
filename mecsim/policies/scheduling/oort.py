"""Oort (Lai, Zhu, Madhyastha and Chowdhury, "Oort: Efficient Federated Learning via
Guided Participant Selection", OSDI 2021, Algorithm 1):

* a client's utility is its statistical utility ``|B_i| L_i`` plus a staleness bonus
  ``sqrt(0.1 ln R / L(i))`` (R: this round, L(i): the round it last took part in),
  times ``(T / t_i)^alpha`` when its last job took longer (``t_i``) than the preferred
  round duration ``T``;
* a share ``epsilon`` of the ``k`` slots explores: clients never heard from, drawn in
  proportion to their device speed; ``epsilon`` decays by ``exploration_decay`` each
  round down to ``min_exploration``;
* the other slots exploit: of the clients whose utility is at least ``cutoff`` x the
  (1 - epsilon) k-th largest, draw that many in proportion to utility.

The paper's statistical utility is ``|B_i| sqrt(mean of the squared sample losses)``;
a client here reports its mean loss, so ``L_i`` is that mean (a lower bound of the
root mean square). ``T`` defaults to the median last job time of the explored
clients (the paper's pacer adapts it; a fixed ``preferred_round_s`` overrides).
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import Field

from mecsim.policies.history import Candidates
from mecsim.policies.scheduling import (
    SchedulingPolicy,
    SchedulingSettings,
    Selection,
    register_scheduler,
)


class OortSettings(SchedulingSettings):
    exploration: float = Field(default=0.9, ge=0, le=1, description="initial explored share")
    exploration_decay: float = Field(default=0.98, gt=0, le=1, description="per round")
    min_exploration: float = Field(default=0.2, ge=0, le=1, description="the decay's floor")
    alpha: float = Field(default=2.0, ge=0, description="straggler penalty exponent")
    cutoff: float = Field(default=0.95, gt=0, le=1, description="exploit above this x the k-th")
    preferred_round_s: float | None = Field(
        default=None, gt=0, description="T (default: median last job time of explored clients)"
    )


@register_scheduler("oort", "statistical x system utility with exploration (Lai et al. 2021)")
class Oort(SchedulingPolicy):
    Settings = OortSettings
    uses_training = True

    def select(self, candidates: Candidates, k: int, rng: np.random.Generator) -> Selection:
        s = self.settings
        epsilon = max(s.min_exploration, s.exploration * s.exploration_decay**candidates.round)  # type: ignore[attr-defined]
        explored = ~np.isnan(candidates.loss)
        explore = min(int(round(epsilon * k)), int((~explored).sum()))
        exploit = min(k - explore, int(explored.sum()))
        explore = min(k - exploit, int((~explored).sum()))  # fill what exploiting cannot
        utility = self.utility(candidates, explored)
        chosen = _draw(rng, np.flatnonzero(explored), utility, exploit, s.cutoff)  # type: ignore[attr-defined]
        speed = candidates.flops_per_s.astype(float)
        fresh = np.flatnonzero(~explored)
        chosen += _draw(rng, fresh, speed, explore, 0.0)
        order = sorted(chosen, key=lambda i: candidates.ids[i])
        scores = np.where(explored, utility, np.nan)
        return Selection([int(candidates.ids[i]) for i in order], [float(scores[i]) for i in order])

    def utility(self, c: Candidates, explored: np.ndarray) -> np.ndarray:
        """Each explored client's utility (NaN for the others)."""
        statistical = c.num_samples * c.loss
        since = np.maximum(c.last_update, 0) + 1  # rounds are counted from 1 in the paper
        staleness = np.sqrt(0.1 * math.log(max(c.round + 1, 1)) / since)
        preferred = self.settings.preferred_round_s  # type: ignore[attr-defined]
        timed = explored & ~np.isnan(c.job_s)
        if preferred is None:
            preferred = float(np.median(c.job_s[timed])) if timed.any() else math.inf
        with np.errstate(divide="ignore", invalid="ignore"):
            slow = timed & (c.job_s > preferred)
            penalty = np.where(slow, (preferred / c.job_s) ** self.settings.alpha, 1.0)  # type: ignore[attr-defined]
        return np.where(explored, (statistical + staleness) * penalty, np.nan)


def _draw(
    rng: np.random.Generator, pool: np.ndarray, weight: np.ndarray, n: int, cutoff: float
) -> list[int]:
    """``n`` of ``pool`` (positions) without replacement, in proportion to ``weight``,
    among those whose weight is at least ``cutoff`` x the n-th largest."""
    if n <= 0:
        return []
    w = weight[pool]
    floor = cutoff * np.sort(w)[::-1][n - 1]
    eligible = pool[w >= floor]
    positive = int((weight[eligible] > 0).sum())
    p = weight[eligible] / weight[eligible].sum() if positive >= n else None
    return [int(i) for i in rng.choice(eligible, size=n, replace=False, p=p)]

"""Client scheduling: which clients a round (or an asynchronous slot) takes.

A policy is a class registered in :data:`SCHEDULERS` under ``scheduling.policy``; its
``Settings`` (a subclass of :class:`SchedulingSettings`) are the ``[scheduling]`` keys
it reads. :meth:`SchedulingPolicy.select` gets the candidates as the server knows them
(:class:`~mecsim.policies.history.Candidates`), how many to take and the round's
random stream, and answers a :class:`Selection`: the clients and the score each was
ranked by (NaN for a random draw), which the run's ``decisions`` table records.

One module per policy, named as the policy: ``uniform``, ``data_size``,
``round_robin``, ``proportional_fair``, ``best_channel``, ``age``,
``power_of_choice``, ``oort``, ``update_aware``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import numpy as np
from pydantic import Field

from mecsim.common.registry import Registry
from mecsim.common.section import Section
from mecsim.policies.history import Candidates


class SchedulingSettings(Section):
    """The ``[scheduling]`` table: the policy and its own keys."""

    policy: str = Field(default="uniform", description="the policy (mecsim list schedulers)")
    channel: Literal["reported", "pilot"] = Field(
        default="reported",
        description="the channel the server ranks by: 'reported' (each client's last "
        "transfer's SINR) or 'pilot' (each candidate's uplink measured at the decision, its "
        "fading holding into the round's upload: a quasi-static round, Yang et al. 2020)",
    )


@dataclass(frozen=True)
class Selection:
    """The clients chosen (ascending ids) and, aligned, the score each was ranked by."""

    ids: list[int]
    scores: list[float]


class SchedulingPolicy:
    """Chooses ``k`` of the candidates; subclasses implement :meth:`select`."""

    Settings: ClassVar[type[SchedulingSettings]] = SchedulingSettings
    uses_training: ClassVar[bool] = False
    """True if it ranks by what training reports (loss, update norm): a cost-only run,
    which trains nothing, cannot reproduce its choices."""
    reports_norm: ClassVar[bool] = False
    """True if it reads ``update_norm`` (the server then measures each update's norm)."""
    needs_history: ClassVar[bool] = True
    """False if it reads only ids, data sizes and device speeds (no reports kept)."""

    def __init__(self, settings: SchedulingSettings) -> None:
        self.settings = settings

    def select(self, candidates: Candidates, k: int, rng: np.random.Generator) -> Selection:
        raise NotImplementedError


SCHEDULERS: Registry[type[SchedulingPolicy]] = Registry(
    "scheduling policy", "scheduling.policy", package="mecsim.policies.scheduling"
)


def register_scheduler(name: str, description: str = ""):  # type: ignore[no-untyped-def]
    """Decorator: register a :class:`SchedulingPolicy` subclass as ``name``."""
    return SCHEDULERS.register(name, description)


def top_k(candidates: Candidates, scores: np.ndarray, k: int) -> Selection:
    """The ``k`` highest ``scores`` (NaN counts as +inf: a client the server has no
    report of yet is tried first), ties to the lower id; as a :class:`Selection`."""
    ranked = np.where(np.isnan(scores), np.inf, scores)
    order = np.lexsort((candidates.ids, -ranked))[:k]
    chosen = sorted(order, key=lambda i: candidates.ids[i])
    return Selection([int(candidates.ids[i]) for i in chosen], [float(scores[i]) for i in chosen])


def rounds_since(candidates: Candidates, last: np.ndarray) -> np.ndarray:
    """Rounds from ``last`` (a round per candidate; -1: never) to this one; NaN for never,
    which :func:`top_k` ranks first."""
    return np.where(last < 0, np.nan, candidates.round - last).astype(float)


class ShortlistSettings(SchedulingSettings):
    """The keys of a policy that first keeps a shortlist of ``d`` candidates."""

    d: int | None = Field(
        default=None, ge=1, le=10_000_000, description="candidates on the shortlist (default 2k)"
    )


def drawn(candidates: Candidates, picks: np.ndarray) -> Selection:
    """A random draw of the candidates at positions ``picks`` (scores NaN)."""
    ids = sorted(int(candidates.ids[i]) for i in picks)
    return Selection(ids, [float("nan")] * len(ids))

"""``mecsim check POLICY``: the conformance suite any scheduling policy, built-in or
plug-in, must pass (``mecsim check NAME`` runs it when NAME is a policy).

Checks, on seeded random candidate sets and on the tiny scenario of
:mod:`mecsim.commands.conformance` (8 clients, 3 a round, Rayleigh fading):

* ``choice``: ``k`` distinct candidates, ascending, one score each; the same view
  and stream give the same choice;
* ``causal``: a run of 3 rounds and one of 4 make the same first 3 rounds of
  decisions (a choice depends on nothing that happens after it);
* ``executors``: the serial and the batched executor write the same events and
  decisions;
* ``cost-only``: a cost-only run writes the serial run's events and decisions, or is
  refused because the policy ranks by what training reports;
* ``resume``: a run interrupted after round 1 and resumed writes the uninterrupted
  run's tables (a policy keeps no state a replay of the run does not rebuild).

A policy only ever receives :class:`~mecsim.policies.history.Candidates`, the reports
recorded so far: causality by construction; the ``causal`` check catches a policy
that reads the simulator behind its back.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from mecsim.commands.conformance import TINY, Outcome, resume_problems

SETTINGS = [
    "clients.count=8",
    "protocol.clients_per_round=3",
    "network.fading=rayleigh",
    "algorithm.steps=2",
    "protocol.rounds=3",
]


def random_views(seed: int = 0, count: int = 20) -> list[tuple[Any, int]]:
    """Seeded candidate sets with random reports (some unknown), each with a ``k``."""
    from mecsim.policies.history import Candidates

    rng = np.random.default_rng(seed)
    views = []
    for round_ in range(count):
        n = int(rng.integers(2, 30))

        def reports(scale: float, n: int = n) -> np.ndarray:
            values = rng.normal(0.0, scale, n)
            values[rng.random(n) < 0.3] = np.nan
            return values

        last = np.where(rng.random(n) < 0.3, -1, rng.integers(0, round_ + 1, n))
        view = Candidates(
            round=round_,
            now=float(round_),
            ids=np.sort(rng.choice(1000, n, replace=False)),
            num_samples=rng.integers(1, 500, n),
            flops_per_s=rng.uniform(1e9, 1e11, n),
            snr_db=reports(10.0),
            mean_snr_db=reports(10.0),
            loss=np.abs(reports(1.0)),
            update_norm=np.abs(reports(5.0)),
            energy_j=rng.uniform(0, 10, n),
            job_s=np.abs(reports(3.0)),
            last_selected=last,
            times_selected=rng.integers(0, 5, n),
            last_update=last,
        )
        views.append((view, int(rng.integers(1, n))))
    return views


def choice_outcome(name: str) -> Outcome:
    from mecsim.policies.scheduling import SCHEDULERS

    cls = SCHEDULERS.get(name)
    outcome = Outcome("any", "choice")
    for view, k in random_views():
        policy = cls(cls.Settings(policy=name))
        picked = policy.select(view, k, np.random.default_rng(view.round))
        again = cls(cls.Settings(policy=name)).select(view, k, np.random.default_rng(view.round))
        ids = list(picked.ids)
        problems = []
        if len(ids) != k or len(set(ids)) != k or not set(ids) <= set(view.ids.tolist()):
            problems.append(f"chose {ids} of {len(view)} candidates, asked for {k}")
        if ids != sorted(ids) or len(picked.scores) != len(ids):
            problems.append("ids not ascending, or not one score per id")
        if list(again.ids) != ids:
            problems.append("the same view and stream gave another choice")
        outcome.problems += [f"round {view.round}: {p}" for p in problems[:1]]
    return outcome


def _run(settings: list[str], **options: Any) -> Any:
    import mecsim

    return mecsim.run(copy.deepcopy(TINY), settings, write=False, **options)


def _differ(
    a: Any, b: Any, what: str, tables: tuple[str, ...] = ("events", "decisions")
) -> list[str]:
    import pandas as pd

    for table in tables:
        try:
            pd.testing.assert_frame_equal(getattr(a, table), getattr(b, table))
        except AssertionError as error:
            return [f"{what}: {table} differ ({str(error).splitlines()[0]})"]
    return []


def check_policy(name: str) -> list[Outcome]:
    """Every check of the module docstring for scheduling policy ``name``."""
    from mecsim.common.errors import MecsimError
    from mecsim.policies.scheduling import SCHEDULERS

    settings = [*SETTINGS, f"scheduling.policy={name}"]
    serial = _run(settings, executor="serial")
    longer = _run([*settings, "protocol.rounds=4"], executor="serial")
    causal = Outcome("any", "causal")
    first = longer.decisions[longer.decisions["round"] < 3].reset_index(drop=True)
    if not first.equals(serial.decisions):
        causal.problems.append("a 4-round run chose differently in rounds 0-2 than a 3-round run")
    executors = Outcome("any", "executors")
    executors.problems += _differ(serial, _run(settings, executor="batched"), "batched")
    cost = Outcome("any", "cost-only")
    if SCHEDULERS.get(name).uses_training:
        cost.skipped = "refused: it ranks by what training reports"
    else:
        try:
            dry = _run([*settings, "execution.cost_only=true"])
            cost.problems += _differ(serial, dry, "cost-only")
        except MecsimError as error:
            cost.problems.append(f"cost-only failed: {str(error).splitlines()[0]}")
    resumed = Outcome("any", "resume")
    resumed.problems += resume_problems(settings)
    return [choice_outcome(name), causal, executors, cost, resumed]

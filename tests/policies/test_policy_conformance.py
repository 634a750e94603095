"""Every built-in scheduling policy passes ``mecsim check`` (issue 47): its choices are
well formed and causal, the executors agree, cost-only agrees where it may run, and a
resumed run ends as the uninterrupted one."""

from __future__ import annotations

import pytest

from mecsim.commands.policy_conformance import check_policy
from mecsim.policies.scheduling import SCHEDULERS


@pytest.mark.parametrize("name", SCHEDULERS.names())
def test_every_builtin_policy_passes_the_conformance_suite(name):
    outcomes = check_policy(name)
    assert [o.check for o in outcomes] == ["choice", "causal", "executors", "cost-only", "resume"]
    failed = [f"{o.check}: {p}" for o in outcomes for p in o.problems]
    assert not failed
    assert bool(outcomes[3].skipped) == SCHEDULERS.get(name).uses_training


def test_a_policy_that_reads_the_future_fails_the_causal_check(monkeypatch):
    import mecsim.engine.simulation as engine
    from mecsim.policies.scheduling import SchedulingPolicy, top_k

    horizon: list[int] = []  # each run's round count, as the simulator knows it

    class Peeking(SchedulingPolicy):
        """Ranks by how many rounds the run will have: a choice that depends on its end."""

        def select(self, candidates, k, rng):
            scores = (candidates.ids * (horizon[-1] + 1)) % 7
            return top_k(candidates, scores.astype(float), k)

    original = engine.Simulation.run

    def run(self, protocol):
        horizon.append(self.protocol.rounds)
        return original(self, protocol)

    monkeypatch.setattr(engine.Simulation, "run", run)
    SCHEDULERS.add("peeking", Peeking)
    try:
        causal = next(o for o in check_policy("peeking") if o.check == "causal")
    finally:
        SCHEDULERS.remove("peeking")
    assert causal.problems and "chose differently" in causal.problems[0]

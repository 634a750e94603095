"""Every registered algorithm passes ``mecsim check`` (:mod:`mecsim.commands.conformance`) under
every protocol it declares: bytes are the payloads' nbytes, every task's FLOPs are
positive, serial = batched, and cost-only runs have the same events (or are refused)."""

from __future__ import annotations

import pytest

from mecsim.algorithms import ALGORITHMS
from mecsim.commands.conformance import check_protocol, protocols_of, render


def cases() -> list:
    return [
        pytest.param(name, kind, id=f"{name}-{kind}")
        for name in ALGORITHMS.names()
        for kind in protocols_of(name)
    ]


@pytest.mark.parametrize(("name", "kind"), cases())
def test_algorithm_conforms_under_protocol(name, kind):
    outcomes = check_protocol(name, kind)
    assert [o.check for o in outcomes] == [
        "bytes",
        "flops",
        "executors",
        "cost-only",
        "classes",
        "mix",
        "resume",
    ]
    assert all(o.ok for o in outcomes), render(name, outcomes)


@pytest.fixture
def forget_lying():
    """Tests that walk every algorithm never see the plug-in registered here."""
    import sys

    yield
    ALGORITHMS.remove("lying")
    sys.modules.pop("lying_plugin", None)


def test_mecsim_check_prints_a_table_and_fails_a_broken_plug_in(tmp_path, capsys, forget_lying):
    """A plug-in task that reports no work is caught: its FLOPs check fails and the
    command exits 1, while the checks it does pass say ok."""
    from mecsim.commands.cli import main

    plugin = tmp_path / "lying_plugin.py"
    plugin.write_text(
        "from mecsim.algorithms import ALGORITHMS\n"
        "from mecsim.algorithms.fedavg import FedAvg\n"
        "from mecsim.algorithms.base import Task\n\n"
        "@ALGORITHMS.register('lying', 'FedAvg with a second, zero-FLOP task')\n"
        "class Lying(FedAvg):\n"
        "    protocols = frozenset({'compute_and_wait'})\n"
        "    tasks = (Task('local', model='local', uploads=True),\n"
        "             Task('idle', model='local', mode='compute'))\n"
        "    def compute(self, task, state, ctx):\n"
        "        return 0\n"
    )
    assert main(["check", "lying", "--import", str(plugin)]) == 1
    out = capsys.readouterr().out
    assert "compute_and_wait   flops      FAIL" in out
    assert "compute_and_wait   bytes      ok" in out
    assert main(["check", "fedavg"]) == 0
    assert "checks of fedavg: all passed" in capsys.readouterr().out


def test_mecsim_check_catches_an_aggregate_that_ignores_the_mixing_weights():
    """The default mix hands aggregate a weighted pair; an aggregate that averages
    uniformly would move the model halfway at every arrival, whatever its staleness
    weight. The mix check fails it (the synchronous checks cannot see it)."""
    from mecsim.algorithms.aggregate import weighted_average
    from mecsim.algorithms.fedavg import FedAvg

    @ALGORITHMS.register("unweighted", "FedAvg whose aggregate ignores the weights")
    class Unweighted(FedAvg):
        def aggregate(self, server_state, uploads, ctx):
            average = weighted_average([u.payload for u in uploads], [1.0] * len(uploads))
            return {**server_state, "global": server_state["global"].merge(average)}

    try:
        outcomes = {o.check: o for o in check_protocol("unweighted", "fedasync")}
    finally:
        ALGORITHMS.remove("unweighted")
    assert outcomes["bytes"].ok and outcomes["executors"].ok
    assert not outcomes["mix"].ok and "convex mix" in outcomes["mix"].problems[0]


def test_mecsim_check_catches_a_run_its_checkpoint_cannot_reproduce():
    """An algorithm that draws from a stream outside the scenario's seeded ones (here an
    unseeded ``random.Random``) cannot be resumed to the tables it would have written:
    the resume check fails it."""
    import random

    from mecsim.algorithms.fedavg import FedAvg
    from mecsim.commands.conformance import resume_problems

    @ALGORITHMS.register("unseeded", "FedAvg with an unseeded draw in its aggregate")
    class Unseeded(FedAvg):
        def aggregate(self, server_state, uploads, ctx):
            out = super().aggregate(server_state, uploads, ctx)
            bias = out["global"].params["classifier.2.bias"] + random.Random().random()
            return {**out, "global": out["global"].merge({"classifier.2.bias": bias})}

    try:
        problems = resume_problems(["algorithm.name=unseeded"])
    finally:
        ALGORITHMS.remove("unseeded")
    assert "the resumed run's final server state differ" in problems


def test_mecsim_check_catches_a_false_client_blind_costs_claim():
    """An algorithm that claims its costs ignore the client id, but uploads half its
    model from odd clients: a cost-only run sharing results within classes of alike
    clients would send every client the representative's payload. The classes check
    fails it; with the claim withdrawn, the run is right and the check is skipped."""
    from mecsim.algorithms.fedavg import FedAvg

    @ALGORITHMS.register("oddball", "FedAvg whose odd clients upload only the first layer")
    class Oddball(FedAvg):
        protocols = frozenset({"compute_and_wait"})

        def upload(self, state, ctx):
            payload = super().upload(state, ctx)
            return dict(list(payload.items())[:2]) if ctx.client % 2 else payload

    try:
        outcomes = {o.check: o for o in check_protocol("oddball", "compute_and_wait")}
        assert outcomes["classes"].problems, render("oddball", list(outcomes.values()))
        assert "sharing results within classes changes the run" in outcomes["classes"].problems[0]
        assert outcomes["cost-only"].ok  # 4 clients of distinct sizes: no class has two
        Oddball.client_blind_costs = False
        outcomes = {o.check: o for o in check_protocol("oddball", "compute_and_wait")}
        assert outcomes["classes"].skipped and all(o.ok for o in outcomes.values())
    finally:
        ALGORITHMS.remove("oddball")


def test_the_resume_check_holds_when_the_machines_load_changes_between_runs(monkeypatch):
    # threads = 'auto' follows the idle CPUs: a loaded machine gave the uninterrupted and
    # the resumed run different counts, hence differently rounded states (ditto, fedamp
    # and fedbabu failed 'resume' in a full suite run beside another job)
    from itertools import cycle

    from mecsim.commands.conformance import resume_problems
    from mecsim.common import threads

    idle = cycle([2.0, 1.0])
    monkeypatch.setattr(threads, "idle_cpus", lambda *a, **k: next(idle))
    monkeypatch.setattr(threads, "usable_cpus", lambda: 2)
    assert resume_problems(["algorithm.name=ditto"]) == []

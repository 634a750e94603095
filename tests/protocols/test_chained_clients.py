"""Compute-and-wait clients as chains of callbacks (``mecsim.protocols.chained_clients``)
give the per-client processes' tables byte for byte, on media of several cells."""

from __future__ import annotations

import pandas as pd
import pytest

import mecsim
import mecsim.protocols.synchronous as synchronous
from tests.net.test_event_medium_runs import MOVING

STATIC = [m for m in MOVING if "mobility" not in m and "handover" not in m]


@pytest.fixture
def chained(monkeypatch) -> dict[str, int]:
    """Counts the rounds whose clients ran as chains."""
    calls = {"rounds": 0}
    chains = synchronous.chained_clients

    def counted(*args, **kwargs):
        calls["rounds"] += 1
        return (yield from chains(*args, **kwargs))

    monkeypatch.setattr(synchronous, "chained_clients", counted)
    return calls


def processes_then_chains(tiny: dict, settings: list[str]) -> tuple:
    """The run with one process per client (``execution.bulk_rounds = false``), then
    with chains."""
    return tuple(
        mecsim.run(tiny, [*settings, f"execution.bulk_rounds={flag}"], write=False)
        for flag in ("false", "true")
    )


@pytest.mark.parametrize(
    "variant",
    [
        [*STATIC, "clients.count=120"],
        [*MOVING, "clients.count=150"],
        [*MOVING, "clients.count=120", 'network.fading="rayleigh"', "network.coherence_ms=5",
         'network.downlink.mode="unicast"', "protocol.participation=0.5"],
        [*STATIC, "clients.count=40", "execution.cost_only=false", 'algorithm.name="ditto"'],
    ],
    ids=["static", "moving", "fading-unicast-half", "trained-two-tasks"],
)  # fmt: skip
def test_chains_give_the_processes_tables_byte_for_byte(tiny, chained, variant):
    """Issue 52: every event a client's process schedules, a chain schedules at the same
    point of the same step, so ties in time keep their order: the same rows, in the same
    order, to the bit (handovers, resends, fading blocks, unicasts and two tasks a round
    included)."""
    by_process, by_chain = processes_then_chains(tiny, variant)
    assert chained["rounds"] == 2  # the chained run's two rounds; none in the other
    pd.testing.assert_frame_equal(by_process.events, by_chain.events, check_exact=True)
    columns = [c for c in by_process.rounds.columns if not c.startswith("wall")]
    pd.testing.assert_frame_equal(by_process.rounds[columns], by_chain.rounds[columns],
                                  check_exact=True)  # fmt: skip
    if "mobility" in " ".join(variant):
        assert (by_chain.events["phase"] == "handover").any()


@pytest.mark.parametrize(
    "hindrance",
    [
        ["network.max_transfer_s=0.05", "network.min_snr_db=-5"],  # transfers can fail
        ["faults.dropout=0.3"],  # clients can drop out
        ["network.uplink.total_bandwidth_mhz=60"],  # uploads wait for the cell's band
        ["protocol.kind=hierarchical", "protocol.edge_rounds=2"],  # edge jobs are tracked
    ],
    ids=["deadline", "dropout", "finite-band", "hierarchical"],
)
def test_a_round_where_clients_can_fail_or_wait_keeps_one_process_each(tiny, chained, hindrance):
    result = mecsim.run(tiny, [*STATIC, "clients.count=30", *hindrance], write=False)
    assert chained["rounds"] == 0 and len(result.events)

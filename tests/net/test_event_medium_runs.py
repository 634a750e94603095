"""The event-driven medium against the stepping one (the reference), whole runs.

A few hundred moving clients in three cells, every protocol: the two engines must
give the same events table, column by column, to 1e-9 relative (they differ only
in the order of floating-point sums). Variants cover block fading (a change point
per reception per block), fixed-rate multicasts (a group at its lowest rate),
restarted transfers and a deadline that fails uploads.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import mecsim

CELLS = "network.cells=[{x_m=0, y_m=0}, {x_m=600, y_m=0}, {x_m=300, y_m=520}]"
MOVING = [
    CELLS,
    'clients.x_m={dist="uniform", low=-300, high=900}',
    'clients.y_m={dist="uniform", low=-300, high=800}',
    'clients.mobility.model="random_waypoint"',
    "clients.mobility.speed_mps=[100, 300]",
    "network.handover_time_to_trigger_s=0.02",
    "algorithm.steps=2",
    "protocol.rounds=2",
    "execution.cost_only=true",
]
PROTOCOLS = {
    "compute_and_wait": [],
    "wait_free": [],
    "deadline": ["protocol.deadline_s=3.0"],
    "fedasync": ["protocol.rounds=150"],
    "fedbuff": ["protocol.rounds=40"],
    "hierarchical": ["protocol.edge_rounds=2", "protocol.rounds=2"],
}


def assert_same_tables(a: pd.DataFrame, b: pd.DataFrame, rel: float = 1e-9) -> None:
    assert list(a.columns) == list(b.columns) and len(a) == len(b)
    for column in a.columns:
        x, y = a[column], b[column]
        if pd.api.types.is_numeric_dtype(x) and not pd.api.types.is_bool_dtype(x):
            x, y = x.to_numpy(float), y.to_numpy(float)
            assert (np.isnan(x) == np.isnan(y)).all(), column
            both = ~np.isnan(x)
            assert np.allclose(x[both], y[both], rtol=rel, atol=0.0), column
        else:
            assert (x.astype(str) == y.astype(str)).all(), column


def both_engines(tiny: dict, settings: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    event = mecsim.run(tiny, [*settings, 'network.medium="event"'], write=False).events
    stepping = mecsim.run(tiny, [*settings, 'network.medium="stepping"'], write=False).events
    return event, stepping


@pytest.mark.parametrize("kind", sorted(PROTOCOLS))
def test_every_protocol_gives_the_stepping_engines_tables(tiny, kind):
    settings = [*MOVING, "clients.count=150", f"protocol.kind={kind}", *PROTOCOLS[kind]]
    event, stepping = both_engines(tiny, settings)
    assert (event["phase"] == "handover").any()  # clients moved between cells
    assert_same_tables(event, stepping)


@pytest.mark.parametrize(
    "variant",
    [
        ['network.fading="rayleigh"', "network.coherence_ms=5"],
        ['network.downlink.broadcast_rate="worst"'],
        ['network.handover_transfer="restart"', "clients.mobility.speed_mps=[100, 200]"],
        ["network.max_transfer_s=0.05", "network.min_snr_db=-5"],
    ],
    ids=["fading", "worst-multicast", "restart", "deadline-and-outage"],
)
def test_the_engines_agree_on_fading_multicasts_restarts_and_failures(tiny, variant):
    settings = [*MOVING, "clients.count=100", *variant]
    event, stepping = both_engines(tiny, settings)
    assert_same_tables(event, stepping)


def test_a_static_run_gives_the_same_tables_and_each_change_touches_a_few(tiny, monkeypatch):
    # the point of the engine: a change point brings up to date only the receptions
    # that may end before the next one, not every open reception
    from mecsim.channels.event_medium import EventMedium

    touched: list[int] = []
    changes: list[int] = []
    evaluate, step = EventMedium._evaluate, EventMedium._step

    def counting_evaluate(self, rows, t):
        touched.append(len(rows))
        return evaluate(self, rows, t)

    def counting_step(self, t, length):
        changes.append(len(self.slots))
        return step(self, t, length)

    monkeypatch.setattr(EventMedium, "_evaluate", counting_evaluate)
    monkeypatch.setattr(EventMedium, "_step", counting_step)
    monkeypatch.setattr(EventMedium, "_searchable", lambda self: False)  # all in _evaluate
    static = [m for m in MOVING if "mobility" not in m and "handover" not in m]
    settings = [*static, "clients.count=150", "protocol.rounds=1"]
    event, stepping = both_engines(tiny, settings)
    assert_same_tables(event, stepping)
    assert sum(touched) < 0.25 * sum(changes)  # the stepping engine touches all of them


def test_the_compiled_search_gives_the_python_loops_tables_bit_for_bit(tiny, monkeypatch):
    # change_search.search brings uplink rows up to date inside the next change point's
    # search; with it off, EventMedium._evaluate does them one round at a time
    from mecsim.channels.event_medium import EventMedium

    settings = [*MOVING, "clients.count=150", 'network.medium="event"']
    rounds: list[int] = []
    search = EventMedium._search

    def counting_search(self, t, limit):
        best, left = search(self, t, limit)
        rounds.append(len(left))
        return best, left

    monkeypatch.setattr(EventMedium, "_search", counting_search)
    compiled = mecsim.run(tiny, settings, write=False).events
    monkeypatch.setattr(EventMedium, "_searchable", lambda self: False)
    python = mecsim.run(tiny, settings, write=False).events
    assert len(rounds) > 100 and rounds.count(0) > 0.5 * len(rounds)  # it did the work
    pd.testing.assert_frame_equal(compiled, python, check_exact=True)


def test_the_parallel_row_loops_give_the_serial_ones_tables_bit_for_bit(tiny, monkeypatch):
    # kernels.by_rows hands loops over many rows to their parallel twins; rows are
    # independent, so which twin runs, and on how many threads, changes no table
    from mecsim.channels import kernels

    settings = [*MOVING, "clients.count=150", 'network.medium="event"']
    monkeypatch.setattr(kernels, "PARALLEL_ROWS", 10**9)
    serial = mecsim.run(tiny, [*settings, "execution.threads=1"], write=False).events
    monkeypatch.setattr(kernels, "PARALLEL_ROWS", 1)
    for threads in (1, 2):
        spread = mecsim.run(tiny, [*settings, f"execution.threads={threads}"], write=False)
        pd.testing.assert_frame_equal(spread.events, serial, check_exact=True)

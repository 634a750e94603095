"""The event medium's compiled tick (``channels/tick_pass.py``) against its general path.

A tick where every open reception is an uplink, or uplinks beside a broadcast's
downlinks, runs its uplink rows through two compiled calls; the general path runs the
same loops from Python. The two must give the same events table to the bit.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import mecsim
from mecsim.channels.event_medium import EventMedium
from tests.net.test_event_medium_runs import MOVING


def _run(tiny: dict, settings: list[str]) -> pd.DataFrame:
    return mecsim.run(tiny, [*settings, 'network.medium="event"'], write=False).events


@pytest.mark.parametrize("kind", ["compute_and_wait", "wait_free"])
def test_the_compiled_tick_gives_the_general_paths_table_to_the_bit(tiny, monkeypatch, kind):
    settings = [*MOVING, "clients.count=120", f"protocol.kind={kind}"]
    compiled_tick = EventMedium._compiled_tick
    taken = {"uplinks only": 0, "with downlinks": 0}

    def counted(self, rows, k, t):
        downs = int((~self.slots.up[rows]).sum())
        done = compiled_tick(self, rows, k, t)
        if done:
            taken["with downlinks" if downs else "uplinks only"] += 1
        return done

    monkeypatch.setattr(EventMedium, "_compiled_tick", counted)
    fast = _run(tiny, settings)
    assert taken["uplinks only"] > 0 and taken["with downlinks"] > 0
    monkeypatch.setattr(EventMedium, "_compiled_tick", lambda self, rows, k, t: False)
    general = _run(tiny, settings)
    pd.testing.assert_frame_equal(fast, general, check_exact=True)


def test_a_power_path_loss_keeps_the_general_path(tiny, monkeypatch):
    """An odd exponent has no product form: the tick is numpy's powers, never compiled."""
    calls = []
    compiled_tick = EventMedium._compiled_tick

    def watched(self, rows, k, t):
        calls.append(compiled_tick(self, rows, k, t))
        return calls[-1]

    monkeypatch.setattr(EventMedium, "_compiled_tick", watched)
    _run(tiny, [*MOVING, "clients.count=60", "network.exponent=3.0"])
    assert calls and not any(calls)


SERIAL_ONLY = """
import mecsim
from mecsim.channels.event_medium import EventMedium
from tests.net.test_event_medium_runs import MOVING
from tests.conftest import TINY
taken, tick = [], EventMedium._compiled_tick
EventMedium._compiled_tick = lambda self, *a: taken.append(tick(self, *a)) or taken[-1]
mecsim.run(TINY, [*MOVING, "clients.count=40", 'network.medium="event"'], write=False)
assert any(taken), "no compiled tick"
"""


def test_a_process_that_has_run_no_parallel_loop_takes_the_cached_tick():
    """A compiled tick loaded from numba's cache calls parallel loops; in a process where
    none had launched numba's threads yet (40 clients: every row loop serial), it
    segfaulted. The first process may compile (and cache), the second loads."""
    root = Path(__file__).parents[2]
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", SERIAL_ONLY], cwd=root, capture_output=True,
                              text=True, timeout=600)  # fmt: skip
        assert done.returncode == 0, done.stderr[-3000:]


def test_a_tick_starts_where_the_handover_schedules_times_put_it():
    """Tick ``k`` starts at ``k * tick_s``, the product the handover schedule times its
    handovers at: ``t / tick_s`` rounds up to ``k`` at some ``t`` just below it (44.05 s
    of 10 ms ticks), which started tick 4405 before its handovers."""
    from mecsim.channels.motion import Motion

    for tick_s in (0.01, 0.005, 1 / 3, 0.1):
        motion = Motion(lambda t: (np.zeros(1), np.zeros(1)), None, [(0.0, 0.0)], tick_s,
                        np.zeros(1, dtype=np.int64))  # fmt: skip
        for k in range(1, 20_000, 7):
            start = k * tick_s
            assert motion.tick(start) == k
            assert motion.tick(np.nextafter(start, -np.inf)) == k - 1


def test_no_uplink_hears_less_than_its_floor_until_the_next_tick(tiny, monkeypatch):
    """A row's key is taken at the interference it hears at least until the next tick (its
    floor, from the senders sure to stay on the air until then); hearing less would end it
    before its key, unseen by the search."""
    checked = []
    advance = EventMedium.advance

    def watched(self, until):
        ended = advance(self, until)
        rows = self.slots.index()
        ups = rows[self.slots.up[rows]]
        if len(ups) > 16:
            heard = self._heard(self.slots.a["share_b"][ups], ups)
            floor = self.slots.a["floor"][ups]
            assert (heard >= floor).all(), (self.now, (floor - heard).max())
            checked.append(int((floor > 0).sum()))
        return ended

    monkeypatch.setattr(EventMedium, "advance", watched)
    _run(tiny, [*MOVING, "clients.count=150", "protocol.rounds=3"])
    assert sum(checked) > 1000  # floors were set and held

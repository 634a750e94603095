"""The collector's state around an event loop and a paused block: set inside, restored after."""

from __future__ import annotations

import gc

import pytest

from mecsim.common.gc_pause import EVENT_LOOP_THRESHOLDS, event_loop_gc, paused_gc


def test_an_event_loop_freezes_what_exists_and_slows_the_collector_then_restores_it():
    before = gc.get_threshold()
    assert before != EVENT_LOOP_THRESHOLDS
    gc.unfreeze()
    with pytest.raises(KeyError), event_loop_gc():
        assert gc.get_threshold() == EVENT_LOOP_THRESHOLDS
        assert gc.get_freeze_count() > 0
        raise KeyError  # a run that fails restores it too
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_a_paused_block_nests_and_restores_the_collector():
    assert gc.isenabled()
    with paused_gc():
        with paused_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()

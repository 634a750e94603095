"""Pausing Python's cyclic garbage collector around allocation-heavy, cycle-free blocks.

Building a world of a million clients, running a bulk round and tabulating it
each allocate millions of objects that live until the block ends. The
collector's full passes then rescan every one of them again and again (a
million-client cost-only round spent 8 of its 33 s there). The objects hold
no reference cycles, so reference counting frees them anyway; the collector
resumes, with its usual thresholds, when the block ends.

A simulation's event loop is the other case (:func:`event_loop_gc`): it allocates and
frees events, receptions and rows at a high rate, almost none in cycles, so the
collector's default pace (a young-generation pass every 700 net allocations) spent
~7 % of a 10,000-client round rescanning survivors. The loop collects at a slower pace
instead, so cycles, if any, are still freed.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

EVENT_LOOP_THRESHOLDS = (100_000, 50, 50)
"""The collector's thresholds while an event loop runs (Python's defaults: 700, 10, 10)."""


@contextmanager
def event_loop_gc() -> Iterator[None]:
    """For the block: what exists now frozen out of the collector (long-lived; still freed
    by reference counting) and the thresholds :data:`EVENT_LOOP_THRESHOLDS`. After it the
    thresholds are restored and every frozen object unfrozen (the collector cannot tell
    whose freeze an object came from)."""
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(*EVENT_LOOP_THRESHOLDS)
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


@contextmanager
def paused_gc() -> Iterator[None]:
    """Disable the cyclic garbage collector for the block (nests; restores its state)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()

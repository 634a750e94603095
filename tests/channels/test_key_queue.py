"""The key queue's walk against a scan of every row (the definition it stands for)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mecsim.channels.key_queue import KeyQueue


def scan(alive, up, at, logged, done_at, key, limit):
    """The earliest done_at of the fresh rows; the stale rows whose key falls before it."""
    fresh = alive & (at == np.where(up, logged[0], logged[1]))
    best = min(limit, done_at[fresh].min(initial=math.inf))
    within = best + 1e-12 * max(1.0, abs(best)) if math.isfinite(best) else math.inf
    stale = np.flatnonzero(alive & ~fresh & (key <= within))
    return best, stale


def queue_of(rows: np.ndarray, key: np.ndarray, stamp: np.ndarray, alive: np.ndarray):
    queue = KeyQueue(4)  # small: pushes grow and rebuild it
    queue.push(rows, key, stamp, alive)
    return queue


def test_the_walk_finds_the_best_fresh_end_and_the_stale_rows_before_it():
    alive = np.array([True, True, True, True, False, True])
    up = np.array([True, True, False, True, True, False])
    at = np.array([4, 2, 1, 4, 0, 0])  # logs hold 4 uplink and 1 downlink events
    done_at = np.array([7.0, 1.0, 5.0, 9.0, 0.5, 2.0])
    key = np.array([0.0, 6.0, 0.0, 0.0, 0.0, 8.0])
    stamp = np.zeros(6, dtype=np.int64)
    queue = queue_of(np.flatnonzero(alive), key, stamp, alive)
    best, rows = queue.candidates(stamp, alive, up, at, (4, 1), done_at, key, math.inf, 8)
    assert best == 5.0  # rows 0, 2 and 3 are fresh; row 4 is closed
    assert rows.tolist() == []  # row 1's key 6 and row 5's 8 fall after 5
    key -= 4.0
    queue.push(np.flatnonzero(alive), key, stamp, alive)  # new keys: the old entries stale
    best, rows = queue.candidates(stamp, alive, up, at, (4, 1), done_at, key, 4.5, 8)
    assert best == 4.5 and rows.tolist() == [1, 5]  # in key order
    assert len(queue) <= 2 * 5 + 5  # the walk dropped what it met stale


@pytest.mark.parametrize("seed", range(20))
def test_the_walk_agrees_with_a_scan_through_pushes_closes_and_reuses(seed):
    rng = np.random.default_rng(seed)
    n = 200
    alive = rng.random(n) < 0.7
    up = rng.random(n) < 0.5
    key = rng.uniform(0, 10, n)
    done_at = key + rng.exponential(3.0, n)  # never before the key
    at = rng.integers(0, 3, n)
    stamp = np.zeros(n, dtype=np.int64)
    queue = queue_of(np.flatnonzero(alive), key, stamp, alive)
    for _ in range(30):
        logged = (int(rng.integers(0, 3)), int(rng.integers(0, 3)))
        limit = math.inf if rng.random() < 0.5 else float(rng.uniform(0, 12))
        best, rows = queue.candidates(stamp, alive, up, at, logged, done_at, key, limit, n)
        expected_best, expected = scan(alive, up, at, logged, done_at, key, limit)
        assert best == expected_best
        assert sorted(rows.tolist()) == expected.tolist()
        assert np.all(np.diff(key[rows]) >= 0)  # in key order
        # the first few only: the walk stops there, and they are the scan's first
        _, first = queue.candidates(stamp, alive, up, at, logged, done_at, key, limit, 3)
        assert first.tolist() == expected[np.argsort(key[expected], kind="stable")][:3].tolist()
        # rows close, open (reusing closed rows) and get new keys, as in a run
        alive[rng.choice(n, 10)] = False
        touched = rng.choice(n, 25, replace=False)
        alive[touched] = True
        key[touched] = rng.uniform(0, 10, len(touched))
        done_at[touched] = key[touched] + rng.exponential(3.0, len(touched))
        at[touched] = rng.integers(0, 3, len(touched))
        queue.push(touched, key, stamp, alive)


@pytest.mark.parametrize("seed", range(10))
def test_the_rows_ending_by_a_time_are_those_a_scan_finds_in_row_order(seed):
    rng = np.random.default_rng(100 + seed)
    n = 300
    alive = rng.random(n) < 0.7
    up = rng.random(n) < 0.5
    at = rng.integers(0, 2, n)
    logged = (1, 1)
    key = rng.uniform(0, 10, n)
    done_at = key + rng.exponential(1.0, n)
    bits = np.full(n, 1e6)
    remaining = rng.uniform(1.0, 1e6, n)
    finished = rng.random(n) < 0.1  # done: a refresh set their key to their anchor, 0
    remaining[finished], key[finished] = 1e-4, 0.0
    stamp = np.zeros(n, dtype=np.int64)
    queue = queue_of(np.flatnonzero(alive), key, stamp, alive)
    for by in sorted(rng.uniform(0, 12, 5)):
        rows = queue.ending(stamp, alive, up, at, logged, done_at, remaining, bits, 1e-9, key, by)
        fresh = alive & (at == 1)
        expected = np.flatnonzero(fresh & ((done_at <= by) | (remaining <= 1e-9 * bits)))
        assert rows.tolist() == expected.tolist()
        again = queue.ending(stamp, alive, up, at, logged, done_at, remaining, bits, 1e-9, key, by)
        assert again.tolist() == rows.tolist()  # what the walk took it put back

"""The event medium's open receptions in order of their keys: a heap with lazy deletion.

:meth:`EventMedium._next_event <mecsim.channels.event_medium.EventMedium._next_event>`
needs the earliest ``done_at`` of the receptions brought up to date and the others
whose *key* (a time before which a reception cannot end, whatever the others do)
falls before it. A scan of every row costs the rows on the air at every change point;
walking the rows in key order stops at the first key past the best ``done_at`` found
(a row's ``done_at`` is never before its key), so it costs the few rows that matter.

Each refresh of a row pushes ``(key, row, stamp)`` with the row's stamp bumped; an
entry whose row has closed or whose stamp is old is dropped when it reaches the top.
The heap is rebuilt from the open rows when stale entries outnumber them.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


@njit(cache=True)
def _sift_up(key: np.ndarray, row: np.ndarray, stamp: np.ndarray, i: int) -> None:
    k, r, s = key[i], row[i], stamp[i]
    while i > 0:
        parent = (i - 1) >> 1
        if key[parent] <= k:
            break
        key[i], row[i], stamp[i] = key[parent], row[parent], stamp[parent]
        i = parent
    key[i], row[i], stamp[i] = k, r, s


@njit(cache=True)
def _sift_down(key: np.ndarray, row: np.ndarray, stamp: np.ndarray, i: int, n: int) -> None:
    k, r, s = key[i], row[i], stamp[i]
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        if child + 1 < n and key[child + 1] < key[child]:
            child += 1
        if key[child] >= k:
            break
        key[i], row[i], stamp[i] = key[child], row[child], stamp[child]
        i = child
    key[i], row[i], stamp[i] = k, r, s


@njit(cache=True)
def _push(hk: np.ndarray, hr: np.ndarray, hs: np.ndarray, size: np.ndarray, k: float,
          r: int, s: int) -> None:  # fmt: skip
    n = size[0]
    hk[n], hr[n], hs[n] = k, r, s
    size[0] = n + 1
    _sift_up(hk, hr, hs, n)


@njit(cache=True)
def _pop(hk: np.ndarray, hr: np.ndarray, hs: np.ndarray, size: np.ndarray) -> None:
    n = size[0] - 1
    size[0] = n
    if n > 0:
        hk[0], hr[0], hs[0] = hk[n], hr[n], hs[n]
        _sift_down(hk, hr, hs, 0, n)


@njit(cache=True)
def push_rows(hk: np.ndarray, hr: np.ndarray, hs: np.ndarray, size: np.ndarray,
              rows: np.ndarray, key: np.ndarray, stamp: np.ndarray) -> None:  # fmt: skip
    """Push each of ``rows`` at its ``key``, its ``stamp`` bumped (older entries go stale)."""
    for i in range(len(rows)):
        r = rows[i]
        stamp[r] += 1
        _push(hk, hr, hs, size, key[r], r, stamp[r])


@njit(cache=True)
def rebuild(hk: np.ndarray, hr: np.ndarray, hs: np.ndarray, size: np.ndarray,
            rows: np.ndarray, key: np.ndarray, stamp: np.ndarray) -> None:  # fmt: skip
    """The heap of ``rows`` only (at their current keys and stamps)."""
    n = len(rows)
    for i in range(n):
        hk[i], hr[i], hs[i] = key[rows[i]], rows[i], stamp[rows[i]]
    size[0] = n
    for i in range(n // 2 - 1, -1, -1):
        _sift_down(hk, hr, hs, i, n)


@njit(cache=True)
def _bound(t: float) -> float:
    """``t`` and 1e-12 relative (inf if ``t`` is)."""
    return t + 1e-12 * max(1.0, abs(t)) if math.isfinite(t) else math.inf


@njit(cache=True)
def _top(hk: np.ndarray, hr: np.ndarray, hs: np.ndarray, size: np.ndarray, alive: np.ndarray,
         stamp: np.ndarray) -> int:  # fmt: skip
    """The row of the first valid entry on top (stale ones dropped on the way); -1: none."""
    while size[0] > 0:
        r = hr[0]
        if alive[r] and stamp[r] == hs[0]:
            return r
        _pop(hk, hr, hs, size)
    return -1


@njit(cache=True)
def _append(values: np.ndarray, m: int, value: int) -> np.ndarray:
    """``values`` with ``value`` at ``m`` (grown when full)."""
    if m == len(values):
        values = np.concatenate((values, np.empty(m, dtype=np.int64)))
    values[m] = value
    return values


@njit(cache=True)
def candidates(
    hk: np.ndarray, hr: np.ndarray, hs: np.ndarray, size: np.ndarray, stamp: np.ndarray,
    alive: np.ndarray, up: np.ndarray, at: np.ndarray, logged_up: int, logged_down: int,
    done_at: np.ndarray, key: np.ndarray, limit: float, most: int,
) -> tuple[float, np.ndarray]:  # fmt: skip
    """(the earliest ``done_at`` of the open rows brought up to date with every event of
    their direction's log, at most ``limit``; the other open rows whose key falls at or
    before it, to 1e-12 relative, in key order, the first ``most`` of them): the rows
    walked in key order until a key passes the best ``done_at`` so far or ``most`` are
    found, then put back. (A row's ``done_at`` is never before its key, so the first
    ``most`` do not depend on the rows walked after them.)"""
    best = limit
    taken, found = np.empty(64, dtype=np.int64), np.empty(64, dtype=np.int64)
    m = f = 0
    while True:
        r = _top(hk, hr, hs, size, alive, stamp)
        if r < 0 or hk[0] > _bound(best):
            break
        _pop(hk, hr, hs, size)
        taken = _append(taken, m, r)
        m += 1
        if at[r] == (logged_up if up[r] else logged_down):
            best = min(best, done_at[r])
        else:
            found = _append(found, f, r)
            f += 1
            if f == most:
                break
    for j in range(m):  # put back (their keys are unchanged)
        _push(hk, hr, hs, size, key[taken[j]], taken[j], stamp[taken[j]])
    within, kept = _bound(best), 0
    for j in range(f):
        if key[found[j]] <= within:
            found[kept] = found[j]
            kept += 1
    return best, found[:kept]


@njit(cache=True)
def ending(
    hk: np.ndarray, hr: np.ndarray, hs: np.ndarray, size: np.ndarray, stamp: np.ndarray,
    alive: np.ndarray, up: np.ndarray, at: np.ndarray, logged_up: int, logged_down: int,
    done_at: np.ndarray, remaining: np.ndarray, bits: np.ndarray, done: float,
    key: np.ndarray, by: float,
) -> np.ndarray:  # fmt: skip
    """The open rows brought up to date with every event of their direction's log that
    end, fail or start a fading block by ``by`` (``done_at``) or are done (at most ``done``
    of their ``bits`` left: their key is their anchor), in row order: the rows whose key
    falls by ``by``, walked in key order and put back."""
    found = np.empty(64, dtype=np.int64)
    f = 0
    while True:
        r = _top(hk, hr, hs, size, alive, stamp)
        if r < 0 or hk[0] > by:
            break
        _pop(hk, hr, hs, size)
        found = _append(found, f, r)
        f += 1
    kept = 0
    for j in range(f):
        r = found[j]
        _push(hk, hr, hs, size, key[r], r, stamp[r])  # put back
        if at[r] == (logged_up if up[r] else logged_down):
            if done_at[r] <= by or remaining[r] <= done * bits[r]:
                found[kept] = r
                kept += 1
    return np.sort(found[:kept])


class KeyQueue:
    """The heap's arrays, grown and rebuilt as rows are pushed (see the module docstring)."""

    def __init__(self, capacity: int = 256) -> None:
        self.key = np.empty(capacity)
        self.row = np.empty(capacity, dtype=np.int64)
        self.stamp = np.empty(capacity, dtype=np.int64)
        self.size = np.zeros(1, dtype=np.int64)

    def __len__(self) -> int:
        return int(self.size[0])

    def push(self, rows: np.ndarray, key: np.ndarray, stamp: np.ndarray, alive: np.ndarray) -> None:
        """Push ``rows`` at their ``key`` (``stamp`` bumped); with more stale entries than
        open rows, the heap is first rebuilt from the open rows (``alive``)."""
        if len(self) + len(rows) > len(self.key):
            open_rows = np.flatnonzero(alive)
            if 2 * len(open_rows) + len(rows) >= len(self.key):  # too small even rebuilt
                self._allocate(2 * (len(open_rows) + len(rows)) + 256)
            rebuild(self.key, self.row, self.stamp, self.size, open_rows, key, stamp)
        push_rows(self.key, self.row, self.stamp, self.size, rows, key, stamp)

    def reset(self, rows: np.ndarray, key: np.ndarray, stamp: np.ndarray) -> None:
        """The heap of ``rows`` (every open row, all refreshed at once) at their ``key``:
        built in one pass rather than pushed, which would leave an entry gone stale per
        row to pop later."""
        if len(self.key) < 2 * len(rows) + 256:
            self._allocate(2 * len(rows) + 256)
        rebuild(self.key, self.row, self.stamp, self.size, rows, key, stamp)

    def _allocate(self, size: int) -> None:
        """Empty arrays of ``size`` entries for the heap (it is rebuilt into them)."""
        self.key = np.empty(size)
        self.row, self.stamp = np.empty(size, np.int64), np.empty(size, np.int64)

    def candidates(self, stamp: np.ndarray, alive: np.ndarray, up: np.ndarray, at: np.ndarray,
                   logged: tuple[int, int], done_at: np.ndarray, key: np.ndarray,
                   limit: float, most: int) -> tuple[float, np.ndarray]:  # fmt: skip
        """:func:`candidates` on this heap."""
        return candidates(self.key, self.row, self.stamp, self.size, stamp, alive, up, at,
                          *logged, done_at, key, limit, most)  # fmt: skip

    def ending(self, stamp: np.ndarray, alive: np.ndarray, up: np.ndarray, at: np.ndarray,
               logged: tuple[int, int], done_at: np.ndarray, remaining: np.ndarray,
               bits: np.ndarray, done: float, key: np.ndarray, by: float) -> np.ndarray:  # fmt: skip
        """:func:`ending` on this heap."""
        return ending(self.key, self.row, self.stamp, self.size, stamp, alive, up, at, *logged,
                      done_at, remaining, bits, done, key, by)  # fmt: skip

    def copy(self) -> KeyQueue:
        twin = KeyQueue(0)
        twin.key, twin.row, twin.stamp = self.key.copy(), self.row.copy(), self.stamp.copy()
        twin.size = self.size.copy()
        return twin

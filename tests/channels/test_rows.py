"""The event medium's rows: closed rows reused lowest first, scans bounded by the highest open."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from mecsim.channels.rows import Rows


def receptions(n: int) -> list:
    return [SimpleNamespace(remaining=0.0, sinr_time=0.0, block=0) for _ in range(n)]


def test_closed_rows_are_reused_lowest_first_and_the_live_view_ends_at_the_highest_open():
    rows = Rows(4)  # grows as rows are added
    first = rows.add(receptions(10), {"client": list(range(10))})
    assert first.tolist() == list(range(10)) and rows.high == 10
    rows.remove(np.array([7, 2, 9]))
    assert rows.high == 9  # row 9 closed: the view ends after row 8
    again = rows.add(receptions(2), {"client": [20, 21]})
    assert again.tolist() == [2, 7]  # the lowest closed rows first
    rows.remove(np.array([8, 7, 6, 5, 4, 3]))
    assert rows.high == 3 and rows.live.tolist() == [True, True, True]
    assert rows.index().tolist() == [0, 1, 2] and len(rows) == 3
    assert rows.a["client"][rows.index()].tolist() == [0, 1, 20]
    rows.remove(rows.index())
    assert rows.high == 0 and len(rows.live) == 0
    twin, _ = rows.copy()
    assert twin.add(receptions(1), {"client": [5]}).tolist() == [0] and rows.high == 0


def test_open_rows_per_client_follow_adds_and_removes_one_and_many_at_a_time():
    rng = np.random.default_rng(3)
    rows = Rows(2)
    for _ in range(200):
        live = rows.index()
        if len(live) and rng.random() < 0.45:
            rows.remove(rng.choice(live, size=int(rng.integers(1, min(3, len(live)) + 1)),
                                   replace=False))  # fmt: skip
        else:
            n = int(rng.integers(1, 4))
            clients = rng.integers(0, 40, size=n)
            rows.add(receptions(n), {"client": clients[0] if n == 1 else clients.tolist()})
        asked = np.arange(60)  # clients past the highest seen have none
        direct = [int(np.sum(rows.a["client"][rows.index()] == c)) for c in asked]
        assert rows.open_of(asked).tolist() == direct

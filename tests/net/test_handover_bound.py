"""The compiled quiet-tick bound against the numpy arithmetic it replaced, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from mecsim.net.handover import MAX_QUIET_TICKS
from mecsim.net.handover_bound import quiet_ticks


def numpy_bound(squared, serving, ratio, reach, watch):
    distance = np.sqrt(squared)
    rows = np.arange(len(serving))
    own = distance[rows, serving][:, None]
    rho = ratio[serving]
    room = (rho * distance - own) / (1.0 + rho) - 1e-9 * (distance + own)
    room[rows, serving] = np.inf
    with np.errstate(divide="ignore", invalid="ignore"):
        ticks = np.floor(np.min(room, axis=1) / reach)
    ticks = np.clip(np.nan_to_num(ticks, nan=0.0), 0, MAX_QUIET_TICKS).astype(np.int64)
    ticks[watch] = 0
    return ticks


@pytest.mark.parametrize("reach", [0.3, 0.0])  # 0: clients that stand still
def test_quiet_ticks_are_the_numpy_bound_to_the_bit(reach):
    rng = np.random.default_rng(3)
    clients, cells = 500, 7
    stations = rng.uniform(-600, 600, size=(cells, 2))
    where = rng.uniform(-900, 900, size=(clients, 2))
    squared = ((where[:, None, :] - stations[None, :, :]) ** 2).sum(axis=2)
    serving = np.argmin(squared, axis=1)
    serving[:50] = rng.integers(0, cells, 50)  # some served by a farther cell: no room
    power = rng.uniform(1.0, 20.0, cells)
    ratio = (2.0 * power[:, None] / power[None, :]) ** (1 / 3.5)
    watch = rng.random(clients) < 0.2
    got = quiet_ticks(squared, serving, ratio, reach, watch, MAX_QUIET_TICKS)
    expected = numpy_bound(squared, serving, ratio, reach, watch)
    assert got.tolist() == expected.tolist()
    assert (got == 0).any() and (got > 0).any()

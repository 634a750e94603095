"""The compiled quiet-tick bound against the numpy arithmetic it replaced, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from mecsim.channels import LogDistancePathLoss
from mecsim.channels.kernels import received_powers
from mecsim.net.geometry import Cell
from mecsim.net.handover import MAX_QUIET_TICKS, HandoverSchedule
from mecsim.net.handover_bound import due, first_tick_from, measure, quiet_ticks
from mecsim.net.mobility import RandomWaypoint


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


def numpy_measure(k, t, clients, power, state, margin, trigger_ticks, interruption_s):
    """The schedule's tick as numpy arrays did it (on copies of ``state``)."""
    serving_all, candidate, since, busy = (state[f].copy() for f in ("serving", "candidate",
                                                                      "since", "busy"))  # fmt: skip
    rows, serving = np.arange(len(clients)), serving_all[clients]
    best = np.argmax(power, axis=1)
    stronger = (best != serving) & (power[rows, best] > margin * power[rows, serving])
    stronger &= busy[clients] <= t
    new = stronger & (candidate[clients] != best)
    since[clients[new]] = k
    candidate[clients] = np.where(stronger, best, -1)
    due = stronger & (k - since[clients] >= trigger_ticks)
    moved = clients[due]
    serving_all[moved] = best[due]
    busy[moved] = t + interruption_s
    candidate[moved] = -1
    watch = stronger | (busy[clients] > t)
    handovers = [(int(i), int(serving[i]), int(best[i])) for i in np.flatnonzero(due)]
    return handovers, watch, {"serving": serving_all, "candidate": candidate, "since": since,
                              "busy": busy}  # fmt: skip


@pytest.mark.parametrize("trigger_ticks", [0, 2])
def test_a_compiled_tick_hands_over_the_clients_the_numpy_arithmetic_does(trigger_ticks):
    rng = np.random.default_rng(4)
    n, cells, k, t = 400, 5, 7, 0.07
    clients = np.sort(rng.choice(1000, n, replace=False))
    power = rng.uniform(1e-12, 1e-9, size=(n, cells))
    power[::9, 1] = power[::9, 0]  # ties: the first strongest cell wins
    state = {"serving": rng.integers(0, cells, 1000), "since": rng.integers(0, k + 1, 1000),
             "candidate": rng.integers(-1, cells, 1000),
             "busy": np.where(rng.random(1000) < 0.1, t + 0.01, -np.inf)}  # fmt: skip
    expected, watch_expected, after = numpy_measure(k, t, clients, power, state, 2.0,
                                                    trigger_ticks, 0.05)  # fmt: skip
    got = {f: v.copy() for f, v in state.items()}
    watch = np.empty(n, dtype=bool)
    moved, source, target = measure(k, t, clients, power, got["serving"], got["candidate"],
                                    got["since"], got["busy"], 2.0, trigger_ticks, 0.05,
                                    watch)  # fmt: skip
    assert list(zip(moved.tolist(), source.tolist(), target.tolist(), strict=True)) == expected
    assert len(expected) > 0 and watch.tolist() == watch_expected.tolist()
    for f in state:
        assert got[f].tolist() == after[f].tolist(), f


def test_the_places_due_are_the_numpy_filter_in_order():
    rng = np.random.default_rng(4)
    checks = rng.integers(0, 40, size=1000)
    for k in (0, 7, 29, 45):
        assert due(checks, k).tolist() == np.flatnonzero(checks <= k).tolist()


@pytest.mark.parametrize("exponent", [2.0, 4.0, 6.0, 8.0])
def test_received_power_is_the_path_loss_times_the_cells_power_to_the_bit(exponent):
    rng = np.random.default_rng(5)
    pathloss = LogDistancePathLoss(-37.5, 2.0, exponent)
    squared = rng.uniform(1.0, 3000.0, size=(300, 19)) ** 2
    power = rng.uniform(1.0, 40.0, size=19)
    form = pathloss.squared_form()
    expected = pathloss.gain_of_squared(squared) * power[None, :]
    assert form is not None and np.array_equal(received_powers(squared, power, *form), expected)


@pytest.mark.parametrize("exponent", [3.5, 0.0, 10.0])
def test_a_power_that_is_not_products_has_no_compiled_form(exponent):
    assert LogDistancePathLoss(exponent=exponent).squared_form() is None


@pytest.mark.parametrize("tick", [0.01, 0.1, 1 / 3])
def test_the_compiled_first_tick_from_a_time_is_the_array_one(tick):
    s = HandoverSchedule(RandomWaypoint(np.zeros(1), np.zeros(1), (-1.0, -1.0, 1.0, 1.0),
                                        (1.0, 2.0), 0.0, seed=0),
                         [Cell(0, 0.0, 0.0, 20e6, 1.0, "edge")], LogDistancePathLoss(), tick,
                         3.0, 0.0, 0.05, np.zeros(1, dtype=np.int64))  # fmt: skip
    times = np.concatenate([np.arange(60) * tick, np.random.default_rng(6).uniform(0, 20, 200),
                            [7 * tick + 1e-12, 0.1 + 0.2]])  # fmt: skip
    expected = s._first_ticks_from(times).tolist()
    assert [first_tick_from(time, tick) for time in times.tolist()] == expected


@pytest.mark.parametrize(
    ("ttt", "interruption", "still"), [(0.1, 0.05, False), (0.0, 0.0, False), (0.03, 0.2, False),
                                       (0.1, 0.05, True)],
)  # fmt: skip
def test_a_tick_in_one_pass_per_client_is_the_array_passes_tick(ttt, interruption, still):
    """Issue 52: the fused tick (products of the path loss) gives the array passes'
    handovers, next checks and window copy at every tick, to the bit; ``still``: a speed
    bound of 0 m/s (a client that cannot move is quiet for the most ticks, not none)."""
    sites = [(0.0, 0.0), *((600 * np.cos(a), 600 * np.sin(a)) for a in np.arange(6) * np.pi / 3)]
    cells = [Cell(i, x, y, 20e6, 10 ** (i % 3), "edge") for i, (x, y) in enumerate(sites)]
    rng = np.random.default_rng(8)
    x, y = rng.uniform(-900, 900, 400), rng.uniform(-900, 900, 400)
    start = rng.integers(0, len(cells), 400)  # some far from their serving cell

    def schedule() -> HandoverSchedule:
        walk = RandomWaypoint(x, y, (-900.0, -900.0, 900.0, 900.0), (10.0, 30.0), 0.2, seed=2)
        return HandoverSchedule(walk, cells, LogDistancePathLoss(-37.5, 1.0, 4.0), 0.01, 3.0,
                                ttt, interruption, start)  # fmt: skip

    fused, arrays = schedule(), schedule()
    arrays._form = None
    if still:
        fused._reach = arrays._reach = 0.0
    assert fused._form is not None
    for k in range(800):
        fused._evaluate(k)
        arrays._evaluate(k)
        assert fused._next_check.tolist() == arrays._next_check.tolist()
        assert fused._near[2].tolist() == arrays._near[2].tolist()
    assert len(fused.handovers) > (0 if still else 40) and fused.handovers == arrays.handovers
    for f in ("serving", "_candidate", "_since", "_busy_until"):
        assert getattr(fused, f).tolist() == getattr(arrays, f).tolist()

"""Client trajectories: seeded, inside their area, at their configured speeds, traces
interpolated linearly; and the mobility settings' one-line errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mecsim.net.mobility import GaussMarkov, RandomWaypoint, TraceMobility, read_trace

AREA = (-100.0, -50.0, 900.0, 450.0)


def start(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.uniform(AREA[0], AREA[2], n), rng.uniform(AREA[1], AREA[3], n)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    low=st.floats(0.5, 20.0),
    spread=st.floats(0.0, 20.0),
    pause=st.floats(0.0, 5.0),
)
def test_random_waypoint_speeds_stay_in_range_and_positions_inside_the_area(
    seed, low, spread, pause
):
    x, y = start(30, seed)
    rwp = RandomWaypoint(x, y, AREA, (low, low + spread), pause, seed)
    times = np.linspace(0.0, 600.0, 241)
    for t in times:
        px, py = rwp.positions(float(t))
        assert np.all((px >= AREA[0] - 1e-9) & (px <= AREA[2] + 1e-9))
        assert np.all((py >= AREA[1] - 1e-9) & (py <= AREA[3] + 1e-9))
    legs = np.stack(rwp.legs)  # [legs x 6 x clients]: depart, arrive, x0, y0, x1, y1
    length = np.hypot(legs[:, 4] - legs[:, 2], legs[:, 5] - legs[:, 3])
    moving = legs[:, 1] > legs[:, 0]
    speed = length[moving] / (legs[:, 1] - legs[:, 0])[moving]
    assert np.all(speed >= low * (1 - 1e-9)) and np.all(speed <= (low + spread) * (1 + 1e-9))
    # consecutive legs chain: each departs where and a pause after the previous arrived
    assert np.allclose(legs[1:, 0], legs[:-1, 1] + pause)
    assert np.array_equal(legs[1:, 2], legs[:-1, 4])
    # between samples a client never goes faster than the top speed
    steps = [rwp.positions(float(t)) for t in times]
    for (x0, y0), (x1, y1) in zip(steps, steps[1:], strict=False):
        assert np.all(np.hypot(x1 - x0, y1 - y0) <= (low + spread) * 2.5 * (1 + 1e-9))


def test_trajectories_do_not_depend_on_the_order_they_are_asked_in():
    x, y = start(20)
    ahead, behind = (
        RandomWaypoint(x, y, AREA, (1, 3), 2.0, 7),
        RandomWaypoint(x, y, AREA, (1, 3), 2.0, 7),
    )
    far = ahead.positions(500.0)
    for t in (1.0, 50.0, 250.0):
        behind.positions(t)
    assert np.array_equal(behind.positions(500.0)[0], far[0])
    assert np.array_equal(ahead.positions(50.0)[1], behind.positions(50.0)[1])
    other = RandomWaypoint(x, y, AREA, (1, 3), 2.0, 8).positions(500.0)
    assert not np.array_equal(other[0], far[0])  # the seed matters


def test_random_waypoint_moved_on_from_its_last_call_gives_the_positions_counted_afresh():
    """Issue 52: a later time moves each client on from its last leg (a few clients a
    tick); the positions equal those counted afresh from every leg begun by then."""
    x, y = start(200, 4)
    walked = RandomWaypoint(x, y, AREA, (10.0, 30.0), 0.5, 4)
    counted = RandomWaypoint(x, y, AREA, (10.0, 30.0), 0.5, 4)
    for t in [*np.arange(0.0, 120.0, 0.01).tolist(), 7.5, 60.0, 119.99, 0.0, 333.3]:
        counted._cursors = []  # forget the last calls: count the legs begun by t
        fresh = counted.positions(t)
        now = walked.positions(t)
        assert np.array_equal(now[0], fresh[0]) and np.array_equal(now[1], fresh[1]), t
        some = np.array([3, 50, 199])
        assert np.array_equal(walked.positions_of(t, some)[1], fresh[1][some])


def test_random_waypoint_asked_for_a_few_clients_at_a_time_moves_only_those_on_correctly():
    """Issue 52: asked for some clients, a cursor moves only theirs on; the others stay on
    earlier legs and catch up when next asked, at the positions counted afresh."""
    x, y = start(200, 4)
    walked = RandomWaypoint(x, y, AREA, (10.0, 30.0), 0.5, 4)
    counted = RandomWaypoint(x, y, AREA, (10.0, 30.0), 0.5, 4)
    rng = np.random.default_rng(5)
    for t in np.sort(rng.uniform(0.0, 300.0, 150)).tolist():
        some = np.unique(rng.integers(0, 200, rng.integers(1, 12)))
        counted._cursors = []
        fresh_x, fresh_y = counted.positions(t)
        now_x, now_y = walked.positions_of(t, some)
        assert np.array_equal(now_x, fresh_x[some]) and np.array_equal(now_y, fresh_y[some]), t
    assert np.array_equal(walked.positions(300.0)[0], counted.positions(300.0)[0])


def test_gauss_markov_stays_inside_its_area_and_within_its_speeds():
    x, y = start(50)
    gm = GaussMarkov(x, y, AREA, (5.0, 15.0), 0.75, 1.0, 3)
    previous = gm.positions(0.0)
    for k in range(1, 400):
        px, py = gm.positions(float(k))
        assert np.all((px >= AREA[0]) & (px <= AREA[2]) & (py >= AREA[1]) & (py <= AREA[3]))
        step = np.hypot(px - previous[0], py - previous[1])
        assert np.all(step <= 15.0 * (1 + 1e-9))  # mirrored steps are never longer
        previous = (px, py)
    assert 5.0 <= float(gm._speed.min()) and float(gm._speed.max()) <= 15.0
    half = gm.positions(10.5)  # halfway through a step: the midpoint of its two ends
    assert np.allclose(half[0], 0.5 * (gm.positions(10.0)[0] + gm.positions(11.0)[0]))


def test_a_trace_is_interpolated_linearly_and_held_before_and_after(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("t,client,x,y\n2,0,0,0\n12,0,100,50\n5,2,7,7\n")
    trace = read_trace(str(path), 3)
    x0, y0 = np.array([1.0, 2.0, 3.0]), np.array([4.0, 5.0, 6.0])
    mobility = TraceMobility(x0, y0, trace)
    assert mobility.positions(0.0)[0].tolist() == [0.0, 2.0, 7.0]  # held before its first row
    px, py = mobility.positions(4.5)
    assert (px[0], py[0]) == pytest.approx((25.0, 12.5))
    assert (px[1], py[1]) == (2.0, 5.0)  # not in the trace: stays where it was placed
    assert mobility.positions(100.0)[0][0] == 100.0  # held after its last row


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("t,client,x\n0,0,1\n", "lacks column(s) y"),
        ("t,client,x,y\n0,0,1,1\n0,0,2,2\n", "two rows at t = 0"),
        ("t,client,x,y\n0,5,1,1\n", "is not a client id"),
        ("t,client,x,y\n-1,0,1,1\n", "row 2: t = -1"),
        ("t,client,x,y\n0,0,nan,1\n", "row 2: x"),
    ],
)
def test_a_bad_trace_is_refused_naming_the_row(tmp_path, text, message):
    path = tmp_path / "trace.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        read_trace(str(path), 3)


def test_speeds_of_a_trace_are_the_slope_between_rows(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("t,client,x,y\n0,0,0,0\n10,0,30,40\n")
    mobility = TraceMobility(np.zeros(1), np.zeros(1), read_trace(str(path), 1))
    a, b = mobility.positions(3.0), mobility.positions(4.0)
    assert math.hypot(b[0][0] - a[0][0], b[1][0] - a[1][0]) == pytest.approx(5.0)

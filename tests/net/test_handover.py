"""Handovers against closed forms: when a client moving on a straight line hands over,
and what a handover does to a transfer under way (the medium with a stub schedule)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mecsim.channels import LogDistancePathLoss
from mecsim.channels.event_medium import EventMedium
from mecsim.channels.fading import NoFading
from mecsim.channels.link import LinkBudget
from mecsim.channels.medium import Medium, Site
from mecsim.channels.motion import Motion
from mecsim.channels.sharing import FadingTrack, Reception, SharedTransmitter, Transmission
from mecsim.channels.units import dbm_to_w
from mecsim.net.geometry import Cell
from mecsim.net.handover import Handover, HandoverSchedule
from mecsim.net.mobility import Trace, TraceMobility

PATHLOSS = LogDistancePathLoss(-40.0, 1.0, 4.0)
NOISE = float(dbm_to_w(-174.0))
CELLS = [Cell(0, 0.0, 0.0, 20e6, 1.0, "edge"), Cell(1, 1000.0, 0.0, 20e6, 1.0, "edge")]


def line(x0: float, x1: float, speed: float) -> TraceMobility:
    """One client from (x0, 0) to (x1, 0) at ``speed`` m/s, from t = 0."""
    trace = Trace(np.array([0.0, abs(x1 - x0) / speed]), np.array([0, 0]),
                  np.array([x0, x1]), np.array([0.0, 0.0]))  # fmt: skip
    return TraceMobility(np.array([x0]), np.array([0.0]), trace)


def schedule(mobility, tick=0.01, margin=3.0, ttt=0.1, interruption=0.05) -> HandoverSchedule:
    return HandoverSchedule(
        mobility, CELLS, PATHLOSS, tick, margin, ttt, interruption, np.array([0])
    )


@pytest.mark.parametrize(
    ("margin", "ttt", "speed"), [(3.0, 0.1, 10.0), (6.0, 0.32, 30.0), (0.0, 0.0, 1.5)]
)
def test_a_client_crossing_the_boundary_hands_over_once_when_margin_and_ttt_say(margin, ttt, speed):
    tick = 0.01
    s = schedule(line(100.0, 900.0, speed), tick, margin, ttt)
    s.advance(800.0 / speed)
    # cell 1 is stronger by the margin once (x / (1000 - x))^4 > 10^(margin / 10)
    ratio = 10 ** (margin / 40)
    crossing = (1000 * ratio / (1 + ratio) - 100.0) / speed
    first_tick = math.floor(crossing / tick) + 1  # the first tick past the crossing
    expected = (first_tick + math.ceil(ttt / tick - 1e-9)) * tick
    assert len(s.handovers) == 1
    h = s.handovers[0]
    assert (h.client, h.source, h.target) == (0, 0, 1)
    assert h.t == pytest.approx(expected, abs=1e-9)
    assert s.cell_of(0, h.t - 1e-6) == 0 and s.cell_of(0, h.t) == 1
    assert s.interrupted(0, h.t + 0.04) and not s.interrupted(0, h.t + 0.06)


def test_the_cell_at_any_time_is_the_target_of_the_last_handover_by_then():
    # there and back twice: four handovers, each query answered from the records alone
    t = np.array([0.0, 80.0, 160.0, 240.0, 320.0])
    x = np.array([100.0, 900.0, 100.0, 900.0, 100.0])
    trace = Trace(t, np.zeros(5, dtype=int), x, np.zeros(5))
    s = schedule(TraceMobility(np.array([100.0]), np.array([0.0]), trace))
    s.advance(320.0)
    times = [h.t for h in s.handovers]
    assert len(times) == 4 and [h.target for h in s.handovers] == [1, 0, 1, 0]
    for q in np.linspace(0.0, 320.0, 641).tolist() + times + [x - 1e-9 for x in times]:
        by_then = [h for h in s.handovers if h.t <= q]
        assert s.cell_of(0, q) == (by_then[-1].target if by_then else 0), q
        assert s.interrupted(0, q) == (bool(by_then) and q < by_then[-1].t + 0.05), q


def test_a_client_that_turns_back_before_the_time_to_trigger_stays():
    # crosses the 3 dB point at x ~ 543.1 m, turns back 0.5 m later, 0.1 s after crossing
    ratio = 10 ** (3 / 40)
    turn = 1000 * ratio / (1 + ratio) + 0.5
    trace = Trace(np.array([0.0, 10.0, 20.0]), np.zeros(3, dtype=np.int64),
                  np.array([turn - 50.0, turn, turn - 50.0]), np.zeros(3))  # fmt: skip
    mobility = TraceMobility(np.array([turn - 50.0]), np.array([0.0]), trace)
    assert schedule(mobility, ttt=0.5).between(-1.0, 20.0) == []
    assert len(schedule(mobility, ttt=0.02).between(-1.0, 20.0)) == 1  # a short TTT: it goes


class OneHandover:
    """A stub schedule: client 0 leaves cell 0 for cell 1 at ``at``."""

    def __init__(self, at: float, interruption_s: float) -> None:
        self.at, self.interruption_s = at, interruption_s

    def next_after(self, start: float, end: float) -> float:
        return self.at if start < self.at <= end else math.inf

    def between(self, start: float, end: float) -> list[Handover]:
        return [Handover(self.at, 0, 0, 1)] if start < self.at <= end else []

    def cell_of(self, client: int, t: float) -> int:
        return 1 if t >= self.at else 0


CLIENT = (400.0, 0.0)  # 400 m from cell 0, 600 m from cell 1, standing still
BAND, POWER = 10e6, 0.2


def medium(at: float, interruption: float, restart: bool = False, engine: type[Medium] = Medium):
    motion = Motion(lambda t: (np.array([CLIENT[0]]), np.array([CLIENT[1]])),
                    OneHandover(at, interruption), [(c.x_m, c.y_m) for c in CELLS], 1.0,
                    np.array([0]), restart)  # fmt: skip

    def receiver(site: Site, r: Reception) -> tuple[float, float]:
        if site.direction == "up":
            return CELLS[site.cell].x_m, CELLS[site.cell].y_m
        return m.position(r.client)

    m = engine(PATHLOSS.gain, lambda a, b: a != b, receiver, motion)
    radios = [m.add(SharedTransmitter(c.bandwidth_hz, c.tx_power_w), Site(c.x_m, c.y_m, c.id, "down"))
              for c in CELLS]  # fmt: skip
    uplink = m.add(SharedTransmitter(BAND, POWER), Site(*CLIENT, 0, "up", 0))
    return m, radios, uplink


def reception(nbytes: int) -> Reception:
    budget = LinkBudget(float(PATHLOSS.gain(400.0)), NOISE)
    return Reception(0, 8 * nbytes, budget, FadingTrack(NoFading(), None, None))


def rate(band: float, power: float, d: float) -> float:
    return band * math.log2(1 + power * float(PATHLOSS.gain(d)) / (NOISE * band))


@pytest.mark.parametrize("engine", [Medium, EventMedium], ids=["stepping", "event"])
@pytest.mark.parametrize("restart", [False, True])
def test_an_upload_broken_by_a_handover_goes_on_to_the_new_cell(restart, engine):
    nbytes = 10**6
    before = rate(BAND, POWER, 400.0)
    at, gap = 0.4 * 8 * nbytes / before, 0.05
    m, _, uplink = medium(at, gap, restart, engine)
    r = reception(nbytes)
    m.start(Transmission([r], via=uplink))
    ended = m.advance(math.inf)
    left = 8 * nbytes - (0 if restart else before * at)
    assert ended == [r]
    assert r.end == pytest.approx(at + gap + left / rate(BAND, POWER, 600.0), rel=1e-12)
    assert r.start == 0.0 and not r.failed


@pytest.mark.parametrize("engine", [Medium, EventMedium], ids=["stepping", "event"])
def test_a_download_broken_by_a_handover_is_re_sent_from_the_new_cell(engine):
    nbytes = 10**6
    band, power = CELLS[0].bandwidth_hz, CELLS[0].tx_power_w
    before = rate(band, power, 400.0)
    at, gap = 0.5 * 8 * nbytes / before, 0.05
    m, radios, _ = medium(at, gap, engine=engine)
    r = reception(nbytes)
    first = Transmission([r], via=radios[0], tag="round 3")
    m.start(first)
    m.advance(math.inf)
    assert first.end == pytest.approx(at) and first.energy_j == pytest.approx(power * at)
    [(again, continued)] = m.resent
    assert continued is first and again.via is radios[1] and again.tag == "round 3"
    expected = at + gap + (8 * nbytes - before * at) / rate(band, power, 600.0)
    assert r.end == pytest.approx(expected, rel=1e-12)
    assert again.start == pytest.approx(at + gap)
    assert again.energy_j == pytest.approx(power * (expected - at - gap), rel=1e-9)


class _NoHandovers:
    interruption_s = 0.05

    def next_after(self, start: float, end: float) -> float:
        return end

    def between(self, start: float, end: float) -> list:
        return []

    def cell_of(self, client: int, t: float) -> int:
        return 0


def test_gain_tables_filled_lazily_are_those_of_each_ticks_positions():
    # columns (uplinks) and rows (clients) are computed the first time a tick asks for
    # them; each must be P h(d) from where the clients are in that tick, whenever asked
    xs = np.array([100.0, 300.0, 700.0])

    def positions(t: float) -> tuple[np.ndarray, np.ndarray]:
        return xs + 50.0 * t, np.full(3, 20.0 * t)

    motion = Motion(positions, _NoHandovers(), [(c.x_m, c.y_m) for c in CELLS], 1.0,
                    np.array([0, 0, 1]))  # fmt: skip
    m = Medium(PATHLOSS.gain, lambda a, b: a != b, lambda s, r: (0.0, 0.0), motion)
    radios = [m.add(SharedTransmitter(c.bandwidth_hz, c.tx_power_w), Site(c.x_m, c.y_m, c.id, "down"))
              for c in CELLS]  # fmt: skip
    uplinks = [m.add(SharedTransmitter(BAND, POWER), Site(x, 0.0, int(x > 500), "up", i))
               for i, x in enumerate(xs)]  # fmt: skip
    assert len(radios) == 2 and len(uplinks) == 3
    for t in (0.0, 2.5):  # two ticks: the tables start over
        m._move(t)
        x, y = positions(math.floor(t))
        for columns in (np.array([3]), np.array([2, 4])):  # uplinks 0 then 1 and 2
            stations, table = m._station_gains(columns)
            for s, cell in enumerate(stations.tolist()):
                for col in columns.tolist():
                    d = math.hypot(x[col - 2] - CELLS[cell].x_m, y[col - 2] - CELLS[cell].y_m)
                    assert table[col, s] == pytest.approx(
                        POWER * PATHLOSS.gain(d), rel=1e-13, abs=0
                    )
        for clients in (np.array([1]), np.array([0, 2])):
            radio_index, table = m._radio_gains(clients)
            for r, radio in enumerate(radio_index.tolist()):
                for c in clients.tolist():
                    d = math.hypot(x[c] - CELLS[radio].x_m, y[c] - CELLS[radio].y_m)
                    expected = CELLS[radio].tx_power_w * PATHLOSS.gain(d)
                    assert table[c, r] == pytest.approx(expected, rel=1e-13, abs=0)


def test_a_tick_computes_the_positions_of_the_clients_asked_for_only():
    """Issue 52: at 100,000 clients every client's position each 10 ms tick was most of
    a tick's cost; a tick now places the clients the medium asks about, once each."""
    xs = np.linspace(0.0, 900.0, 1000)
    asked: list[list[int]] = []

    def positions(t: float) -> tuple[np.ndarray, np.ndarray]:
        return xs + 50.0 * t, np.full(len(xs), 20.0 * t)

    def positions_of(t: float, clients: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        asked.append(clients.tolist())
        x, y = positions(t)
        return x[clients], y[clients]

    motion = Motion(positions, _NoHandovers(), [(c.x_m, c.y_m) for c in CELLS], 1.0,
                    np.zeros(len(xs), dtype=np.int64), positions_of=positions_of)  # fmt: skip
    m = Medium(PATHLOSS.gain, lambda a, b: a != b, lambda s, r: (0.0, 0.0), motion)
    for t in (0.0, 2.5):
        m._move(t)
        for client in (7, 7, 412):
            x, y = positions(math.floor(t))
            assert m.position(client) == (x[client], y[client])
    assert asked == [[7], [412], [7], [412]]  # once per client and tick, none other


@pytest.mark.parametrize(("margin", "ttt", "interruption"), [(3.0, 0.1, 0.05), (0.0, 0.0, 0.0)])
def test_measuring_only_clients_that_could_hand_over_gives_every_ticks_schedule(
    margin, ttt, interruption
):
    """Issue 52: a tick measures the clients whose bound has run out (the module's
    closed form) and that are not in a handover's break; the schedule equals measuring
    every client at every tick, with a fraction of the measurements."""
    from mecsim.net.mobility import RandomWaypoint

    ring = [(600 * math.cos(a), 600 * math.sin(a)) for a in np.arange(6) * math.pi / 3]
    sites = np.array([(0.0, 0.0), *ring])
    cells = [Cell(i, x, y, 20e6, 10 ** (i % 3), "edge") for i, (x, y) in enumerate(sites)]
    rng = np.random.default_rng(3)
    x, y = rng.uniform(-900, 900, 300), rng.uniform(-900, 900, 300)
    start = np.argmin(np.hypot(x[:, None] - sites[:, 0], y[:, None] - sites[:, 1]), axis=1)

    def run(bounded: bool) -> tuple[list[Handover], int]:
        walk = RandomWaypoint(x, y, (-900.0, -900.0, 900.0, 900.0), (10.0, 30.0), 0.5, seed=1)
        s = HandoverSchedule(walk, cells, PATHLOSS, 0.01, margin, ttt, interruption, start)
        if not bounded:  # the reference: every client at every tick, in a break or not,
            s._reach, s._form = None, None  # in numpy's array passes
            s._first_ticks_from = lambda times: np.zeros(len(times), dtype=np.int64)
        measured = 0
        for k in range(3000):  # 30 s
            measured += int((s._next_check <= k).sum())
            s._evaluate(k)
        return s.handovers, measured

    bounded, measured = run(True)
    every, all_ticks = run(False)
    assert len(every) > 50 and bounded == every
    assert measured < 0.2 * all_ticks


def test_a_traces_speed_bound_is_its_fastest_row_to_row_move():
    assert line(100.0, 900.0, 12.5).max_speed_mps == pytest.approx(12.5)
    jump = Trace(np.array([0.0, 1.0, 1.0]), np.array([0, 0, 0]),
                 np.array([0.0, 5.0, 9.0]), np.zeros(3))  # fmt: skip
    assert TraceMobility(np.zeros(1), np.zeros(1), jump).max_speed_mps is None  # no bound


@pytest.mark.parametrize("tick", [0.01, 0.1, 1 / 3])
def test_the_first_tick_at_or_after_a_time_is_the_one_the_clock_compares(tick):
    s = schedule(line(100.0, 900.0, 10.0), tick=tick)
    times = np.array([0.0, tick, 2 * tick, 0.05, 0.1 + 0.2, 7 * tick + 1e-12, 3.0, 12.34])
    for time, k in zip(times.tolist(), s._first_ticks_from(times).tolist(), strict=True):
        assert s.tick_time(k) >= time and (k == 0 or s.tick_time(k - 1) < time)

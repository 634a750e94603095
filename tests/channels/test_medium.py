"""Inter-cell interference on a shared medium, against closed forms.

Two cells 1 km apart, two clients placed symmetrically (each 200 m from its own
base station, on the line between them); both upload the same payload at once
on equal bands. Each one's base station hears the other client 800 m away, so
each rate is ``B log2(1 + S / (N0 B + I))`` with S = P h(200) and I = P h(800),
and when one finishes first the other's remaining bits go at the
interference-free rate. Every test runs on both engines: the stepping medium and
the event-driven one.
"""

from __future__ import annotations

import math

import pytest

from mecsim.channels import LogDistancePathLoss
from mecsim.channels.event_medium import EventMedium
from mecsim.channels.fading import NoFading
from mecsim.channels.link import LinkBudget
from mecsim.channels.medium import Medium, Site
from mecsim.channels.sharing import FadingTrack, Reception, SharedTransmitter, Transmission
from mecsim.channels.units import dbm_to_w

PATHLOSS = LogDistancePathLoss(-40.0, 1.0, 4.0)
NOISE = float(dbm_to_w(-174.0))
BAND = 10e6
POWER = 0.2
BS = {0: (0.0, 0.0), 1: (1000.0, 0.0)}
CLIENTS = {0: (200.0, 0.0), 1: (800.0, 0.0)}  # client 0 in cell 0, client 1 in cell 1


@pytest.fixture(params=[Medium, EventMedium], ids=["stepping", "event"])
def engine(request) -> type[Medium]:
    return request.param


def uplink_medium(
    engine: type[Medium], reuse: int = 1
) -> tuple[Medium, dict[int, SharedTransmitter]]:
    def receiver(site: Site, reception: Reception) -> tuple[float, float]:
        return BS[site.cell]

    medium = engine(PATHLOSS.gain, lambda a, b: a != b and a % reuse == b % reuse, receiver)
    radios = {}
    for client, (x, y) in CLIENTS.items():
        radios[client] = medium.add(SharedTransmitter(BAND, POWER), Site(x, y, client, "up"))
    return medium, radios


def upload(client: int, nbytes: int, radios: dict) -> Transmission:
    budget = LinkBudget(float(PATHLOSS.gain(200.0)), NOISE)
    reception = Reception(client, 8 * nbytes, budget, FadingTrack(NoFading(), None, None))
    return Transmission([reception], via=radios[client])


def rate(signal_m: float, interferer_m: float | None) -> float:
    s = POWER * float(PATHLOSS.gain(signal_m))
    i = 0.0 if interferer_m is None else POWER * float(PATHLOSS.gain(interferer_m))
    return BAND * math.log2(1 + s / (NOISE * BAND + i))


def test_simultaneous_uploads_each_see_the_other_as_interference(engine):
    medium, radios = uplink_medium(engine)
    a, b = upload(0, 10**6, radios), upload(1, 10**6, radios)
    medium.start(a)
    medium.start(b)
    ended = medium.advance(math.inf)

    expected = 8e6 / rate(200.0, 800.0)
    assert {r.client for r in ended} == {0, 1}
    for t in (a, b):
        assert t.receptions[0].end == pytest.approx(expected, rel=1e-12)
        sinr = POWER * float(PATHLOSS.gain(200.0)) / (NOISE * BAND + POWER * PATHLOSS.gain(800.0))
        assert t.receptions[0].mean_sinr_db == pytest.approx(10 * math.log10(sinr), rel=1e-12)
    assert expected > 8e6 / rate(200.0, None)  # interference slows both down


def test_when_one_finishes_the_other_speeds_up_exactly(engine):
    medium, radios = uplink_medium(engine)
    short, long = upload(0, 10**6, radios), upload(1, 3 * 10**6, radios)
    medium.start(short)
    medium.start(long)
    medium.advance(math.inf)

    shared = rate(200.0, 800.0)
    first = 8e6 / shared  # both on the air, both at the interfered rate
    assert short.receptions[0].end == pytest.approx(first, rel=1e-12)
    rest = (24e6 - shared * first) / rate(200.0, None)  # alone: no interference
    assert long.receptions[0].end == pytest.approx(first + rest, rel=1e-12)


def test_a_later_start_slows_a_transmission_already_on_the_air(engine):
    medium, radios = uplink_medium(engine)
    early, late = upload(0, 10**6, radios), upload(1, 10**6, radios)
    medium.start(early)
    medium.advance(1e-3)
    medium.start(late)
    medium.advance(math.inf)

    alone, shared = rate(200.0, None), rate(200.0, 800.0)
    sent = alone * 1e-3
    first_end = 1e-3 + (8e6 - sent) / shared
    assert early.receptions[0].end == pytest.approx(first_end, rel=1e-12)
    second_left = 8e6 - shared * (first_end - 1e-3)
    assert late.receptions[0].end == pytest.approx(first_end + second_left / alone, rel=1e-12)


def test_cells_on_different_channels_do_not_interfere(engine):
    medium, radios = uplink_medium(engine, reuse=2)  # cells 0 and 1 on channels 0 and 1
    a, b = upload(0, 10**6, radios), upload(1, 10**6, radios)
    medium.start(a)
    medium.start(b)
    medium.advance(math.inf)
    assert a.receptions[0].end == pytest.approx(8e6 / rate(200.0, None), rel=1e-12)


def test_a_clone_advances_without_touching_the_original(engine):
    medium, radios = uplink_medium(engine)
    a, b = upload(0, 10**6, radios), upload(1, 10**6, radios)
    medium.start(a)
    medium.start(b)
    twin = medium.clone()
    twin.advance(math.inf)
    assert a.receptions[0].end is None and a.receptions[0].remaining == 8e6
    assert twin.twins[id(a.receptions[0])].end == pytest.approx(8e6 / rate(200.0, 800.0), rel=1e-12)


def test_a_wider_interferer_counts_by_the_share_of_its_band_the_receiver_holds(engine):
    # client 0 on 10 MHz, client 1 on 20 MHz: base station 0 catches half of client 1's
    # power (10 of its 20 MHz), base station 1 all of client 0's
    def receiver(site: Site, reception: Reception) -> tuple[float, float]:
        return BS[site.cell]

    medium = engine(PATHLOSS.gain, lambda a, b: a != b, receiver)
    bands = {0: 10e6, 1: 20e6}
    radios = {c: medium.add(SharedTransmitter(bands[c], POWER), Site(*CLIENTS[c], c, "up", c))
              for c in CLIENTS}  # fmt: skip
    a, b = upload(0, 10**7, radios), upload(1, 10**7, radios)
    medium.start(a)
    medium.start(b)
    medium.advance(math.inf)

    s, i = POWER * float(PATHLOSS.gain(200.0)), POWER * float(PATHLOSS.gain(800.0))
    rate_a = 10e6 * math.log2(1 + s / (NOISE * 10e6 + i * 0.5))
    rate_b = 20e6 * math.log2(1 + s / (NOISE * 20e6 + i * 1.0))
    first = 8e7 / rate_b  # b, on the wider band, finishes first
    assert b.receptions[0].end == pytest.approx(first, rel=1e-12)
    alone = 10e6 * math.log2(1 + s / (NOISE * 10e6))
    assert a.receptions[0].end == pytest.approx(first + (8e7 - rate_a * first) / alone, rel=1e-12)
    assert a.energy_j == pytest.approx(POWER * a.receptions[0].end, rel=1e-12)

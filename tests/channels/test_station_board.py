"""When the station board answers for the medium's state, and when it must be retaken."""

from __future__ import annotations

import numpy as np

from mecsim.channels.station_board import SLACK, StationBoard


def board(senders: int, first: int = 10) -> tuple[StationBoard, tuple]:
    table = ("key", np.zeros(2))
    zeros = np.zeros((senders + 1, 3))
    return StationBoard(
        4, table, first, senders, np.ones(1), np.array([senders]), zeros, zeros
    ), table


def test_a_board_answers_for_its_tick_and_table_up_to_its_slack_of_events():
    taken, table = board(senders=800)  # an eighth of the senders: 100 more events
    assert taken.holds(4, table, 10) and taken.holds(4, table, 10 + SLACK + 100)
    assert not taken.holds(4, table, 10 + SLACK + 101)  # too many events since: retaken


def test_a_new_tick_a_new_gain_table_or_an_emptied_log_needs_a_new_board():
    taken, table = board(senders=8)
    assert not taken.holds(5, table, 12)  # the clients moved
    assert not taken.holds(4, ("key", np.zeros(2)), 12)  # a rebuilt table (equal is not enough)
    assert not taken.holds(4, table, 9)  # the log was emptied since


def test_each_start_hears_the_direct_sum_over_the_senders_on_the_air_through_many_retakes():
    # 3 cells, 240 uplinks of three bands starting one by one, a third of them short
    # enough to end between starts: the event medium's board (taken again as events pile
    # up) against the stepping medium's sum over every sender on the air
    import math

    from mecsim.channels import LogDistancePathLoss
    from mecsim.channels.event_medium import EventMedium
    from mecsim.channels.fading import NoFading
    from mecsim.channels.interference import Interference
    from mecsim.channels.link import LinkBudget
    from mecsim.channels.medium import Site
    from mecsim.channels.sharing import FadingTrack, Reception, SharedTransmitter, Transmission

    rng = np.random.default_rng(5)
    stations = {0: (0.0, 0.0), 1: (600.0, 0.0), 2: (300.0, 520.0)}
    pathloss = LogDistancePathLoss(-40.0, 1.0, 4.0)
    medium = EventMedium(pathloss.gain, lambda a, b: a != b, lambda site, r: stations[site.cell])
    radios = [medium.add(SharedTransmitter(float(rng.choice([5e6, 10e6, 20e6])), 0.2),
                         Site(*rng.uniform(-200, 800, 2), int(rng.integers(3)), "up"))
              for _ in range(240)]  # fmt: skip
    budget = LinkBudget(float(pathloss.gain(300.0)), 4e-21)
    retaken, checked = set(), 0
    for i, radio in enumerate(radios):
        medium.advance(medium.now + 1e-4)
        nbytes = 10**3 if i % 3 == 0 else 10**7
        r = Reception(i, 8 * nbytes, budget, FadingTrack(NoFading(), None, None))
        medium.start(Transmission([r], via=radio))
        row = medium.slots.objects.index(r)
        a = medium.slots.a
        co = medium._co_matrix(medium._cell_bound())
        expected = Interference._at_stations(
            medium, a["rx_cell"][[row]], a["share_b"][[row]], medium._on_air(True),
            medium._cells(), co,
        )[0]  # fmt: skip
        assert math.isclose(a["heard"][row], expected, rel_tol=1e-12, abs_tol=1e-30)
        retaken.add(medium._board.first)
        checked += expected > 0
    assert len(retaken) > 2 and checked > 200  # boards retaken; most starts hear others

"""Handovers of idle clients served together give what serving them one by one gives."""

from __future__ import annotations

import copy

import numpy as np

from mecsim.channels import LogDistancePathLoss
from mecsim.channels.event_medium import EventMedium
from mecsim.channels.medium import Site
from mecsim.channels.sharing import SharedTransmitter


def test_serving_handovers_together_ends_each_client_at_its_last_target_as_one_by_one():
    rng = np.random.default_rng(3)
    pathloss = LogDistancePathLoss(-40.0, 1.0, 4.0)
    medium = EventMedium(pathloss.gain, lambda a, b: a != b, lambda site, r: (0.0, 0.0))
    medium.add_all([(SharedTransmitter(1e6, 1.0), Site(0.0, 0.0, c, "down")) for c in range(4)])
    clients = rng.permutation(30)  # uplinks added out of client order
    medium.add_all([(SharedTransmitter(1e6, 0.2), Site(0.0, 0.0, int(c) % 4, "up", int(c)))
                    for c in clients])  # fmt: skip
    medium.serving = np.arange(30) % 4
    medium._tx_cells = np.where(medium._sites()[4] >= 0, medium.serving[medium._sites()[4]],
                                medium._sites()[2])  # fmt: skip
    for _ in range(20):
        who = rng.integers(0, 30, int(rng.integers(1, 12)))  # repeats: several in one batch
        to = rng.integers(0, 4, len(who))
        one_by_one = copy.copy(medium)
        one_by_one.serving, one_by_one._tx_cells = medium.serving.copy(), medium._tx_cells.copy()
        for c, t in zip(who.tolist(), to.tolist(), strict=True):
            one_by_one._serve(c, t)
        medium._serve_all(who, to)
        assert np.array_equal(medium.serving, one_by_one.serving)
        assert np.array_equal(medium._tx_cells, one_by_one._tx_cells)
    assert not np.array_equal(medium.serving, np.arange(30) % 4)  # something moved

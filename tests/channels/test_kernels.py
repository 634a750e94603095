"""The event medium's compiled loops against hand calculations of the same pieces."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mecsim.channels import kernels

B, P, N0, FADE, H, IW = 1e6, 0.2, 4e-21, 1.3, 1e-9, 1e-15
"""A reception's band (Hz), power (W), noise PSD (W/Hz), fading gain, path gain and
fixed interference (W)."""


def shannon(heard: float, band: float = B) -> tuple[float, float]:
    sinr = P * FADE * H / (N0 * band + IW + heard)
    return band * math.log2(1 + sinr), sinr


def one_row(heard0: float, band: float = B) -> dict[str, np.ndarray]:
    rate0, sinr0 = shannon(heard0, band)
    return {
        "at": np.array([0]), "anchor": np.array([0.0]), "heard": np.array([heard0]),
        "rate": np.array([rate0]), "sinr": np.array([sinr0]), "remaining": np.array([1e8]),
        "sinr_time": np.array([0.0]), "rx_cell": np.array([0]), "share_b": np.array([band]),
        "share_p": np.array([P]), "noise_psd": np.array([N0]), "fade": np.array([FADE]),
        "path_gain": np.array([H]), "interference_w": np.array([IW]),
        "efficiency": np.array([math.nan]), "min_sinr": np.array([0.0]),
    }  # fmt: skip


def integrate(row: dict, log: dict, t: float, gains: np.ndarray, width: np.ndarray) -> None:
    co = np.array([[False, True, True], [True, False, True], [True, True, False]])
    columns = ("at", "anchor", "heard", "rate", "sinr", "remaining", "sinr_time", "rx_cell",
               "share_b", "share_p", "noise_psd", "fade", "path_gain", "interference_w",
               "efficiency", "min_sinr")  # fmt: skip
    kernels.integrate(np.array([0]), np.array([0]), log["tx"], gains, co, width, log["t"],
                      log["tx"], log["sign"], log["cell"], len(log["t"]), t,
                      *(row[c] for c in columns))  # fmt: skip


def test_pieces_are_the_hand_sum_of_rates_over_each_interference_held():
    # transmitter 1 (cell 1) on at 1 s, transmitter 2 (cell 0, same cell: no interference)
    # on at 2 s, transmitter 1 off at 3 s, the reception brought to 4 s
    log = {"t": np.array([1.0, 2.0, 3.0]), "tx": np.array([1, 2, 1]),
           "sign": np.array([1.0, 1.0, -1.0]), "cell": np.array([1, 0, 1])}  # fmt: skip
    gains = np.array([[0.0], [3e-14], [5e-14]])  # P h at the row's receiver, per transmitter
    width = np.array([B, 4 * B, B])  # transmitter 1's band is 4x the reception's
    heard0 = 2e-14
    row = one_row(heard0)
    integrate(row, log, 4.0, gains, width)
    held = [(1.0, heard0), (1.0, heard0 + 3e-14 / 4), (1.0, heard0 + 3e-14 / 4), (1.0, heard0)]
    bits = sum(span * shannon(h)[0] for span, h in held)
    quality = sum(span * shannon(h)[1] for span, h in held)
    assert math.isclose(row["remaining"][0], 1e8 - bits, rel_tol=1e-12)
    assert math.isclose(row["sinr_time"][0], quality, rel_tol=1e-12)
    assert math.isclose(row["heard"][0], heard0, rel_tol=1e-9)


def test_a_reception_with_no_event_since_its_anchor_is_one_piece_at_its_rate():
    log = {"t": np.array([1.0]), "tx": np.array([1]), "sign": np.array([1.0]),
           "cell": np.array([1])}  # fmt: skip
    row = one_row(2e-14)
    row["at"][0], row["anchor"][0] = 1, 1.5  # the event at 1 s was counted at its anchor
    integrate(row, log, 4.0, np.array([[0.0], [1e-9]]), np.array([B, B]))
    assert row["remaining"][0] == 1e8 - row["rate"][0] * 2.5
    assert row["sinr_time"][0] == row["sinr"][0] * 2.5 and row["heard"][0] == 2e-14


def test_a_reception_below_its_outage_threshold_carries_nothing_for_that_piece():
    log = {"t": np.array([0.5]), "tx": np.array([1]), "sign": np.array([1.0]),
           "cell": np.array([1])}  # fmt: skip
    gains = np.array([[0.0], [1e-9], [0.0]])  # drowns the signal
    row = one_row(0.0)
    row["min_sinr"][0] = 1.0
    integrate(row, log, 2.0, gains, np.array([B, B, B]))
    assert math.isclose(row["remaining"][0], 1e8 - 0.5 * shannon(0.0)[0], rel_tol=1e-12)


def test_station_tables_and_the_log_since_give_each_reception_its_direct_sum():
    rng = np.random.default_rng(1)
    stations, co = np.array([0, 1, 2]), ~np.eye(3, dtype=bool)
    gains = rng.uniform(1e-15, 1e-12, size=(12, 3))  # [transmitter x station]
    width = rng.choice([B / 2, B, 2 * B], size=12)
    cells = rng.integers(0, 3, size=12)
    # the log: 3 turns off, 4 and 9 turn on, 4 turns off again; who is on after k events
    ev_tx, ev_sign = np.array([3, 4, 9, 4]), np.array([-1.0, 1.0, 1.0, -1.0])
    after = {0: [0, 2, 3, 5, 7, 8, 11], 2: [0, 2, 4, 5, 7, 8, 11], 4: [0, 2, 5, 7, 8, 9, 11]}
    which, band = np.array([0, 1, 2, 1]), np.array([B / 2, B, 3 * B, 0.7 * B])
    for first, n in ((0, 0), (0, 2), (0, 4), (2, 4)):  # tables after `first` events
        senders = np.array(sorted(after[first], key=lambda x: width[x]))  # band order, stable
        full, scaled, bands, ends = kernels.station_tables(stations, senders, width, cells, co,
                                                           gains)  # fmt: skip
        distinct, counts = np.unique(width[senders], return_counts=True)
        assert list(bands) == list(distinct) and list(ends) == list(np.cumsum(counts))
        heard = kernels.station_heard(which, stations[which], band, bands, ends, full, scaled,
                                      gains, co, width, ev_tx, ev_sign, cells[ev_tx], first,
                                      n)  # fmt: skip
        for i, (w, b) in enumerate(zip(which, band, strict=True)):
            expected = sum(gains[x, w] * min(1.0, b / width[x])
                           for x in after[n] if co[stations[w], cells[x]])  # fmt: skip
            assert math.isclose(heard[i], expected, rel_tol=1e-12)


def test_a_step_of_rows_is_the_fluid_models_step_bit_for_bit():
    from types import SimpleNamespace

    from mecsim.channels import fluid

    rng = np.random.default_rng(2)
    n, t, step = 40, 3.0, 0.25
    a = {"anchor": rng.uniform(2.0, 3.0, n), "bits": np.full(n, 1e6),
         "remaining": rng.choice([1e-4, 5e4, 1e6], n), "sinr_time": rng.uniform(0, 1, n),
         "rate": rng.choice([0.0, 1e5, 1e6], n), "sinr": rng.uniform(0, 10, n),
         "deadline": rng.choice([3.1, 3.25, 9.0], n), "start": np.zeros(n),
         "block": rng.integers(0, 5, n).astype(float), "coherence": rng.choice([0.5, 0.65], n)}  # fmt: skip
    expected = {f: v.copy() for f, v in a.items()}
    span = t - expected["anchor"]  # to t first, as the event medium does
    expected["remaining"] -= expected["rate"] * span
    expected["sinr_time"] += expected["sinr"] * span
    track = SimpleNamespace(gain=lambda block: 1.0)
    view = SimpleNamespace(a={**expected, "fade": np.ones(n)},
                           objects=[SimpleNamespace(track=track)] * n)  # fmt: skip
    done, failed, end = fluid.step(view, t, step, expected["rate"], expected["sinr"])
    rows = np.arange(n)
    ended, fails, ends, over = kernels.step_rows(
        rows, t, step, 1e-9, *(a[f] for f in ("anchor", "remaining", "bits", "sinr_time", "rate",
                                             "sinr", "deadline", "start", "block", "coherence"))
    )  # fmt: skip
    assert ended.tolist() == done.tolist() and fails.tolist() == failed.tolist()
    assert ends.tolist() == end.tolist() and done.any() and failed.any() and over.any()
    for f in ("remaining", "sinr_time", "block"):
        assert a[f].tolist() == view.a[f].tolist(), f
    assert np.all(a["anchor"] == t + step)


def test_claim_takes_each_unstamped_value_once_in_order_and_stamps_it():
    stamp = np.array([5, -2, 5, -2, -2, 3])
    got = kernels.claim(np.array([4, 1, 2, 4, 1, 5, 0]), stamp, 5)
    assert got.tolist() == [4, 1, 5] and stamp.tolist() == [5, 5, 5, -2, 5, 5]
    assert kernels.claim(np.array([4, 1]), stamp, 5).tolist() == []


def test_station_gain_rows_are_the_numpy_arithmetic_bit_for_bit():
    rng = np.random.default_rng(7)
    x, y = rng.uniform(-900, 900, 40), rng.uniform(-900, 900, 40)
    x[3], y[3] = 0.0, 0.0  # on a base station: the 1e-18 m^2 floor
    at = np.array([[0.0, 0.0], [600.0, 0.0], [300.0, 519.6]])
    squared = kernels.squared_distances(x, y, at)
    dx, dy = x[:, None] - at[None, :, 0], y[:, None] - at[None, :, 1]
    assert np.array_equal(squared, np.maximum(dx * dx + dy * dy, 1e-18))
    table, power = np.zeros((50, 3)), rng.uniform(0.1, 1.0, 50)
    rows = np.array([5, 0, 49] + list(range(10, 47)))
    kernels.fill_rows(table, rows, squared, power)
    expected = np.zeros((50, 3))
    expected[rows] = squared * power[rows][:, None]
    assert np.array_equal(table, expected)


def test_aiming_rows_is_the_stepping_mediums_arithmetic_bit_for_bit():
    rng = np.random.default_rng(8)
    n, rows = 30, np.array([0, 4, 7, 8, 12, 20, 29])
    up = rng.random(n) < 0.6
    client, tx = rng.integers(0, 10, n), rng.integers(0, 3, n)
    serving, stations = rng.integers(0, 3, 10), rng.uniform(-500, 500, (3, 2))
    radio_x, radio_y = stations[:, 0].copy(), stations[:, 1].copy()
    cx, cy = rng.uniform(-900, 900, len(rows)), rng.uniform(-900, 900, len(rows))
    cx[1], cy[1] = stations[serving[client[4]]]  # at its station: the 1e-9 m floor
    rx, ry = np.zeros(n), np.zeros(n)
    d = kernels.aim(rows, up, client, tx, serving, stations, radio_x, radio_y, cx, cy, rx, ry)
    u = up[rows]  # Medium._aim
    fixed_x = np.where(u, stations[serving[client[rows]], 0], radio_x[tx[rows]])
    fixed_y = np.where(u, stations[serving[client[rows]], 1], radio_y[tx[rows]])
    assert np.array_equal(rx[rows], np.where(u, fixed_x, cx))
    assert np.array_equal(ry[rows], np.where(u, fixed_y, cy))
    assert np.array_equal(d, np.maximum(np.hypot(fixed_x - cx, fixed_y - cy), 1e-9))


@pytest.mark.parametrize("exponent", [2.0, 4.0, 6.0, 8.0])
def test_station_gains_in_one_pass_are_numpys_to_the_bit(exponent):
    from mecsim.channels import LogDistancePathLoss

    rng = np.random.default_rng(6)
    pathloss = LogDistancePathLoss(-35.0, 1.5, exponent)
    at = rng.uniform(-900, 900, size=(19, 2))  # the stations
    x, y = rng.uniform(-1200, 1200, size=(2, 400))
    x[:3], y[:3] = at[:3, 0], at[:3, 1]  # on a station: the 1e-18 m^2 floor
    rows, power = rng.permutation(1000)[:400], rng.uniform(0.1, 2.0, size=1000)
    expected, got = np.zeros((1000, 19)), np.zeros((1000, 19))
    kernels.fill_rows(expected, rows, pathloss.gain_of_squared(kernels.squared_distances(x, y, at)),
                      power)  # fmt: skip
    kernels.fill_gains(got, rows, x, y, at, power, *pathloss.squared_form())
    assert np.array_equal(got, expected)


def test_claiming_senders_claims_the_clients_of_those_claimed_in_order():
    stamp, placed = np.array([5, -2, 0, 0, 0, 0]), np.array([-2, 5, -2, -2])
    client = np.array([2, 1, -1, 3, 2, 0])  # transmitter 2 does not move; 4 and 0 share one
    tx, clients = kernels.claim_senders(np.array([4, 0, 2, 3, 1, 4, 5]), stamp, 5, client, placed)
    assert tx.tolist() == [4, 2, 3, 1, 5]  # 0 was stamped; 4 once
    assert clients.tolist() == [2, 3, 0]  # 2 for 4; none for 2; 3; 1 was placed; 0
    assert stamp.tolist() == [5] * 6 and placed.tolist() == [5] * 4


def test_senders_gains_where_they_are_are_the_gains_at_their_positions():
    from mecsim.channels import LogDistancePathLoss

    rng = np.random.default_rng(9)
    form = LogDistancePathLoss(-35.0, 1.5, 4.0).squared_form()
    at = rng.uniform(-900, 900, size=(7, 2))
    site_x, site_y = rng.uniform(-1200, 1200, size=(2, 300))
    client = np.where(rng.random(300) < 0.8, rng.permutation(300), -1)
    client_x, client_y = rng.uniform(-1200, 1200, size=(2, 300))
    rows, power = rng.permutation(300)[:120], rng.uniform(0.1, 2.0, size=300)
    moving = client[rows] >= 0
    x = np.where(moving, client_x[client[rows]], site_x[rows])
    y = np.where(moving, client_y[client[rows]], site_y[rows])
    expected, got = np.zeros((300, 7)), np.zeros((300, 7))
    kernels.fill_gains(expected, rows, x, y, at, power, *form)
    kernels.fill_sender_gains(got, rows, site_x, site_y, client, client_x, client_y, at, power,
                              *form)  # fmt: skip
    assert moving.any() and not moving.all() and np.array_equal(got, expected)


@pytest.mark.parametrize("exponent", [2.0, 4.0, 8.0])
def test_radio_gains_in_compiled_passes_are_numpys_to_the_bit(exponent):
    """A tick's [client x radio] table: the numpy arithmetic of ``Interference._radio_gains``
    against the compiled squared distances and received powers it now uses."""
    from mecsim.channels import LogDistancePathLoss

    rng = np.random.default_rng(7)
    pathloss = LogDistancePathLoss(-40.0, 1.0, exponent)
    rx, ry = rng.uniform(-900, 900, size=(2, 19))  # the radios
    cx, cy = rng.uniform(-1200, 1200, size=(2, 500))  # the clients
    cx[0], cy[0] = rx[4], ry[4]  # on a radio: the 1e-18 m^2 floor
    power = rng.uniform(1.0, 20.0, size=19)
    dx, dy = cx[:, None] - rx[None, :], cy[:, None] - ry[None, :]
    expected = pathloss.gain_of_squared(np.maximum(dx * dx + dy * dy, 1e-18)) * power[None, :]
    squared = kernels.squared_distances(cx, cy, np.stack([rx, ry], axis=1))
    got = kernels.received_powers(squared, power, *pathloss.squared_form())
    assert np.array_equal(got, expected)


@pytest.mark.parametrize("n", [0, 1, 7, 8, 19, 128, 129, 300, 1037, 4100])
def test_pairwise_sum_is_numpys_row_sum_to_the_bit(n):
    rng = np.random.default_rng(n)
    rows = rng.uniform(0, 1, (4, n)) * 10.0 ** rng.uniform(-15, -5, (4, n))
    got = [0.0 + kernels.pairwise_sum(row, 0, n) for row in rows]
    assert got == rows.sum(axis=1).tolist()
    assert kernels.pairwise_sum(rows.ravel(), n, n) == rows[1].sum()  # from an offset


def test_downlink_interference_of_moving_clients_is_the_numpy_sum_to_the_bit():
    """``Interference._heard``'s [client x radio] masked products and row sums, compiled."""
    rng = np.random.default_rng(8)
    table = rng.uniform(0, 1, (300, 19)) * 10.0 ** rng.uniform(-14, -6, (300, 19))
    clients = rng.permutation(300)[:120]
    rx_cell, share_b = rng.integers(0, 19, 120), rng.uniform(5e6, 40e6, 120)
    columns = np.array([0, 2, 3, 5, 8, 9, 11, 12, 13, 17, 18])
    sender_cell, width = columns.copy(), rng.uniform(10e6, 30e6, len(columns))
    co = rng.uniform(size=(19, 19)) < 0.7
    g = np.where(co[rx_cell][:, sender_cell], table[clients][:, columns], 0.0)
    expected = (g * np.minimum(1.0, share_b[:, None] / width[None, :])).sum(axis=1)
    got = kernels.radios_heard(clients, rx_cell, share_b, table, columns, sender_cell, width, co)
    assert np.array_equal(got, expected)


def test_the_parallel_integration_is_the_serial_one_bit_for_bit():
    """Rows are independent, so spreading them over threads changes no result."""
    rng = np.random.default_rng(3)
    rows_total, events, stations, senders = 3000, 40, 7, 60
    rows = rng.permutation(rows_total)[:2500].astype(np.int64)

    def columns() -> list[np.ndarray]:
        r = np.random.default_rng(4)
        heard, rate, sinr, remaining = (r.random(rows_total) * s for s in (1e-13, 1e7, 2.0, 1e8))
        return [r.integers(0, events, rows_total), np.zeros(rows_total), heard, rate, sinr,
                remaining, np.zeros(rows_total),
                r.integers(0, stations, rows_total), r.random(rows_total) * 1e6,
                r.random(rows_total) * 0.2, np.full(rows_total, 4e-21), r.random(rows_total),
                r.random(rows_total) * 1e-9, r.random(rows_total) * 1e-15,
                np.where(r.random(rows_total) < 0.3, 2.0, math.nan), r.random(rows_total)]  # fmt: skip

    ev_tx = rng.integers(0, senders, events)
    fixed = (rows, rng.integers(0, stations, len(rows)), ev_tx, rng.random((senders, stations)),
             rng.random((stations, stations)) < 0.8, rng.random(senders) * 2e6,
             np.sort(rng.random(events)), ev_tx, rng.choice([-1.0, 1.0], events),
             rng.integers(0, stations, events), events, 1.5)  # fmt: skip
    serial, parallel = columns(), columns()
    kernels.integrate(*fixed, *serial)
    kernels.integrate_parallel(*fixed, *parallel)

    for a, b in zip(serial, parallel, strict=True):
        assert np.array_equal(a, b, equal_nan=True)
    assert not np.array_equal(serial[5], columns()[5])  # the rows' bits did move

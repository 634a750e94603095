import math

import numpy as np
import pytest
from mecsim.channels import (
    ChannelModel,
    LogDistancePathLoss,
    NoFading,
    RayleighFading,
    broadcast_durations,
    processor_sharing_durations,
)


def _table4(fading=None, spectral_efficiency=None) -> ChannelModel:
    return ChannelModel(LogDistancePathLoss(), fading or NoFading(), -174.0, spectral_efficiency)


@pytest.mark.parametrize(
    ("distance_m", "power_w", "bandwidth_hz", "snr_linear", "rate_bps"),
    [(100.0, 0.5, 20e6, 6.28, 57.3e6), (300.0, 1.0, 50e6, 0.062, 4.34e6)],
)
def test_design_worked_values(distance_m, power_w, bandwidth_hz, snr_linear, rate_bps):
    # Execute
    link = _table4().sample(
        tx_power_w=power_w,
        distance_m=distance_m,
        bandwidth_hz=bandwidth_hz,
        rng=np.random.default_rng(0),
    )

    # Assert
    assert link.snr_linear == pytest.approx(snr_linear, rel=1e-2)
    assert link.rate_bps == pytest.approx(rate_bps, rel=1e-2)
    assert link.snr_db == pytest.approx(10 * math.log10(link.snr_linear))
    assert link.fading_gain == 1.0


def test_interference_lowers_sinr():
    # Prepare
    model = _table4()
    args = dict(tx_power_w=0.5, distance_m=100.0, bandwidth_hz=20e6)

    # Execute
    clean = model.rate_at(**args)
    noisy = model.rate_at(**args, interference_w=model.pathloss.gain(100.0) * 0.5)

    # Assert: interference equal to the received power -> SINR just below 1
    assert noisy.snr_linear < 1.0 < clean.snr_linear
    assert noisy.rate_bps < clean.rate_bps


def test_spectral_efficiency_reproduces_table5_download():
    # Prepare
    bits = 42.65 * 2**20 * 8

    # Execute
    link = _table4(spectral_efficiency=1.0).sample(
        tx_power_w=1.0, distance_m=300.0, bandwidth_hz=50e6, rng=np.random.default_rng(0)
    )

    # Assert
    assert link.rate_bps == 50e6
    assert bits / link.rate_bps == pytest.approx(7.16, abs=5e-3)


def test_fading_is_drawn_even_with_fixed_spectral_efficiency():
    # Prepare
    args = dict(tx_power_w=1.0, distance_m=200.0, bandwidth_hz=10e6)
    rng_a, rng_b = np.random.default_rng(3), np.random.default_rng(3)

    # Execute
    shannon = _table4(RayleighFading()).sample(**args, rng=rng_a)
    fixed = _table4(RayleighFading(), spectral_efficiency=1.0).sample(**args, rng=rng_b)

    # Assert: same gain drawn, streams advance equally
    assert shannon.fading_gain == fixed.fading_gain != 1.0
    assert rng_a.random() == rng_b.random()


def test_zero_power_gives_zero_rate():
    link = _table4().rate_at(tx_power_w=0.0, distance_m=100.0, bandwidth_hz=1e6)
    assert link.rate_bps == 0.0
    assert link.snr_db == -math.inf


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        (dict(bandwidth_hz=0.0), "bandwidth_hz"),
        (dict(tx_power_w=-1.0), "tx_power_w"),
        (dict(interference_w=-1e-12), "interference_w"),
        (dict(distance_m=0.0), "distance_m"),
    ],
)
def test_sample_errors_name_the_argument(kwargs, argument):
    args = dict(tx_power_w=1.0, distance_m=100.0, bandwidth_hz=1e6) | kwargs
    with pytest.raises(ValueError, match=argument):
        _table4().sample(**args, rng=np.random.default_rng(0))


def test_rejects_non_positive_spectral_efficiency():
    with pytest.raises(ValueError, match="spectral_efficiency"):
        _table4(spectral_efficiency=0.0)


def test_broadcast_durations():
    np.testing.assert_allclose(broadcast_durations(8e6, [1e6, 4e6]), [8.0, 2.0])
    with pytest.raises(ValueError, match="rates"):
        broadcast_durations(1.0, [1.0, 0.0])
    with pytest.raises(ValueError, match="bits"):
        broadcast_durations(-1.0, [1.0])


def test_processor_sharing_equal_payloads_finish_together():
    # Prepare
    model = _table4()

    def rate_for(i: int, bandwidth_hz: float) -> float:
        return model.rate_at(tx_power_w=1.0, distance_m=300.0, bandwidth_hz=bandwidth_hz).rate_bps

    # Execute
    finish = processor_sharing_durations([1e6, 1e6], rate_for, 50e6)

    # Assert
    expected = 1e6 / rate_for(0, 25e6)
    np.testing.assert_allclose(finish, [expected, expected])


def test_processor_sharing_progressive_filling():
    # Prepare: receiver 0 at 2 bit/s/Hz, the others at 1 bit/s/Hz, 10 MHz shared
    efficiency = [2.0, 1.0, 1.0]

    def rate_for(i: int, bandwidth_hz: float) -> float:
        return efficiency[i] * bandwidth_hz

    # Execute
    finish = processor_sharing_durations([10e6, 40e6, 0.0], rate_for, 10e6)

    # Assert: 0 finishes at 10e6 / (2 * 5e6) = 1 s, by then 1 has sent 5e6 bits;
    # its remaining 35e6 bits go at 10e6 bit/s -> 3.5 s more; the empty payload at 0
    np.testing.assert_allclose(finish, [1.0, 4.5, 0.0])


def test_processor_sharing_errors():
    with pytest.raises(ValueError, match="bits"):
        processor_sharing_durations([-1.0], lambda i, b: b, 1e6)
    with pytest.raises(ValueError, match="total_bandwidth_hz"):
        processor_sharing_durations([1.0], lambda i, b: b, 0.0)
    with pytest.raises(ValueError, match="rate_for"):
        processor_sharing_durations([1.0], lambda i, b: 0.0, 1e6)
    assert processor_sharing_durations([], lambda i, b: b, 1e6).shape == (0,)

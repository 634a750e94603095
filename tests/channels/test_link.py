import math

import pytest

from mecsim.channels import ChannelModel, LogDistancePathLoss, NoFading


def _table4(fading=None, spectral_efficiency=None) -> ChannelModel:
    return ChannelModel(LogDistancePathLoss(), fading or NoFading(), -174.0, spectral_efficiency)


@pytest.mark.parametrize(
    ("distance_m", "power_w", "bandwidth_hz", "snr_linear", "rate_bps"),
    [(100.0, 0.5, 20e6, 6.28, 57.3e6), (300.0, 1.0, 50e6, 0.062, 4.34e6)],
)
def test_design_worked_values(distance_m, power_w, bandwidth_hz, snr_linear, rate_bps):
    rate, sinr = _table4().budget(distance_m)(bandwidth_hz, power_w, 1.0)

    assert sinr == pytest.approx(snr_linear, rel=1e-2)
    assert rate == pytest.approx(rate_bps, rel=1e-2)
    assert rate == pytest.approx(bandwidth_hz * math.log2(1 + sinr))


def test_interference_lowers_sinr():
    model = _table4()
    clean = model.budget(100.0)(20e6, 0.5, 1.0)
    noisy = model.budget(100.0, interference_w=model.pathloss.gain(100.0) * 0.5)(20e6, 0.5, 1.0)

    # interference equal to the received power -> SINR just below 1
    assert noisy[1] < 1.0 < clean[1]
    assert noisy[0] < clean[0]


def test_spectral_efficiency_reproduces_table5_download():
    bits = 42.65 * 2**20 * 8
    rate, _ = _table4(spectral_efficiency=1.0).budget(300.0)(50e6, 1.0, 1.0)

    assert rate == 50e6
    assert bits / rate == pytest.approx(7.16, abs=5e-3)


def test_fading_gain_scales_the_sinr():
    budget = _table4().budget(200.0)
    assert budget(10e6, 1.0, 0.5)[1] == pytest.approx(0.5 * budget(10e6, 1.0, 1.0)[1])


def test_zero_power_gives_zero_rate():
    assert _table4().budget(100.0)(1e6, 0.0, 1.0) == (0.0, 0.0)


@pytest.mark.parametrize(
    ("call", "argument"),
    [
        (lambda m: m.budget(100.0)(0.0, 1.0, 1.0), "bandwidth_hz"),
        (lambda m: m.budget(100.0)(1e6, -1.0, 1.0), "power_w"),
        (lambda m: m.budget(100.0, interference_w=-1e-12), "interference_w"),
        (lambda m: m.budget(0.0), "distance_m"),
    ],
)
def test_errors_name_the_argument(call, argument):
    with pytest.raises(ValueError, match=argument):
        call(_table4())


def test_rejects_non_positive_spectral_efficiency():
    with pytest.raises(ValueError, match="spectral_efficiency"):
        _table4(spectral_efficiency=0.0)

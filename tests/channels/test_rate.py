import numpy as np
import pytest

from mecsim.channels import noise_power_w, shannon_rate, snr


def test_noise_power_at_minus_174_dbm_hz():
    # Execute
    noise = noise_power_w(-174.0, 20e6)

    # Assert: 10^-20.4 W/Hz * 20 MHz
    assert noise == pytest.approx(10 ** (-20.4) * 20e6)


def test_snr_and_shannon_rate():
    # Execute
    sinr = snr(3e-12, 1e-12, 1e-12)
    rate = shannon_rate(1e6, sinr)

    # Assert
    assert sinr == pytest.approx(1.5)
    assert rate == pytest.approx(1e6 * np.log2(2.5))


def test_shannon_rate_on_arrays():
    rates = shannon_rate(np.array([1e6, 2e6]), np.array([1.0, 3.0]))
    np.testing.assert_allclose(rates, [1e6, 4e6])


def test_errors_name_the_argument():
    with pytest.raises(ValueError, match="bandwidth_hz"):
        noise_power_w(-174.0, 0.0)
    with pytest.raises(ValueError, match="interference_w"):
        snr(1.0, -1.0, 1.0)
    with pytest.raises(ValueError, match="noise_w"):
        snr(1.0, 0.0, 0.0)
    with pytest.raises(ValueError, match="received_w"):
        snr(-1.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="bandwidth_hz"):
        shannon_rate(-1.0, 1.0)
    with pytest.raises(ValueError, match="snr_linear"):
        shannon_rate(1.0, -1.0)

import numpy as np
import pytest

from mecsim.channels import LogDistancePathLoss


def test_gain_matches_table4_defaults():
    # Prepare
    pathloss = LogDistancePathLoss()

    # Execute
    gain = pathloss.gain(100.0)

    # Assert: -40 dB * 100^-4
    assert gain == pytest.approx(1e-4 * 1e-8)
    assert isinstance(gain, float)


def test_gain_on_arrays_and_reference_distance():
    # Prepare
    pathloss = LogDistancePathLoss(constant_db=-30.0, reference_m=10.0, exponent=2.0)

    # Execute
    gains = pathloss.gain(np.array([10.0, 20.0, 100.0]))

    # Assert
    np.testing.assert_allclose(gains, [1e-3, 1e-3 / 4, 1e-5])


@pytest.mark.parametrize("distance", [0.0, -5.0, np.array([100.0, 0.0])])
def test_gain_rejects_non_positive_distance(distance):
    with pytest.raises(ValueError, match="distance_m"):
        LogDistancePathLoss().gain(distance)


def test_rejects_bad_parameters():
    with pytest.raises(ValueError, match="reference_m"):
        LogDistancePathLoss(reference_m=0.0)
    with pytest.raises(ValueError, match="exponent"):
        LogDistancePathLoss(exponent=-1.0)

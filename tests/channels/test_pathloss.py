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


@pytest.mark.parametrize("exponent", [2.0, 3.0, 3.7, 4.0, 6.0, 8.0])
def test_gain_of_squared_distances_is_the_gain_at_their_roots(exponent):
    # even exponents take products instead of a power (the hot path of moving clients)
    pathloss = LogDistancePathLoss(-40.0, 2.0, exponent)
    squared = np.random.default_rng(0).uniform(1.0, 1e7, 1000)
    before = squared.copy()
    got = pathloss.gain_of_squared(squared)
    assert np.allclose(got, pathloss.gain(np.sqrt(squared)), rtol=1e-14, atol=0.0)
    assert np.array_equal(squared, before)  # computed in a new array, the input untouched
    assert float(pathloss.gain_of_squared(np.array(16.0))) == pytest.approx(
        pathloss.gain(4.0), rel=1e-14
    )

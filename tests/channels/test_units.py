import numpy as np
import pytest

from mecsim.channels import db_to_linear, dbm_to_w, linear_to_db, mhz_to_hz, w_to_dbm


def test_dbm_watt_round_trip():
    # Prepare
    dbm = np.array([-174.0, 0.0, 23.0, 30.0])

    # Execute
    watts = dbm_to_w(dbm)

    # Assert
    assert dbm_to_w(30.0) == pytest.approx(1.0)
    assert dbm_to_w(0.0) == pytest.approx(1e-3)
    np.testing.assert_allclose(w_to_dbm(watts), dbm)


def test_db_linear_round_trip_on_floats():
    assert db_to_linear(10.0) == pytest.approx(10.0)
    assert db_to_linear(-40.0) == pytest.approx(1e-4)
    assert linear_to_db(100.0) == pytest.approx(20.0)
    assert isinstance(linear_to_db(2.0), float)


def test_mhz_to_hz():
    assert mhz_to_hz(20.0) == 20e6
    np.testing.assert_allclose(mhz_to_hz(np.array([10.0, 30.0])), [10e6, 30e6])


@pytest.mark.parametrize("bad", [0.0, -1.0, np.array([1.0, 0.0])])
def test_linear_to_db_rejects_non_positive(bad):
    with pytest.raises(ValueError, match="ratio"):
        linear_to_db(bad)

import numpy as np
import pytest

from mecsim.channels import (
    FADING,
    LogNormalShadowing,
    NoFading,
    RayleighFading,
    RicianFading,
    make_fading,
)
from mecsim.common.errors import UnknownNameError


def _draws(model, seed: int = 0, n: int = 20000) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.array([model.draw(rng) for _ in range(n)])


def test_no_fading_is_one():
    assert NoFading().draw(np.random.default_rng(0)) == 1.0


@pytest.mark.parametrize("model", [RayleighFading(), RicianFading(0.0), RicianFading(3.0)])
def test_power_gain_has_unit_mean(model):
    # Execute
    draws = _draws(model)

    # Assert
    assert draws.mean() == pytest.approx(1.0, abs=0.03)
    assert np.all(draws >= 0)


def test_rician_with_large_k_is_nearly_constant():
    draws = _draws(RicianFading(1000.0), n=2000)
    assert draws.std() < 0.1


def test_lognormal_median_is_one_and_mean_is_not():
    # Execute
    draws = _draws(LogNormalShadowing(8.0))

    # Assert: median 1, mean exp((sigma ln10 / 10)^2 / 2) ~ 5.4
    assert np.median(draws) == pytest.approx(1.0, rel=0.05)
    assert draws.mean() > 2.0


@pytest.mark.parametrize("name", ["rayleigh", "rician", "lognormal"])
def test_same_seed_gives_same_draws(name):
    model = make_fading(name)
    np.testing.assert_array_equal(_draws(model, seed=7, n=50), _draws(model, seed=7, n=50))
    assert not np.array_equal(_draws(model, seed=7, n=50), _draws(model, seed=8, n=50))


def test_registry_and_factory():
    # Execute
    rician = make_fading("rician", rician_k=5.0)
    lognormal = make_fading("lognormal", shadowing_sigma_db=4.0)

    # Assert
    assert FADING.names() == ["lognormal", "none", "rayleigh", "rician"]
    assert FADING.get("rayleigh") is RayleighFading
    assert isinstance(make_fading("none"), NoFading)
    assert rician == RicianFading(5.0)
    assert lognormal == LogNormalShadowing(4.0)


def test_errors():
    with pytest.raises(UnknownNameError, match="network.fading"):
        make_fading("nakagami")
    with pytest.raises(ValueError, match="k_factor"):
        RicianFading(-1.0)
    with pytest.raises(ValueError, match="sigma_db"):
        LogNormalShadowing(-1.0)

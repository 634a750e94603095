import math

import torch

from mecsim.algorithms.spectral import divergence, flatten_weights, spectrum


def test_spectrum_is_a_distribution_and_truncates_to_ceil_tau_d():
    w = torch.randn(101)

    full, truncated = spectrum(w), spectrum(w, tau=0.4)

    assert full.shape == (101,) and truncated.shape == (math.ceil(0.4 * 101),)
    torch.testing.assert_close(full.sum(), torch.tensor(1.0))
    torch.testing.assert_close(truncated.sum(), torch.tensor(1.0))
    torch.testing.assert_close(full * torch.fft.fft(w).abs().sum(), torch.fft.fft(w).abs())


def test_divergence_is_kl_zero_for_equal_and_positive_otherwise():
    p = torch.tensor([0.5, 0.25, 0.25])
    q = torch.tensor([0.25, 0.25, 0.5])

    assert float(divergence(p, p)) == 0.0
    expected = 0.5 * math.log(2) + 0.25 * math.log(0.5)
    assert float(divergence(p, q)) == pytest_approx(expected)


def pytest_approx(x):
    import pytest

    return pytest.approx(x, rel=1e-5)


def test_spectral_term_has_gradients_that_reduce_it():
    params = {"a": torch.randn(6, 5, requires_grad=True), "b": torch.randn(5, requires_grad=True)}
    target = spectrum(torch.randn(35))
    names = ["a", "b"]

    loss = divergence(spectrum(flatten_weights(params, names)), target)
    grads = torch.autograd.grad(loss, [params["a"], params["b"]])
    stepped = {k: (v - 0.5 * g).detach() for (k, v), g in zip(params.items(), grads, strict=True)}

    assert all(g.abs().sum() > 0 for g in grads)
    assert divergence(spectrum(flatten_weights(stepped, names)), target) < loss

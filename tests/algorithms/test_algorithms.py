"""Algorithm-specific behaviour beyond "it runs": what each one stores and shares."""

import torch

import mecsim

STEPS = ["algorithm.steps=5", "algorithm.personal_steps=5", "protocol.rounds=2"]


def test_fedrod_personal_model_is_generic_body_plus_summed_heads(tiny):
    result = mecsim.run(tiny, STEPS + ["algorithm.name=fedrod"], write=False)

    head = ("classifier.2.weight", "classifier.2.bias")
    for state in result.client_states:
        generic, personal = state["generic"], state["personal"]
        for name, value in personal.params.items():
            if name in head:
                torch.testing.assert_close(
                    value, generic.params[name] + state["personal_head"][name]
                )
            else:
                assert torch.equal(value, generic.params[name])  # the body is never personalized
        assert torch.isfinite(state["log_prior"]).all()
        assert any(state["personal_head"][k].abs().sum() > 0 for k in head)


def test_fedrod_balanced_softmax_uses_each_clients_label_prior(tiny):
    result = mecsim.run(tiny, STEPS + ["algorithm.name=fedrod", "data.alpha=0.1"], write=False)

    priors = torch.stack([s["log_prior"].exp() for s in result.client_states])
    torch.testing.assert_close(priors.sum(dim=1), torch.ones(len(priors)), atol=1e-5, rtol=0)
    assert (
        priors.max(dim=0).values - priors.min(dim=0).values
    ).max() > 0.2  # skewed clients differ


def test_ditto_lambda_pulls_personal_models_toward_the_global_model(tiny):
    def spread(lam):
        result = mecsim.run(
            tiny, STEPS + ["algorithm.name=ditto", f"algorithm.lam={lam}"], write=False
        )
        global_params = result.server_state["global"].params
        return sum(
            float((s["personal"].params[k] - global_params[k]).pow(2).sum())
            for s in result.client_states
            for k in global_params
        )

    assert spread(5.0) < spread(0.0)


def test_scd_spectral_terms_change_both_models_at_the_papers_lambdas(tiny):
    """With unit-sum spectra the terms moved no weight by more than 1e-5 at the paper's
    lambda_g = 0.05 and lambda_p = 0.01: SCD trained as PFL+."""
    plain = mecsim.run(
        tiny,
        STEPS + ["algorithm.name=scd", "algorithm.lambda_g=0", "algorithm.lambda_p=0"],
        write=False,
    )
    coupled = mecsim.run(tiny, STEPS + ["algorithm.name=scd"], write=False)

    def moved(a, b):
        return max(float((a[k] - b[k]).abs().max()) for k in a)

    g0, g1 = plain.server_state["global"].params, coupled.server_state["global"].params
    assert moved(g0, g1) > 1e-3
    p0, p1 = plain.client_states[0]["personal"].params, coupled.client_states[0]["personal"].params
    assert moved(p0, p1) > 1e-3
    # the spectral terms cost FLOPs the forward hooks cannot see
    assert (
        coupled.events["flops"].sum() == plain.events["flops"].sum()
    )  # same metered work either way
    ditto = mecsim.run(tiny, STEPS + ["algorithm.name=ditto"], write=False)
    assert coupled.events["flops"].sum() > ditto.events["flops"].sum()


def test_scd_defaults_are_the_papers():
    """Chen et al. 2023, appendix B and Tables 6-8."""
    from mecsim.algorithms.scd import SCDSettings

    s = SCDSettings(name="scd")
    assert (s.lr, s.momentum, s.batch_size) == (0.01, 0.5, 10)
    assert (s.tau, s.lambda_g, s.lambda_p) == (0.4, 0.05, 0.01)
    assert s.personal_lr is None  # eta_p = eta_G

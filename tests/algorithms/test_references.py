"""Each algorithm against an independent plain-PyTorch reading of its paper.

One or two rounds of a built-in algorithm on a tiny problem (digits, cnn-small,
2-3 clients, full-batch steps, so the batch order cannot matter) are compared, to
float tolerance, with the same rounds written here from the paper with
``torch.optim.SGD`` and ``nn.Module``s: the server's model after aggregation and
each client's personal model. mecsim supplies only the data split and the seeded
initial model; no algorithm code of mecsim runs in a reference.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import mecsim
from mecsim.common.rng import derive_seed
from mecsim.learning.models import build_model
from mecsim.runs.world import build_data

SEED = 3
FULL_BATCH = 4096  # more than any client holds: every step sees all its samples
TOL = {"atol": 2e-5, "rtol": 1e-4}


def run(
    name: str,
    *overrides: str,
    clients: int = 2,
    rounds: int = 1,
    steps: int = 2,
    model: str = "cnn-small",
):
    """A run of ``name`` and, per client, its training (x, y) and validation (x, y)."""
    scenario = {
        "name": "reference",
        "seed": SEED,
        "data": {"dataset": "digits", "partition": "dirichlet", "alpha": 1.0},
        "model": {"name": model},
        "algorithm": {"name": name, "steps": steps, "batch_size": FULL_BATCH, "lr": 0.05},
        "protocol": {"rounds": rounds},
        "clients": {"count": clients},
        "output": {"progress": False},
    }
    result = mecsim.run(scenario, list(overrides), write=False)
    data = build_data(result.scenario, torch.device("cpu"))
    train = [(data.x_train[i], data.y_train[i]) for i in data.train]
    val = [(data.x_train[i], data.y_train[i]) for i in data.val]
    PUBLIC.update(x=data.x_public, y=data.y_public)
    return result, train, val


PUBLIC: dict[str, torch.Tensor] = {}
"""The last run's public split (x, y)."""


def initial(model: str = "cnn-small") -> nn.Module:
    seed = derive_seed(SEED, "init")
    return build_model(model, input_shape=(1, 8, 8), num_classes=10, seed=seed)


def weights(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach() for k, v in module.named_parameters()}


def assert_same(state, module_or_params) -> None:
    """A mecsim ModelState (or payload dict) equals a module's (or dict's) parameters."""
    expected = module_or_params
    if isinstance(expected, nn.Module):
        expected = weights(expected)
    got = state.params if hasattr(state, "params") else state
    for name, value in expected.items():
        torch.testing.assert_close(got[name], value, **TOL)


def sgd(model: nn.Module, x, y, steps: int, lr: float, extra=None, momentum: float = 0.0):
    """``steps`` full-batch SGD steps of cross-entropy (+ ``extra(model)``)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    for _ in range(steps):
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        if extra is not None:
            loss = loss + extra(model)
        loss.backward()
        optimizer.step()
    return model


def average(models: list[dict[str, torch.Tensor]], sizes: list[float]) -> dict[str, torch.Tensor]:
    total = sum(sizes)
    return {
        k: sum(m[k] * (s / total) for m, s in zip(models, sizes, strict=True)) for k in models[0]
    }


def squared_distance(model: nn.Module, anchor: dict[str, torch.Tensor]) -> torch.Tensor:
    return sum(((p - anchor[k]) ** 2).sum() for k, p in model.named_parameters())


def loaded(params: dict[str, torch.Tensor], model: str = "cnn-small") -> nn.Module:
    """A fresh module holding ``params`` (and buffers, where given)."""
    module = initial(model)
    with torch.no_grad():
        for k, t in [*module.named_parameters(), *module.named_buffers()]:
            if k in params:
                t.copy_(params[k])
    return module


def tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    """Parameters and buffers."""
    return {k: v.detach().clone() for k, v in [*module.named_parameters(), *module.named_buffers()]}


HEAD = ("classifier.2.weight", "classifier.2.bias")


# --- FedAvg family ------------------------------------------------------------------------
def test_fedavg_is_mcmahans_weighted_average_of_local_sgd():
    result, train, _ = run("fedavg")
    local = [weights(sgd(initial(), x, y, 2, 0.05)) for x, y in train]
    assert_same(result.server_state["global"], average(local, [len(y) for _, y in train]))


def test_fedprox_adds_the_proximal_term_to_each_local_step():
    result, train, _ = run("fedprox", "algorithm.mu=0.5")
    start = weights(initial())
    local = [
        weights(sgd(initial(), x, y, 2, 0.05, lambda m: 0.25 * squared_distance(m, start)))
        for x, y in train
    ]
    assert_same(result.server_state["global"], average(local, [len(y) for _, y in train]))


def test_fedavgm_steps_the_server_with_momentum_over_two_rounds():
    result, train, _ = run("fedavgm", rounds=2)
    sizes = [len(y) for _, y in train]
    w, velocity = weights(initial()), None
    for _ in range(2):
        avg = average([weights(sgd(loaded(w), x, y, 2, 0.05)) for x, y in train], sizes)
        delta = {k: w[k] - avg[k] for k in w}
        velocity = delta if velocity is None else {k: 0.9 * velocity[k] + delta[k] for k in w}
        w = {k: w[k] - velocity[k] for k in w}
    assert_same(result.server_state["global"], w)


def test_feddyn_follows_algorithm_one_with_its_authors_clipping_over_two_rounds():
    alpha = 0.1
    result, train, _ = run("feddyn", f"algorithm.alpha={alpha}", rounds=2)
    w = weights(initial())
    h = {k: torch.zeros_like(v) for k, v in w.items()}
    grads = [{k: torch.zeros_like(v) for k, v in w.items()} for _ in train]
    for _ in range(2):
        trained = []
        for i, (x, y) in enumerate(train):
            model = loaded(w)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
            for _ in range(2):
                optimizer.zero_grad()
                linear = sum((p * grads[i][k]).sum() for k, p in model.named_parameters())
                loss = F.cross_entropy(model(x), y) - linear
                loss = loss + alpha / 2 * squared_distance(model, w)
                loss.backward()
                nn.utils.clip_grad_norm_(model.parameters(), 10.0)
                optimizer.step()
            theta = weights(model)
            grads[i] = {k: grads[i][k] - alpha * (theta[k] - w[k]) for k in w}
            trained.append(theta)
        h = {k: h[k] - alpha / len(train) * sum(t[k] - w[k] for t in trained) for k in w}
        mean = average(trained, [1.0] * len(trained))
        w = {k: mean[k] - h[k] / alpha for k in w}
    assert_same(result.server_state["global"], w)


def test_scaffold_corrects_each_step_with_c_minus_c_i_over_two_rounds():
    result, train, _ = run("scaffold", rounds=2)
    lr, steps = 0.05, 2
    x_global = weights(initial())
    c = {k: torch.zeros_like(v) for k, v in x_global.items()}
    c_i = [dict(c) for _ in train]
    for _ in range(2):
        ys, deltas = [], []
        for i, (x, y) in enumerate(train):
            model = loaded(x_global)
            optimizer = torch.optim.SGD(model.parameters(), lr=lr)
            for _ in range(steps):  # y <- y - lr (g_i(y) - c_i + c)
                optimizer.zero_grad()
                F.cross_entropy(model(x), y).backward()
                optimizer.step()
                with torch.no_grad():
                    for k, p in model.named_parameters():
                        p -= lr * (c[k] - c_i[i][k])
            y_i = weights(model)
            new = {k: c_i[i][k] - c[k] + (x_global[k] - y_i[k]) / (steps * lr) for k in c}
            deltas.append({k: new[k] - c_i[i][k] for k in c})
            c_i[i] = new
            ys.append(y_i)
        x_global = {k: x_global[k] + sum(y[k] - x_global[k] for y in ys) / len(ys) for k in c}
        c = {k: c[k] + sum(d[k] for d in deltas) / len(deltas) for k in c}  # |S| = N
    assert_same(result.server_state["global"], x_global)
    assert_same(result.server_state["control"], c)


def test_local_training_is_sgd_alone():
    result, train, _ = run("local", rounds=2)
    for i, (x, y) in enumerate(train):
        assert_same(result.client_states[i]["personal"], sgd(initial(), x, y, 4, 0.05))


def test_ditto_trains_the_personal_model_toward_the_received_global_one():
    result, train, _ = run("ditto", "algorithm.lam=0.5", "algorithm.personal_steps=2")
    start = weights(initial())
    for i, (x, y) in enumerate(train):
        personal = sgd(initial(), x, y, 2, 0.05, lambda m: 0.25 * squared_distance(m, start))
        assert_same(result.client_states[i]["personal"], personal)
    local = [weights(sgd(initial(), x, y, 2, 0.05)) for x, y in train]
    assert_same(result.server_state["global"], average(local, [len(y) for _, y in train]))


def test_lg_fedavg_averages_the_head_and_keeps_each_body():
    result, train, _ = run("lg_fedavg", rounds=2)
    head = ("classifier.2.weight", "classifier.2.bias")
    sizes = [len(y) for _, y in train]
    models = [weights(initial()) for _ in train]
    shared = {k: models[0][k] for k in head}
    for _ in range(2):
        trained = [
            weights(sgd(loaded({**m, **shared}), x, y, 2, 0.05))
            for m, (x, y) in zip(models, train, strict=True)
        ]
        shared = average([{k: t[k] for k in head} for t in trained], sizes)
        models = trained
    for i, model in enumerate(models):
        body = {k: v for k, v in model.items() if k not in head}
        assert_same(result.client_states[i]["local"], body)
    assert_same(result.server_state["global"], shared)


# --- the methods of issue 31 ------------------------------------------------------------
def test_pfedme_takes_moreau_envelope_steps_and_personalizes_at_the_uploaded_model():
    lam, inner, personal_lr, lr = 15.0, 3, 0.05, 0.01
    result, train, _ = run(
        "pfedme", f"algorithm.lam={lam}", f"algorithm.inner_steps={inner}",
        f"algorithm.personal_lr={personal_lr}", f"algorithm.lr={lr}",
    )  # fmt: skip

    def moreau(w: nn.Module, x, y) -> nn.Module:
        anchor = weights(w)
        return sgd(
            copy.deepcopy(w),
            x,
            y,
            inner,
            personal_lr,
            lambda m: lam / 2 * squared_distance(m, anchor),
        )

    uploads = []
    for i, (x, y) in enumerate(train):
        w = initial()
        for _ in range(2):  # R = 2 local rounds: w <- w - eta lam (w - theta~)
            theta = weights(moreau(w, x, y))
            with torch.no_grad():
                for k, p in w.named_parameters():
                    p -= lr * lam * (p - theta[k])
        uploads.append(weights(w))
        assert_same(result.client_states[i]["personal"], moreau(w, x, y))
    assert_same(result.server_state["global"], average(uploads, [1.0, 1.0]))  # beta = 1


def test_perfedavg_personal_model_is_one_step_from_the_received_model():
    alpha = 0.02
    result, train, _ = run("perfedavg", f"algorithm.alpha={alpha}")
    for i, (x, y) in enumerate(train):
        assert_same(result.client_states[i]["personal"], sgd(initial(), x, y, 1, alpha))


@pytest.mark.parametrize(
    ("hessian_free", "exact"),
    [(False, False), (True, False), (True, True)],
    ids=["perfedavg", "perfedavg_hf", "perfedavg_hf-exact"],
)
def test_perfedavg_local_step_is_the_maml_step(hessian_free, exact):
    """One step of mecsim's Per-FedAvg loss on batches D, D', D'' equals the MAML step
    written with autograd: FO ``grad f(w~; D')``; HF ``(I - alpha H(w; D'')) grad f(w~; D')``
    with the exact Hessian-vector product (double backward), which the finite difference
    matches in float64 at delta = 1e-5 (at 1e-3 a perturbation crosses ReLU kinks) and
    the ``exact`` product (forward over reverse) to rounding."""
    from mecsim.algorithms.perfedavg import maml_loss
    from mecsim.learning.training import ModelFunction

    torch.manual_seed(0)
    model, alpha, delta = initial().double(), 0.05, 1e-5
    parts = 3 if hessian_free else 2
    x = torch.randn(8 * parts, 1, 8, 8, dtype=torch.float64)
    y = torch.randint(0, 10, (8 * parts,))
    xs, ys = x.chunk(parts), y.chunk(parts)
    w = list(model.parameters())
    grad = torch.autograd.grad(F.cross_entropy(model(xs[0]), ys[0]), w)
    adapted = copy.deepcopy(model)
    with torch.no_grad():
        for p, g in zip(adapted.parameters(), grad, strict=True):
            p -= alpha * g
    direction = torch.autograd.grad(
        F.cross_entropy(adapted(xs[1]), ys[1]), list(adapted.parameters())
    )
    if hessian_free:
        g3 = torch.autograd.grad(F.cross_entropy(model(xs[2]), ys[2]), w, create_graph=True)
        hvp = torch.autograd.grad(sum((a * b).sum() for a, b in zip(g3, direction, strict=True)), w)
        direction = [d - alpha * h for d, h in zip(direction, hvp, strict=True)]

    function = ModelFunction(copy.deepcopy(model), hand_batched=False)
    params = {k: v.detach().requires_grad_(True) for k, v in model.named_parameters()}
    loss = maml_loss("train", alpha, delta if hessian_free else None, exact=exact)
    value = loss(function.bind(params, {}), params, {"train": {"x": x, "y": y}}, {})
    got = torch.autograd.grad(value, list(params.values()))
    for g, d in zip(got, direction, strict=True):
        torch.testing.assert_close(g, d, atol=1e-8, rtol=1e-6)


def test_apfl_trains_w_then_v_on_the_mixture_then_alpha():
    a0 = 0.4
    result, train, _ = run("apfl", f"algorithm.alpha={a0}")
    for i, (x, y) in enumerate(train):
        w = sgd(initial(), x, y, 2, 0.05)
        wp = weights(w)
        v = initial()
        optimizer = torch.optim.SGD(v.parameters(), lr=0.05)
        for _ in range(2):  # v <- v - eta grad_v f(alpha v + (1 - alpha) w)
            optimizer.zero_grad()
            mix = {k: a0 * p + (1 - a0) * wp[k] for k, p in v.named_parameters()}
            F.cross_entropy(torch.func.functional_call(v, mix, (x,)), y).backward()
            optimizer.step()
        alpha = torch.tensor(a0, requires_grad=True)
        vp = weights(v)
        mix = {k: alpha * vp[k] + (1 - alpha) * wp[k] for k in vp}
        (d_alpha,) = torch.autograd.grad(
            F.cross_entropy(torch.func.functional_call(v, mix, (x,)), y), alpha
        )
        state = result.client_states[i]
        assert_same(state["local"], w)
        assert_same(state["personal"], v)
        torch.testing.assert_close(
            state["alpha"].params["alpha"], (a0 - 0.05 * d_alpha).clamp(0, 1), **TOL
        )


def test_hypcluster_clients_train_their_lowest_loss_hypothesis_and_clusters_average():
    k = 3
    result, train, _ = run("hypcluster", f"algorithm.clusters={k}", clients=3)
    hypotheses = [initial()]
    for j in range(1, k):  # independently initialized: nn's own init from a derived seed
        model = initial()
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(SEED, "hypcluster", j))
            for m in model.modules():
                if hasattr(m, "reset_parameters"):
                    m.reset_parameters()
        hypotheses.append(model)
    chosen, trained = [], []
    for x, y in train:
        with torch.no_grad():
            losses = [float(F.cross_entropy(h.eval()(x), y)) for h in hypotheses]
        j = min(range(k), key=lambda c: (losses[c], c))
        chosen.append(j)
        trained.append(weights(sgd(copy.deepcopy(hypotheses[j]).train(), x, y, 2, 0.05)))
    for i, j in enumerate(chosen):
        assert result.client_states[i]["cluster"] == j
    for j, h in enumerate(hypotheses):
        members = [i for i, c in enumerate(chosen) if c == j]
        expected = (
            average([trained[i] for i in members], [len(train[i][1]) for i in members])
            if members else weights(h)
        )  # fmt: skip
        assert_same(result.server_state["hypotheses"][j], expected)


def test_fedfomo_combines_the_models_that_lower_its_validation_loss():
    """Round 0 trains from the shared init (every downloaded model equals the client's,
    so no weight); round 1 applies eqs. (5)-(6) with all other clients' models (M = N - 1)."""
    result, train, val = run(
        "fedfomo", "data.val_fraction=0.3", "algorithm.neighbors=2", clients=3, rounds=2
    )
    first = [weights(sgd(initial(), x, y, 2, 0.05)) for x, y in train]

    def val_loss(params, i):
        with torch.no_grad():
            return float(F.cross_entropy(loaded(params).eval()(val[i][0]), val[i][1]))

    for i, (x, y) in enumerate(train):
        own, own_loss = first[i], val_loss(first[i], i)
        gains = {}
        for j in range(len(train)):
            if j != i:
                distance = sum(((first[j][k] - own[k]) ** 2).sum() for k in own) ** 0.5
                gains[j] = max((own_loss - val_loss(first[j], i)) / float(distance), 0.0)
        total = sum(gains.values())
        start = own if total == 0 else {
            k: own[k] + sum(g / total * (first[j][k] - own[k]) for j, g in gains.items()) for k in own
        }  # fmt: skip
        assert_same(result.client_states[i]["local"], sgd(loaded(start), x, y, 2, 0.05))


def test_fedgen_generator_and_diversity_match_the_authors_modules():
    """G(z, y) is Linear -> ReLU -> Linear on [z, one-hot(y)], and the diversity term is
    exp(-mean(d_z d_G)) with mean squared noise and mean absolute feature distances."""
    from mecsim.algorithms.fedgen import diversity, generate

    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(4 + 10, 16), nn.ReLU(), nn.Linear(16, 6))
    z, labels = torch.randn(5, 4), torch.randint(0, 10, (5,))
    expected = net(torch.cat([z, F.one_hot(labels, 10).float()], dim=1))
    features = generate(dict(net.named_parameters()), z, labels, 10)
    torch.testing.assert_close(features, expected)
    pairs = [(a, b) for a in range(5) for b in range(5)]
    value = sum(
        float((z[a] - z[b]).pow(2).mean() * (expected[a] - expected[b]).abs().mean().detach())
        for a, b in pairs
    ) / len(pairs)
    torch.testing.assert_close(
        float(diversity(z, expected)), float(torch.exp(torch.tensor(-value))), rtol=1e-5, atol=1e-7
    )


def test_fedgen_round_zero_is_fedavg_and_trains_the_generator():
    result, train, _ = run("fedgen", "algorithm.generator_steps=3")
    local = [weights(sgd(initial(), x, y, 2, 0.05)) for x, y in train]
    assert_same(result.server_state["global"], average(local, [len(y) for _, y in train]))
    prior = result.server_state["prior"]
    counts = torch.bincount(torch.cat([y for _, y in train]), minlength=10).float()
    torch.testing.assert_close(prior, counts / counts.sum())
    server = result.events[result.events["phase"] == "server:train-generator"]
    assert len(server) == 1 and server["flops"].iloc[0] > 0


# --- partial models: FedPer, FedRep, FedBABU, FedBN, LG-FedAvg ------------------------------
def test_fedper_averages_the_body_and_keeps_each_head():
    result, train, _ = run("fedper", rounds=2)
    sizes = [len(y) for _, y in train]
    models = [weights(initial()) for _ in train]
    body = {k: v for k, v in models[0].items() if k not in HEAD}
    for _ in range(2):
        trained = [
            weights(sgd(loaded({**m, **body}), x, y, 2, 0.05))
            for m, (x, y) in zip(models, train, strict=True)
        ]
        body = average([{k: v for k, v in t.items() if k not in HEAD} for t in trained], sizes)
        models = trained
    assert_same(result.server_state["global"], body)
    for i, model in enumerate(models):
        assert_same(result.client_states[i]["local"], {k: model[k] for k in HEAD})


def test_fedrep_trains_the_head_then_the_body_and_shares_the_body():
    result, train, _ = run("fedrep", "algorithm.head_steps=3")
    trained = []
    for x, y in train:
        model = initial()
        head = [p for k, p in model.named_parameters() if k in HEAD]
        body = [p for k, p in model.named_parameters() if k not in HEAD]
        for params, steps in ((head, 3), (body, 2)):
            optimizer = torch.optim.SGD(params, lr=0.05)
            for _ in range(steps):
                optimizer.zero_grad()
                F.cross_entropy(model(x), y).backward()
                optimizer.step()
        trained.append(weights(model))
    for i, t in enumerate(trained):
        assert_same(result.client_states[i]["local"], t)
    bodies = [{k: v for k, v in t.items() if k not in HEAD} for t in trained]
    assert_same(result.server_state["global"], average(bodies, [len(y) for _, y in train]))


@pytest.mark.parametrize("part", ["full", "head"])
def test_fedbabu_trains_the_body_under_a_frozen_head_then_fine_tunes(part):
    result, train, _ = run(
        "fedbabu", "algorithm.finetune_steps=3", f"algorithm.finetune_part={part}"
    )
    init, trained = weights(initial()), []
    for x, y in train:
        model = initial()
        body = [p for k, p in model.named_parameters() if k not in HEAD]
        optimizer = torch.optim.SGD(body, lr=0.05)
        for _ in range(2):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        trained.append(weights(model))
    bodies = [{k: v for k, v in t.items() if k not in HEAD} for t in trained]
    body = average(bodies, [len(y) for _, y in train])
    assert_same(result.server_state["global"], body)
    for i, (x, y) in enumerate(train):  # the received global model (w_G^0: init) fine-tuned
        model = loaded(init)
        tuned = [p for k, p in model.named_parameters() if part == "full" or k in HEAD]
        optimizer = torch.optim.SGD(tuned, lr=0.05)
        for _ in range(3):
            optimizer.zero_grad()
            F.cross_entropy(model(x), y).backward()
            optimizer.step()
        assert_same(result.client_states[i]["personal"], model)


def test_fedbn_keeps_batchnorm_local_and_averages_the_rest():
    result, train, _ = run("fedbn", model="cnn-small-bn")
    trained = [tensors(sgd(initial("cnn-small-bn").train(), x, y, 2, 0.05)) for x, y in train]
    norm = {k for k in trained[0] if k.startswith("features.1.") or k.startswith("features.5.")}
    shared = [
        {k: v for k, v in t.items() if k not in norm and v.is_floating_point()} for t in trained
    ]
    assert_same(result.server_state["global"], average(shared, [len(y) for _, y in train]))
    for i, t in enumerate(trained):  # its own BatchNorm: affine parameters and statistics
        state = result.client_states[i]["local"]
        for k in norm:
            got = state.params.get(k, state.buffers.get(k))
            torch.testing.assert_close(got.to(t[k].dtype), t[k], **TOL)


def features_of(model: nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits, the classifier head's input) of a cnn-small forward."""
    captured = {}
    hook = model.classifier[2].register_forward_pre_hook(lambda m, args: captured.update(z=args[0]))
    try:
        logits = model(x)
    finally:
        hook.remove()
    return logits, captured["z"]


def test_moon_adds_the_model_contrastive_loss_over_two_rounds():
    mu, tau = 0.7, 0.5
    result, train, _ = run("moon", f"algorithm.mu={mu}", f"algorithm.temperature={tau}", rounds=2)
    sizes = [len(y) for _, y in train]
    w = weights(initial())
    previous = [dict(w) for _ in train]
    for _ in range(2):
        trained = []
        for i, (x, y) in enumerate(train):
            model, glob, prev = loaded(w), loaded(w), loaded(previous[i])
            with torch.no_grad():
                z_glob, z_prev = features_of(glob, x)[1], features_of(prev, x)[1]
            optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
            for _ in range(2):  # eq. (2)-(3)
                optimizer.zero_grad()
                logits, z = features_of(model, x)
                positive = F.cosine_similarity(z, z_glob, dim=1) / tau
                negative = F.cosine_similarity(z, z_prev, dim=1) / tau
                contrastive = -torch.log(positive.exp() / (positive.exp() + negative.exp()))
                (F.cross_entropy(logits, y) + mu * contrastive.mean()).backward()
                optimizer.step()
            trained.append(weights(model))
        previous, w = trained, average(trained, sizes)
    assert_same(result.server_state["global"], w)


def test_fedrod_trains_a_balanced_softmax_generic_model_and_an_additive_head():
    result, train, _ = run("fedrod", "algorithm.personal_steps=2")
    generic_models = []
    for i, (x, y) in enumerate(train):
        prior = torch.bincount(y, minlength=10).float()
        log_prior = (prior / prior.sum()).clamp_min(1e-8).log()
        model = initial()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
        for _ in range(2):  # the generic model: CE(logits + log pi_i, y)
            optimizer.zero_grad()
            F.cross_entropy(model(x) + log_prior, y).backward()
            optimizer.step()
        generic = weights(model)
        generic_models.append(generic)
        head_model = loaded(generic)  # personal head (zeros at first) added to the generic
        head = [p for k, p in head_model.named_parameters() if k in HEAD]
        optimizer = torch.optim.SGD(head, lr=0.05)
        for _ in range(2):
            optimizer.zero_grad()
            F.cross_entropy(head_model(x), y).backward()
            optimizer.step()
        tuned = weights(head_model)
        personal_head = {k: tuned[k] - generic[k] for k in HEAD}
        assert_same(result.client_states[i]["personal_head"], personal_head)
    average_generic = average(generic_models, [len(y) for _, y in train])
    assert_same(result.server_state["global"], average_generic)


# --- per-client server models: KAPC, FedAMP ------------------------------------------------
LAYERS = [
    ("features.0.weight", "features.0.bias"),
    ("features.3.weight", "features.3.bias"),
    ("classifier.0.weight", "classifier.0.bias"),
    HEAD,
]


def mixed_models(weights_ijl: torch.Tensor, models: list[dict[str, torch.Tensor]]):
    """s^l_i = sum_j weights[i, l, j] w^l_j."""
    out = []
    for i in range(len(models)):
        s = {}
        for layer, names in enumerate(LAYERS):
            for k in names:
                s[k] = sum(float(weights_ijl[i, layer, j]) * m[k] for j, m in enumerate(models))
        out.append(s)
    return out


def pulled_sgd(start, x, y, anchor, lam, steps, lr):
    """SGD on CE + lam ||w - anchor||^2 (KAPC's eq. 16)."""
    return weights(sgd(loaded(start), x, y, steps, lr, lambda m: lam * squared_distance(m, anchor)))


def test_kapc_updates_the_cube_by_eq_12_and_coaches_toward_s_i_over_two_rounds():
    from mecsim.common.rng import numpy_rng

    lam, beta, relation_lr = 1.0, 0.005, 0.01
    result, train, _ = run("kapc", clients=3, rounds=2)
    n = len(train)
    seed = int(numpy_rng(SEED, "algorithm", "cube").integers(2**62))
    cube = torch.rand(
        n, len(LAYERS), n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64
    )
    cube = cube / cube.sum(-1, keepdim=True)
    models = [weights(initial()) for _ in range(n)]
    for _ in range(2):
        grads = torch.zeros_like(cube)
        for layer, names in enumerate(LAYERS):
            flat = torch.stack(
                [torch.cat([m[k].reshape(-1) for k in names]) for m in models]
            ).double()
            gram = flat @ flat.T
            rows = cube[:, layer, :]
            grads[:, layer, :] = lam * 2 * (rows @ gram - gram) + beta * (rows - 1 / n)
        cube = (cube - relation_lr * grads).clamp_min(0)
        cube = cube / cube.sum(-1, keepdim=True)
        targets = mixed_models(cube, models)
        models = [
            pulled_sgd(models[i], x, y, targets[i], lam, 2, 0.05) for i, (x, y) in enumerate(train)
        ]
    torch.testing.assert_close(result.server_state["cube"], cube)
    for i, m in enumerate(models):
        assert_same(result.client_states[i]["local"], m)


def test_fedamp_coaches_each_client_toward_its_attention_weighted_cloud_model():
    lam, sigma, own = 1.0, 1.0, 0.5
    result, train, _ = run("fedamp", clients=3, rounds=2)
    n = len(train)
    models = [weights(initial()) for _ in range(n)]
    for _ in range(2):
        flat = torch.stack([torch.cat([m[k].reshape(-1) for k in m]) for m in models]).double()
        cosine = F.cosine_similarity(flat[:, None, :], flat[None, :, :], dim=-1)
        xi = torch.zeros(n, n, dtype=torch.float64)
        for i in range(n):
            others = [j for j in range(n) if j != i]
            attention = torch.softmax(sigma * cosine[i, others], dim=0)
            xi[i, others] = (1 - own) * attention
            xi[i, i] = own
        targets = mixed_models(xi[:, None, :].expand(n, len(LAYERS), n), models)
        models = [
            pulled_sgd(models[i], x, y, targets[i], lam, 2, 0.05) for i, (x, y) in enumerate(train)
        ]
    for i, m in enumerate(models):
        assert_same(result.client_states[i]["local"], m)


def test_pfedla_steps_each_hypernetwork_along_its_clients_update_over_two_rounds():
    """alpha_i = softmax per layer of HN_i(v_i); theta-bar_i = sum_j alpha^l_ij theta^l_j;
    after training, one Adam step (torch.optim.Adam) ascends <theta-bar_i(phi), Delta_i>.
    mecsim supplies the hypernetworks' seeded initial values (init_hypernetworks)."""
    from mecsim.algorithms.pfedla import PFedLASettings, init_hypernetworks
    from mecsim.common.rng import numpy_rng

    result, train, _ = run("pfedla", clients=3, rounds=2)
    n, layers, hn_lr = len(train), len(LAYERS), 0.005
    seed = int(numpy_rng(SEED, "algorithm", "hypernetworks").integers(2**62))
    start = init_hypernetworks(n, layers, PFedLASettings(), seed)
    nets = [{k: v[i].clone().requires_grad_(True) for k, v in start.items()} for i in range(n)]
    optimizers = [torch.optim.Adam(list(net.values()), lr=hn_lr) for net in nets]

    def alpha(net):
        hidden = torch.relu(net["embedding"] @ net["w1"] + net["b1"])
        hidden = torch.relu(hidden @ net["w2"] + net["b2"])
        return torch.softmax((hidden @ net["head"] + net["head_bias"]).view(layers, n), dim=-1)

    models = [weights(initial()) for _ in range(n)]
    for _ in range(2):
        with torch.no_grad():
            cube = torch.stack([alpha(net) for net in nets])
        bars = mixed_models(cube, models)
        trained = [weights(sgd(loaded(bars[i]), x, y, 2, 0.05)) for i, (x, y) in enumerate(train)]
        for i in range(n):
            directions = torch.zeros(layers, n, dtype=torch.float64)
            for layer, names in enumerate(LAYERS):
                for j in range(n):
                    directions[layer, j] = sum(
                        (models[j][k].double() * (trained[i][k] - bars[i][k]).double()).sum()
                        for k in names
                    )
            optimizers[i].zero_grad()
            (-(alpha(nets[i]) * directions).sum()).backward()
            optimizers[i].step()
        models = trained
    for i, m in enumerate(models):
        assert_same(result.client_states[i]["local"], m)
    for k, v in result.server_state["hypernetworks"].items():
        for i in range(n):
            torch.testing.assert_close(v[i], nets[i][k].detach(), atol=1e-7, rtol=1e-5)


# --- prediction exchange on the public split: DS-FL, FedMD ---------------------------------
LOGIT_KEYS = (
    "data.public_size=40",
    "algorithm.public_batch_size=4096",
    "algorithm.distill_steps=2",
)


def logit_rounds(train, first, distill, predict, aggregate, rounds=2):
    """Each client's model after ``rounds`` rounds of: (round 0) ``first(model, x, y)``;
    (later) two full-batch SGD steps of ``distill(logits on P, target, client)``, then two of
    cross-entropy; then its upload ``predict(logits on P)``; the server's
    ``aggregate(uploads)`` is the next target. Returns (models, the last target)."""
    x_public = PUBLIC["x"]
    models, target = [initial() for _ in train], None
    for round_ in range(rounds):
        uploads = []
        for i, (model, (x, y)) in enumerate(zip(models, train, strict=True)):
            if round_ == 0:
                first(model, x, y)
            else:
                optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
                for _ in range(2):
                    optimizer.zero_grad()
                    distill(model(x_public), target, i).backward()
                    optimizer.step()
                sgd(model, x, y, 2, 0.05)
            with torch.no_grad():
                uploads.append(predict(model.eval()(x_public)))
            model.train()
        target = aggregate(torch.stack(uploads))
    return models, target


def test_dsfl_distils_toward_the_entropy_reduced_average():
    temperature = 0.1
    result, train, _ = run("dsfl", *LOGIT_KEYS, rounds=2)
    models, target = logit_rounds(
        train,
        first=lambda model, x, y: sgd(model, x, y, 2, 0.05),
        distill=lambda logits, t, i: -(t * F.log_softmax(logits, dim=-1)).sum(-1).mean(),
        predict=lambda logits: F.softmax(logits, dim=-1),
        aggregate=lambda p: F.softmax(p.mean(0) / temperature, dim=-1),
    )
    torch.testing.assert_close(result.server_state["target"], target, **TOL)
    for i, model in enumerate(models):
        assert_same(result.client_states[i]["local"], model)


def test_fedmd_transfers_then_digests_the_consensus_of_class_scores():
    transfer = 3
    result, train, _ = run("fedmd", *LOGIT_KEYS, f"algorithm.transfer_epochs={transfer}", rounds=2)

    def transfer_learning(model, x, y):  # full-batch epochs: one step each
        sgd(model, PUBLIC["x"], PUBLIC["y"], transfer, 0.05)
        sgd(model, x, y, transfer, 0.05)

    models, target = logit_rounds(
        train,
        first=transfer_learning,
        distill=lambda logits, t, i: (logits - t).abs().mean(),
        predict=lambda logits: logits,
        aggregate=lambda p: p.mean(0),
    )
    torch.testing.assert_close(result.server_state["target"], target, **TOL)
    for i, model in enumerate(models):
        assert_same(result.client_states[i]["local"], model)


def test_ktpfl_learns_the_coefficients_and_sends_each_client_its_mixture():
    lam, rho, temperature, c_lr = 1.0, 0.5, 1.0, 0.5
    result, train, _ = run("ktpfl", *LOGIT_KEYS, rounds=2)
    n = len(train)
    state = {"c": torch.full((n, n), 1.0 / n, dtype=torch.float64), "targets": None}

    def aggregate(predictions):  # one projected gradient step on J, then each row's mixture
        p = predictions.double()
        c = state["c"].clone().requires_grad_(True)
        weights = c / c.sum(1, keepdim=True)
        mixed = torch.einsum("nm,mpk->npk", weights, p)
        kl = (mixed * (mixed.log() - p.log())).sum(-1).mean(-1)
        objective = lam * kl.sum() + rho / 2 * ((c - 1 / n) ** 2).sum()
        (grad,) = torch.autograd.grad(objective, c)
        state["c"] = (c.detach() - c_lr * grad).clamp_min(0)
        weights = state["c"] / state["c"].sum(1, keepdim=True)
        state["targets"] = torch.einsum("nm,mpk->npk", weights, p).float()
        return state["targets"]

    def distill(logits, targets, i):  # lambda T^2 KL(s~_n || softmax(logits / T))
        target = targets[i]
        log_student = F.log_softmax(logits / temperature, dim=-1)
        kl = (target * (target.clamp_min(1e-30).log() - log_student)).sum(-1).mean()
        return lam * temperature**2 * kl

    models, _ = logit_rounds(
        train,
        first=lambda model, x, y: sgd(model, x, y, 2, 0.05),
        distill=distill,
        predict=lambda logits: F.softmax(logits / temperature, dim=-1),
        aggregate=aggregate,
    )
    torch.testing.assert_close(result.server_state["coefficients"], state["c"], **TOL)
    for i, model in enumerate(models):
        assert_same(result.client_states[i]["local"], model)


def test_comet_codistills_toward_the_centroid_of_the_soft_decisions():
    """c = 1 (k-means is then the mean, whatever its start): round 1 trains on eq. (2),
    CE on the private batch + lambda mean_x ||s_bar(x) - softmax(w(x))||^2 on P."""
    lam = 2.0
    result, train, _ = run(
        "comet", "data.public_size=40", "algorithm.public_batch_size=4096",
        "algorithm.clusters=1", "algorithm.lr=0.05", "algorithm.batch_size=4096", rounds=2,
    )  # fmt: skip
    x_public = PUBLIC["x"]
    models = [sgd(initial(), x, y, 2, 0.05) for x, y in train]
    with torch.no_grad():
        centroid = torch.stack([F.softmax(m(x_public), dim=-1) for m in models]).mean(0)
    for model, (x, y) in zip(models, train, strict=True):
        gap = lambda m: lam * ((centroid - F.softmax(m(x_public), -1)) ** 2).sum(-1).mean()  # noqa: E731
        sgd(model, x, y, 2, 0.05, gap)
    with torch.no_grad():
        centroid = torch.stack([F.softmax(m(x_public), dim=-1) for m in models]).mean(0)
    torch.testing.assert_close(result.server_state["centroids"][0], centroid, **TOL)
    for i, model in enumerate(models):
        assert_same(result.client_states[i]["local"], model)


def test_feddf_distils_the_average_toward_the_client_ensemble_on_the_server():
    steps, lr, momentum, temperature = 3, 0.02, 0.9, 2.0
    result, train, _ = run(
        "feddf", "data.public_size=40", "algorithm.public_batch_size=4096",
        f"algorithm.distill_steps={steps}", f"algorithm.distill_lr={lr}",
        f"algorithm.distill_momentum={momentum}", f"algorithm.temperature={temperature}",
    )  # fmt: skip
    x_public = PUBLIC["x"]
    clients = [sgd(initial(), x, y, 2, 0.05) for x, y in train]
    student = loaded(average([weights(c) for c in clients], [len(y) for _, y in train]))
    with torch.no_grad():  # AVGLOGITS: the mean of the teachers' logits
        ensemble = torch.stack([c(x_public) for c in clients]).mean(0)
    teacher = F.softmax(ensemble / temperature, dim=-1)
    optimizer = torch.optim.SGD(student.parameters(), lr=lr, momentum=momentum)
    for _ in range(steps):  # T^2 KL(teacher || student)
        optimizer.zero_grad()
        log_student = F.log_softmax(student(x_public) / temperature, dim=-1)
        kl = F.kl_div(log_student, teacher, reduction="batchmean")
        (temperature**2 * kl).backward()
        optimizer.step()
    assert_same(result.server_state["global"], student)


def test_persfl_keeps_the_best_received_model_as_teacher_then_distils_a_grid():
    grid_t, grid_lam, epochs = [1.0, 4.0], [0.5, 1.0], 2
    result, train, val = run(
        "persfl", "data.val_fraction=0.3", "algorithm.fl_rounds=2",
        f"algorithm.distill_epochs={epochs}", "algorithm.temperatures=[1, 4]",
        "algorithm.imitations=[0.5, 1]", rounds=3,
    )  # fmt: skip
    sizes = [len(y) for _, y in train]

    def val_loss(model, i):
        with torch.no_grad():
            return float(F.cross_entropy(model.eval()(val[i][0]), val[i][1]))

    w = weights(initial())
    teachers, best = [None] * len(train), [float("inf")] * len(train)
    for round_ in range(3):
        for i in range(len(train)):  # eq. (2): the received model, if its val loss is lowest
            loss = val_loss(loaded(w), i)
            if loss < best[i] or teachers[i] is None:
                teachers[i], best[i] = dict(w), loss
        if round_ < 2:
            w = average([weights(sgd(loaded(w), x, y, 2, 0.05)) for x, y in train], sizes)
    for i, (x, y) in enumerate(train):
        teacher = loaded(teachers[i]).eval()
        with torch.no_grad():
            teacher_logits = teacher(x)
        chosen, chosen_acc = None, -1.0
        for t in grid_t:
            for lam in grid_lam:
                student = loaded(teachers[i])
                target = F.softmax(teacher_logits / t, dim=-1)
                optimizer = torch.optim.SGD(student.parameters(), lr=0.05)
                for _ in range(epochs):  # (1 - lambda) CE + lambda T^2 KL(teacher || student)
                    optimizer.zero_grad()
                    logits = student(x)
                    log_student = F.log_softmax(logits / t, dim=-1)
                    soft = t**2 * F.kl_div(log_student, target, reduction="batchmean")
                    ((1 - lam) * F.cross_entropy(logits, y) + lam * soft).backward()
                    optimizer.step()
                with torch.no_grad():
                    acc = float((student.eval()(val[i][0]).argmax(1) == val[i][1]).float().mean())
                if acc > chosen_acc:
                    chosen, chosen_acc = student, acc
        assert_same(result.client_states[i]["personal"], chosen)


def test_scd_co_distils_the_generic_and_personal_models_by_their_spectra():
    """Eq. (5): the generic model, from w_G, trains on CE + lambda_g D(s_tau(w) || s_tau(w_p));
    eq. (4): the personal model on CE + lambda_p D(s(w_p) || s(w_G,i)) toward the updated
    generic model; s = |FFT| of all weights flattened, truncated to tau, at unit mean."""
    tau, lambda_g, lambda_p, momentum = 0.4, 0.05, 0.01, 0.5
    result, train, _ = run("scd", "algorithm.personal_steps=2")

    def spec(model_or_params, keep):
        params = model_or_params
        if isinstance(params, nn.Module):
            params = dict(params.named_parameters())
        flat = torch.cat([p.reshape(-1) for p in params.values()])
        magnitude = torch.fft.fft(flat).abs()[: math.ceil(keep * flat.numel())]
        return magnitude / magnitude.mean()

    def divergence(p, q):
        return (p * (p.clamp_min(1e-12).log() - q.clamp_min(1e-12).log())).sum()

    generics = []
    for i, (x, y) in enumerate(train):
        personal_before = weights(initial())
        target = spec(personal_before, tau).detach()
        generic = sgd(
            initial(), x, y, 2, 0.05, lambda m, t=target: lambda_g * divergence(spec(m, tau), t),
            momentum=momentum,
        )  # fmt: skip
        generics.append(weights(generic))
        target = spec(generic, 1.0).detach()
        personal = sgd(
            loaded(personal_before), x, y, 2, 0.05,
            lambda m, t=target: lambda_p * divergence(spec(m, 1.0), t), momentum=momentum,
        )  # fmt: skip
        assert_same(result.client_states[i]["personal"], personal)
    assert_same(result.server_state["global"], average(generics, [len(y) for _, y in train]))


def test_kapc_bls_withholds_self_related_layers_and_uploads_leading_layers_over_two_rounds():
    """Algorithm 3: layer l of s_i goes down only when r^l_ii <= mu; a client regularizes a
    layer it did not receive, and (eq. 20) every layer beyond its Omega_i, toward its own
    last-round model; its first selection uploads L - 1 layers (Algorithm 4, lines 3-9),
    so the server's copy of the head stays at its initial value."""
    from mecsim.common.rng import numpy_rng

    lam, beta, relation_lr, mu = 1.0, 0.005, 0.01, 0.4
    result, train, _ = run("kapc_bls", f"algorithm.mu={mu}", clients=3, rounds=2)
    n = len(train)
    seed = int(numpy_rng(SEED, "algorithm", "cube").integers(2**62))
    generator = torch.Generator().manual_seed(seed)
    cube = torch.rand(n, len(LAYERS), n, generator=generator, dtype=torch.float64)
    cube = cube / cube.sum(-1, keepdim=True)
    stored = [weights(initial()) for _ in range(n)]  # the server's bank
    own = [weights(initial()) for _ in range(n)]  # each client's model
    omega = [len(LAYERS)] * n
    withheld = 0
    for _ in range(2):
        grads = torch.zeros_like(cube)
        for layer, names in enumerate(LAYERS):
            flat = torch.stack([torch.cat([m[k].reshape(-1) for k in names]) for m in stored])
            gram = flat.double() @ flat.double().T
            rows = cube[:, layer, :]
            grads[:, layer, :] = lam * 2 * (rows @ gram - gram) + beta * (rows - 1 / n)
        cube = (cube - relation_lr * grads).clamp_min(0)
        cube = cube / cube.sum(-1, keepdim=True)
        targets = mixed_models(cube, stored)
        for i, (x, y) in enumerate(train):
            anchor = {}
            for layer, names in enumerate(LAYERS):
                sent = float(cube[i, layer, i]) <= mu and layer < omega[i]
                withheld += float(cube[i, layer, i]) > mu
                for k in names:
                    anchor[k] = targets[i][k] if sent else own[i][k]
            own[i] = pulled_sgd(own[i], x, y, anchor, lam, 2, 0.05)
        omega = [len(LAYERS) - 1] * n  # the first selection: L - 1 layers
        for i in range(n):
            stored[i] = {**stored[i], **{k: own[i][k] for names in LAYERS[:-1] for k in names}}
    assert withheld > 0  # mu withholds some layers here, so the test exercises Algorithm 3
    for i, m in enumerate(own):
        assert_same(result.client_states[i]["local"], m)


def test_fedgen_client_loss_is_eq_5_plus_the_codes_latent_term():
    """CE(f(x), y) + a CE(g(G(z, y^)), y^) + b KL(softmax(g(G(z, y))) || softmax(f(x))) with
    z and y^ the bank rows of the batch's sample indices, written out here."""
    from mecsim.algorithms.fedgen import BANK_Y, BANK_Z, GEN, WEIGHTS, fedgen_loss
    from mecsim.learning.training import ModelFunction

    torch.manual_seed(1)
    model, a, b = initial(), 0.7, 0.3
    generator = nn.Sequential(nn.Linear(4 + 10, 16), nn.ReLU(), nn.Linear(16, 64))
    x, y, i = torch.randn(6, 1, 8, 8), torch.randint(0, 10, (6,)), torch.arange(6) * 5
    bank_z, bank_y = torch.randn(8, 4), torch.randint(0, 10, (8,))
    z, sampled = bank_z[i % 8], bank_y[i % 8]

    def head(features):
        return model.classifier[2](features)

    with torch.no_grad():
        real = F.softmax(head(generator(torch.cat([z, F.one_hot(y, 10).float()], 1))), -1)
    logits = model(x)
    generated = head(generator(torch.cat([z, F.one_hot(sampled, 10).float()], 1)))
    expected = (
        F.cross_entropy(logits, y)
        + a * F.cross_entropy(generated, sampled)
        + b * F.kl_div(F.log_softmax(logits, -1), real, reduction="batchmean")
    )
    consts = {GEN + k: v.detach() for k, v in generator.named_parameters()}
    consts.update({BANK_Z: bank_z, BANK_Y: bank_y, WEIGHTS: torch.tensor([a, b])})
    params = {k: v.detach() for k, v in model.named_parameters()}
    function = ModelFunction(copy.deepcopy(model), hand_batched=False)
    loss = fedgen_loss("train", HEAD, 10)
    value = loss(function.bind(params, {}), params, {"train": {"x": x, "y": y, "i": i}}, consts)
    torch.testing.assert_close(value, expected.detach())


def test_every_algorithm_has_a_reference_test_here():
    from pathlib import Path

    from mecsim.algorithms import ALGORITHMS

    source = Path(__file__).read_text()
    built_in = [
        n
        for n in ALGORITHMS.names()
        if ALGORITHMS.get(n).__module__.startswith("mecsim.algorithms")
    ]
    assert len(built_in) >= 32
    missing = [n for n in built_in if f'"{n}"' not in source]
    assert not missing, f"no reference test names {missing}"

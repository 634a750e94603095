"""Baselines of interface v2: what each moves, and the reductions that pin their equations."""

from __future__ import annotations

import pytest
import torch

import mecsim
from mecsim.common.rng import derive_seed
from mecsim.learning.models import build_model
from mecsim.learning.models.catalog import Architecture

BN = ["model.name=cnn-small-bn", "algorithm.steps=2"]


def architecture() -> Architecture:
    module = build_model("cnn-small-bn", input_shape=(1, 8, 8), num_classes=10, seed=0)
    return Architecture.of("cnn-small-bn", module)


def moved_bytes(result) -> set[int]:
    events = result.events
    return set(events[events["phase"].isin(["upload", "download"])]["bytes"])


@pytest.mark.parametrize(
    ("name", "kept"),
    [
        ("fedbn", lambda a: a.norm_keys),
        ("fedper", lambda a: set(a.head_keys)),
        ("fedrep", lambda a: set(a.head_keys)),
        ("fedbabu", lambda a: set(a.head_keys)),
    ],
)
def test_partial_methods_move_exactly_the_shared_entries(tiny, name, kept):
    arch = architecture()
    full = arch.initial.to_payload()
    expected = sum(t.nbytes for k, t in full.items() if k not in kept(arch))

    result = mecsim.run(tiny, BN + [f"algorithm.name={name}"], write=False)

    assert moved_bytes(result) == {expected}
    assert expected < sum(t.nbytes for t in full.values())


def test_scaffold_moves_a_model_and_a_control_variate_each_way(tiny):
    arch = architecture()
    model = sum(t.nbytes for t in arch.initial.to_payload().values())
    control = sum(t.nbytes for t in arch.initial.params.values())

    result = mecsim.run(tiny, BN + ["algorithm.name=scaffold"], write=False)

    assert moved_bytes(result) == {model + control}


def test_fedavgm_without_momentum_is_fedavg(tiny):
    fedavg = mecsim.run(tiny, ["algorithm.steps=2"], write=False)
    fedavgm = mecsim.run(
        tiny,
        [
            "algorithm.steps=2",
            "algorithm.name=fedavgm",
            "algorithm.server_momentum=0",
            "algorithm.server_lr=1",
        ],
        write=False,
    )
    for k, v in fedavg.server_state["global"].params.items():
        torch.testing.assert_close(fedavgm.server_state["global"].params[k], v)


def test_fedbn_keeps_each_clients_batchnorm_statistics(tiny):
    result = mecsim.run(tiny, BN + ["algorithm.name=fedbn"], write=False)
    key = next(k for k in architecture().norm_keys if k.endswith("running_mean"))
    means = [s["local"].buffers[key] for s in result.client_states]
    assert not torch.allclose(means[0], means[1])


@pytest.mark.parametrize(
    ("momentum", "control_steps", "divisor"),
    [
        (0.0, "momentum", 3.0),  # option II as written: K = 3
        (0.9, "plain", 3.0),
        (0.9, "momentum", 1.0 + 1.9 + 2.71),  # sum_k (1 - 0.9^k) / 0.1, by hand
    ],
)
def test_scaffold_control_variates_follow_option_two(tiny, momentum, control_steps, divisor):
    """With one client and eta_g = 1: c_i = (x - y) / (S lr) and c = c_i after round 0, S
    the steps K, or under momentum the plain-SGD steps that K heavy-ball steps amount to."""
    result = mecsim.run(
        tiny,
        ["algorithm.name=scaffold", "algorithm.steps=3", "clients.count=1", "protocol.rounds=1"]
        + [f"algorithm.momentum={momentum}", f"algorithm.control_steps={control_steps}"],
        write=False,
    )
    x = build_model("cnn-small", input_shape=(1, 8, 8), num_classes=10, seed=derive_seed(3, "init"))
    y = result.server_state["global"]  # eta_g = 1, one client: x <- y
    lr = result.scenario.algorithm.lr
    for name, p in x.named_parameters():
        expected = (p.detach() - y.params[name]) / (divisor * lr)
        torch.testing.assert_close(result.client_states[0]["control"][name], expected)
        torch.testing.assert_close(result.server_state["control"][name], expected)


def test_scaffold_momentum_steps_recover_a_constant_gradient():
    """Heavy-ball SGD (torch.optim.SGD) on a linear loss <g, w> for K steps moves w by
    lr S_K g: effective_steps is S_K, so the control estimate is g itself."""
    from mecsim.algorithms.scaffold import effective_steps

    g = torch.tensor([0.3, -1.2, 2.0])
    for steps in (1, 2, 8, 28):
        w = torch.zeros(3, requires_grad=True)
        optimizer = torch.optim.SGD([w], lr=0.01, momentum=0.9)
        for _ in range(steps):
            optimizer.zero_grad()
            (w * g).sum().backward()
            optimizer.step()
        estimate = -w.detach() / (0.01 * effective_steps(steps, 0.9))
        torch.testing.assert_close(estimate, g)
    assert effective_steps(5, 0.0) == 5.0


def test_scaffold_trains_with_client_momentum_at_the_quickstarts_rate():
    """Option II's (x - y)/(K lr) read a momentum client's displacement as 1.5x (K = 2) to
    8.2x (K = 50) its gradient, a different scale per client, and c - c_i stopped cancelling:
    at lr 0.05 and momentum 0.9 training diverged in round 16. Counting heavy-ball steps
    keeps every c_i on the gradient's scale."""
    from pathlib import Path

    scenario = Path(__file__).resolve().parents[2] / "scenarios" / "quickstart.toml"
    result = mecsim.run(
        scenario,
        ["data.alpha=0.1", "algorithm.name=scaffold", "protocol.rounds=20"]
        + ["output.progress=false"],
        write=False,
    )
    assert result.rounds["generic_acc"].dropna().iloc[-1] > 0.5
    control = result.server_state["control"]
    assert max(float(v.abs().max()) for v in control.values()) < 1.0


def test_scaffold_control_variates_stay_bounded_with_client_momentum():
    """The correction c - c_i went through the momentum buffer and the control variates
    grew geometrically (8.1 -> 33 -> 175 -> 982 -> NaN at lr 0.01, momentum 0.9); applied
    outside it they stay at the size of a gradient."""
    from pathlib import Path

    from mecsim.algorithms.scaffold import Scaffold

    largest: list[float] = []
    original = Scaffold.aggregate

    def aggregate(self, server_state, uploads, ctx):
        out = original(self, server_state, uploads, ctx)
        largest.append(max(float(v.abs().max()) for v in out["control"].values()))
        return out

    scenario = Path(__file__).resolve().parents[2] / "scenarios" / "quickstart.toml"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Scaffold, "aggregate", aggregate)
        result = mecsim.run(
            scenario,
            ["data.alpha=0.1", "algorithm.name=scaffold", "algorithm.lr=0.01"]
            + ["algorithm.momentum=0.9", "protocol.rounds=10", "output.progress=false"],
            write=False,
        )
    assert len(largest) == 10 and max(largest) < 1.0
    assert result.rounds["generic_acc"].iloc[-1] > 0.2  # learning (chance: 0.1)


def test_fedbn_refuses_a_model_without_normalization_layers(tiny):
    """On cnn-small FedBN was FedAvg plus one local round, reported as FedBN."""
    from mecsim.common.errors import ConfigError

    with pytest.raises(ConfigError, match="model.name: fedbn .* 'cnn-small' has none"):
        mecsim.run(tiny, ["algorithm.name=fedbn", "execution.cost_only=true"], write=False)


def test_fedbns_list_of_models_with_normalization_layers_is_the_catalogs():
    from mecsim.algorithms.fedbn import NORMALIZED_MODELS
    from mecsim.learning.models import MODELS

    normalized = []
    for name in MODELS.names():
        shape = (1, 8, 8) if name.startswith(("cnn-small", "mlp")) else (3, 32, 32)
        model = build_model(name, input_shape=shape, num_classes=10, seed=0)
        if any(isinstance(m, torch.nn.modules.batchnorm._NormBase) for m in model.modules()):
            normalized.append(name)
    assert tuple(normalized) == NORMALIZED_MODELS


def test_feddyn_with_its_authors_gradient_clipping_does_not_diverge_where_it_did():
    """Quickstart, alpha 0.1, momentum 0.9, lr 0.05: NaN in round 22-24 without clipping."""
    from pathlib import Path

    scenario = Path(__file__).resolve().parents[2] / "scenarios" / "quickstart.toml"
    result = mecsim.run(
        scenario,
        ["data.alpha=0.1", "algorithm.name=feddyn", "protocol.rounds=30"]
        + ["output.progress=false", "execution.cost_only=false"],
        write=False,
    )
    assert result.scenario.algorithm.max_grad_norm == 10.0
    assert len(result.rounds) == 30 and result.rounds["generic_acc"].iloc[-1] > 0.9
    clipped = result.events[result.events["phase"] == "compute:local"]
    unclipped = mecsim.run(
        scenario,
        ["data.alpha=0.1", "algorithm.name=feddyn", "protocol.rounds=1"]
        + ["output.progress=false", "algorithm.max_grad_norm=0", "execution.cost_only=true"],
        write=False,
    ).events
    first = clipped[clipped["round"] == 0].set_index("client")["flops"]
    plain = unclipped[unclipped["phase"] == "compute:local"].set_index("client")["flops"]
    assert (first > plain).all()  # clipping's FLOPs are counted


@pytest.mark.parametrize("part", ["full", "head"])
def test_fedbabu_fine_tunes_the_whole_model_as_its_paper_or_the_head_alone(tiny, part):
    """Oh et al. personalize by fine-tuning the whole network (their code: one SGD rate for
    body and head); ``finetune_part = "head"`` keeps the received global body, which every
    client of the last round shares."""
    overrides = ["algorithm.steps=2", "algorithm.name=fedbabu", f"algorithm.finetune_part={part}"]
    result = mecsim.run(tiny, [*overrides, "protocol.participation=1.0"], write=False)
    arch = Architecture.of(
        "cnn-small", build_model("cnn-small", input_shape=(1, 8, 8), num_classes=10, seed=0)
    )
    body = [k for k in arch.initial.params if k not in set(arch.head_keys)]
    first, second = (s["personal"].params for s in result.client_states[:2])
    assert any(not torch.equal(first[k], second[k]) for k in body) == (part == "full")
    head = arch.head_keys[0]
    assert not torch.equal(first[head], second[head])  # the head is tuned either way


def test_feddyn_can_weight_alpha_per_client_as_its_authors_code(tiny):
    """``client_alpha = "data_size"``: client i regularizes with alpha / w_i, w_i = n_i N /
    sum n (alpaemreacar/FedDyn); ``uniform`` is the paper's single alpha."""
    from mecsim.algorithms.feddyn import ALPHA, FedDyn

    seen = {}
    constants = FedDyn.task_constants

    def record(self, task, state, payload, ctx):
        out = constants(self, task, state, payload, ctx)
        seen[(self.settings.client_alpha, ctx.client)] = float(out[ALPHA])
        return out

    base = ["algorithm.name=feddyn", "algorithm.alpha=0.1", "protocol.rounds=1"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(FedDyn, "task_constants", record)
        uniform = mecsim.run(tiny, [*base, "algorithm.client_alpha=uniform"], write=False)
        mecsim.run(tiny, [*base, "algorithm.client_alpha=data_size"], write=False)
    sizes = uniform.clients.set_index("client")["num_train"]
    assert len(set(sizes)) > 1  # the tiny partition gives unequal clients
    for client, n in sizes.items():
        assert seen[("uniform", client)] == pytest.approx(0.1)
        by_hand = 0.1 * sizes.sum() / (len(sizes) * n)
        assert seen[("data_size", client)] == pytest.approx(by_hand, rel=1e-6)


def test_fedavgm_defaults_to_hsu_et_als_server_step(tiny):
    """w <- w - v with v = beta v + Delta (server step 1): the first round, v = Delta, lands
    exactly on FedAvg's average (a server step of 0.1 moved a tenth of the way)."""
    fedavg = mecsim.run(tiny, ["algorithm.steps=2", "protocol.rounds=1"], write=False)
    fedavgm = mecsim.run(
        tiny, ["algorithm.steps=2", "protocol.rounds=1", "algorithm.name=fedavgm"], write=False
    )
    assert fedavgm.scenario.algorithm.server_lr == 1.0
    assert fedavgm.scenario.algorithm.server_momentum == 0.9
    for k, v in fedavg.server_state["global"].params.items():
        torch.testing.assert_close(fedavgm.server_state["global"].params[k], v)


@pytest.mark.parametrize("top", [1, 2])
def test_lg_fedavg_shares_the_top_layers_and_keeps_the_rest_local(tiny, top):
    """LG-FedAvg: the top ``global_layers`` layers go up, are averaged by n_i / n and come
    down; the lower layers never leave a client."""
    from mecsim.algorithms.lg_fedavg import LGFedAvg

    arch = Architecture.of(
        "cnn-small", build_model("cnn-small", input_shape=(1, 8, 8), num_classes=10, seed=0)
    )
    shared = arch.layer_keys(arch.layers[-top:])
    uploads = []
    aggregate = LGFedAvg.aggregate

    def record(self, server_state, ups, ctx):
        uploads.append([(u.payload, u.num_samples) for u in ups])
        return aggregate(self, server_state, ups, ctx)

    overrides = [
        "algorithm.name=lg_fedavg",
        f"algorithm.global_layers={top}",
        "algorithm.steps=2",
        "protocol.rounds=2",
        "protocol.participation=1.0",
    ]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(LGFedAvg, "aggregate", record)
        result = mecsim.run(tiny, overrides, write=False)

    expected = sum(arch.initial.to_payload()[k].nbytes for k in shared)
    assert moved_bytes(result) == {expected}
    assert all(set(p) == set(shared) for p, _ in uploads[-1])
    total = sum(n for _, n in uploads[-1])
    for k in shared:  # the global top layers: the n_i / n average of the uploads
        by_hand = sum(p[k] * (n / total) for p, n in uploads[-1])
        torch.testing.assert_close(result.server_state["global"].params[k], by_hand)
    lower = [k for k in arch.initial.params if k not in shared]
    first, second = (s["local"].params for s in result.client_states[:2])
    assert all(not torch.equal(first[k], second[k]) for k in lower)  # each kept its own

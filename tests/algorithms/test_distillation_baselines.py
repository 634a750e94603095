"""The distillation baselines of COMET's tables: DS-FL, FedMD, KT-pFL and FedDF."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import mecsim
from mecsim.algorithms.dsfl import DSFL, entropy_reduction_aggregate
from mecsim.algorithms.fedmd import FedMD
from mecsim.algorithms.ktpfl import (
    KTpFLSettings,
    coefficient_objective,
    mixtures,
    update_coefficients,
)
from mecsim.engine.simulation import Simulation
from mecsim.learning.devices import DEVICES
from mecsim.learning.models import build_model, forward_flops_per_sample

PUBLIC = 40
CLASSES = 10
PIXELS = 64
SHARED = [
    f"data.public_size={PUBLIC}",
    "algorithm.steps=3",
    "algorithm.batch_size=8",
    "algorithm.public_batch_size=8",
    "algorithm.lr=0.05",
    "protocol.rounds=3",
    "clients.count=4",
]


def _recording_uploads(cls):
    """Patch ``cls.aggregate`` to record each round's uploads; returns (patch, record)."""
    record: list[list] = []
    original = cls.aggregate

    def aggregate(self, server_state, uploads, ctx):
        record.append([u.payload["predictions"].clone() for u in uploads])
        return original(self, server_state, uploads, ctx)

    patch = pytest.MonkeyPatch()
    patch.setattr(cls, "aggregate", aggregate)
    return patch, record


def _entropy(p: torch.Tensor) -> torch.Tensor:
    return -(torch.xlogy(p, p)).sum(-1).mean()


# --- DS-FL -------------------------------------------------------------------------------


def test_era_is_the_softmax_of_the_mean_over_t_and_lowers_entropy():
    torch.manual_seed(0)
    predictions = torch.softmax(torch.randn(5, 7, 10), dim=-1)

    target = entropy_reduction_aggregate(predictions, 0.1)

    torch.testing.assert_close(target, torch.softmax(predictions.mean(0) / 0.1, dim=-1))
    assert _entropy(target) < _entropy(predictions.mean(0))


@pytest.fixture(scope="module")
def dsfl_run(tiny_module):
    patch, record = _recording_uploads(DSFL)
    with patch.context():
        result = mecsim.run(
            copy.deepcopy(tiny_module), ["algorithm.name=dsfl", *SHARED], write=False
        )
    patch.undo()
    return result, record


def test_dsfl_sends_the_era_of_the_last_uploads(dsfl_run):
    result, record = dsfl_run
    expected = entropy_reduction_aggregate(torch.stack(record[-1]), 0.1)
    torch.testing.assert_close(result.server_state["target"], expected)


def test_dsfl_moves_public_times_classes_floats_each_way(dsfl_run):
    events = dsfl_run[0].events
    d = PUBLIC * CLASSES
    assert (events.query("phase == 'upload'")["bytes"] == d * 4).all()
    assert (events.query("phase == 'download'")["bytes"] == d * 4).all()
    assert (events.query("phase == 'download'")["round"] >= 1).all()  # round 0 has no target
    aggregate = events.query("phase == 'aggregate'")
    assert (aggregate["flops"] == 4 * d + 4 * d).all()  # m d to average, 4 d for ERA


# --- FedMD -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fedmd_run(tiny_module):
    patch, record = _recording_uploads(FedMD)
    overrides = ["algorithm.name=fedmd", *SHARED, "algorithm.transfer_epochs=1"]
    with patch.context():
        result = mecsim.run(copy.deepcopy(tiny_module), overrides, write=False)
    patch.undo()
    return result, record


def test_fedmd_consensus_is_the_mean_of_the_class_scores(fedmd_run):
    result, record = fedmd_run
    scores = torch.stack(record[-1])
    assert not torch.allclose(scores.sum(-1), torch.ones(scores.shape[:-1]))  # logits
    torch.testing.assert_close(result.server_state["target"], scores.mean(0))


def test_fedmd_transfer_learns_on_labeled_public_data_first(fedmd_run):
    events = fedmd_run[0].events
    phases = events[events["phase"].str.startswith("compute:")].groupby("round")["phase"]
    assert set(phases.get_group(0)) == {
        "compute:transfer:public",
        "compute:transfer:private",
        "compute:logits",
    }
    assert set(phases.get_group(1)) == {"compute:digest", "compute:revisit", "compute:logits"}
    public = events.query("phase == 'download:public'")
    assert (public["bytes"] == PUBLIC * (PIXELS * 4 + 8)).all()  # inputs and int64 labels


# --- KT-pFL ------------------------------------------------------------------------------


def test_a_coefficient_step_lowers_the_objective_and_keeps_c_nonnegative():
    torch.manual_seed(0)
    predictions = torch.softmax(3 * torch.randn(4, 6, 5, dtype=torch.float64), dim=-1)
    block = torch.full((4, 4), 0.25, dtype=torch.float64)
    settings = KTpFLSettings(coefficient_lr=0.05, coefficient_steps=1)

    updated = update_coefficients(block, predictions, settings, num_clients=4)

    before = coefficient_objective(block, predictions, 1.0, 0.5, 4)
    after = coefficient_objective(updated, predictions, 1.0, 0.5, 4)
    assert after < before
    assert (updated >= 0).all() and not torch.equal(updated, block)


def test_mixtures_are_distributions():
    predictions = torch.softmax(torch.randn(3, 4, 5), dim=-1)
    coefficients = torch.rand(2, 3)

    torch.testing.assert_close(mixtures(coefficients, predictions).sum(-1), torch.ones(2, 4))


@pytest.fixture(scope="module")
def ktpfl_run(tiny_module):
    """KT-pFL with 2 of 6 clients a round; each client's downlink target recorded."""
    received: dict[tuple[int, int], torch.Tensor] = {}
    original = Simulation.payloads

    def payloads(self, selected, round_=0):
        out = original(self, selected, round_)
        received.update({(round_, c): p["target"].clone() for c, p in out.items() if p})
        return out

    overrides = [
        "algorithm.name=ktpfl",
        *SHARED,
        "clients.count=6",
        "protocol.clients_per_round=2",
        "protocol.rounds=4",
    ]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Simulation, "payloads", payloads)
        result = mecsim.run(copy.deepcopy(tiny_module), overrides, write=False)
    return result, received


def test_ktpfl_updates_only_the_block_of_the_uploaders(ktpfl_run):
    result, _ = ktpfl_run
    c = result.server_state["coefficients"]
    uploaders = set(result.events.query("phase == 'upload'")["client"])
    untouched = [n for n in range(6) if n not in uploaders]
    assert (c[untouched] == 1 / 6).all() and (c[:, untouched] == 1 / 6).all()
    assert not (c[sorted(uploaders)][:, sorted(uploaders)] == 1 / 6).all()


def test_ktpfl_sends_each_client_its_own_target(ktpfl_run):
    result, received = ktpfl_run
    by_round: dict[int, list[torch.Tensor]] = {}
    for (round_, _), target in received.items():
        by_round.setdefault(round_, []).append(target)
    assert any(not torch.allclose(ts[0], ts[1]) for ts in by_round.values() if len(ts) == 2)
    downloads = result.events.query("phase == 'download'")
    assert (downloads["bytes"] == PUBLIC * CLASSES * 4).all()


# --- FedDF -------------------------------------------------------------------------------

FEDDF = ["algorithm.name=feddf", *SHARED, "algorithm.distill_steps=5", "protocol.rounds=1"]


def test_server_distillation_costs_one_forward_per_teacher(tiny):
    """Each extra client adds one teacher forward over every public batch of every step."""
    four = mecsim.run(copy.deepcopy(tiny), FEDDF, write=False).events
    six = mecsim.run(tiny, [*FEDDF, "clients.count=6"], write=False).events
    server_flops = [
        e.query("phase == 'server:ensemble-distill'")["flops"].item() for e in (four, six)
    ]

    model = build_model("cnn-small", input_shape=(1, 8, 8), num_classes=CLASSES, seed=0)
    forward = forward_flops_per_sample(model, (1, 8, 8))
    assert server_flops[1] - server_flops[0] == 5 * 2 * 8 * forward

    task = six.query("phase == 'server:ensemble-distill'").iloc[0]
    server = DEVICES.get("edge-server").flops_per_s
    np.testing.assert_allclose(task["t_end"] - task["t_start"], task["flops"] / server)
    aggregate = six.query("phase == 'aggregate'").iloc[0]
    assert task["t_start"] == pytest.approx(aggregate["t_end"])  # after the average


def test_feddf_distills_the_average_and_drops_the_teachers(tiny):
    feddf = mecsim.run(copy.deepcopy(tiny), FEDDF, write=False)
    plain = [o for o in FEDDF if "public_batch" not in o and "distill" not in o]
    fedavg = mecsim.run(tiny, [*plain[1:], "algorithm.name=fedavg"], write=False)

    assert "teachers" not in feddf.server_state
    distilled, averaged = feddf.server_state["global"], fedavg.server_state["global"]
    assert any(not torch.equal(distilled.params[k], averaged.params[k]) for k in averaged.params)
    assert feddf.rounds["generic_acc"].notna().all()


# --- a public split from another dataset (COMET: CIFAR-100 for CIFAR-10) -----------------


def test_a_public_dataset_leaves_the_private_data_whole(tiny):
    base = ["algorithm.name=dsfl", *SHARED, "protocol.rounds=1"]
    held_out = mecsim.run(copy.deepcopy(tiny), base, write=False)
    separate = mecsim.run(tiny, [*base, "data.public_dataset=digits"], write=False)

    assert separate.clients["num_train"].sum() > held_out.clients["num_train"].sum()
    public = separate.events.query("phase == 'download:public'")
    assert (public["bytes"] == PUBLIC * PIXELS * 4).all()


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algorithm.name=dsfl", "data.public_dataset=mnist-5k"], "same shape"),
        (["algorithm.name=dsfl", "data.public_dataset=imagenet"], "unknown dataset"),
        (
            ["algorithm.name=fedmd", "data.dataset=cifar10", "data.public_dataset=cifar100"],
            "100 classes",
        ),
    ],
)
def test_a_public_dataset_is_checked_before_anything_loads(tiny, overrides, message):
    from mecsim.config.scenario import ScenarioError, load_scenario

    with pytest.raises(ScenarioError, match="data.public_dataset") as error:
        load_scenario(tiny, [*overrides, f"data.public_size={PUBLIC}"])
    assert message in str(error.value)

"""Peak state memory: the tensor bytes clients and the server keep between jobs."""

from __future__ import annotations

import copy

import pytest
import torch

import mecsim
from mecsim.learning.state import ModelState, state_nbytes

PUBLIC, CLASSES = 40, 10
MODEL_BYTES = 13_706 * 4  # cnn-small on digits, float32


def test_state_nbytes_walks_nested_states_and_counts_shared_tensors_once():
    weight = torch.zeros(3, 4)  # 48 bytes
    model = ModelState({"w": weight}, {"b": torch.zeros(2, dtype=torch.float64)})  # 48 + 16
    state = {"model": model, "again": [weight, (weight,)], "n": 3, "none": None}

    assert state_nbytes(state) == 48 + 16
    assert state_nbytes({"a": torch.empty(5, 2, device="meta")}) == 40


def test_meta_tensors_count_each_time_they_stand_for_a_value():
    stand_in = torch.empty(10, device="meta")
    assert state_nbytes([stand_in, stand_in]) == 80


def test_clients_of_one_broadcast_share_one_view_of_it():
    template = ModelState({"w": torch.zeros(2)}, {"n": torch.zeros((), dtype=torch.long)})
    payload = {"w": torch.ones(2), "n": torch.zeros((), dtype=torch.long), "extra": torch.ones(1)}
    first = ModelState.from_payload(payload, template)
    assert ModelState.from_payload(payload, template) is first
    assert first.params["w"] is payload["w"] and first.buffers["n"] is payload["n"]
    payload["w"] = torch.full((2,), 3.0)  # an entry replaced in place: a new view
    second = ModelState.from_payload(payload, template)
    assert second is not first and second.params["w"] is payload["w"]
    assert ModelState.from_payload(dict(payload), template) is not second  # another payload


def test_meta_state_bytes_are_numel_times_element_size():
    state = ModelState(
        {"w": torch.empty(3, 4, device="meta")},
        {"n": torch.empty((), dtype=torch.long, device="meta")},
    )
    assert state.meta_nbytes() == 3 * 4 * 4 + 8
    assert state_nbytes({"a": state, "b": [state]}) == 2 * (48 + 8)  # each stands for values
    real = ModelState({"w": torch.zeros(3)}, {})
    assert real.meta_nbytes() is None and state_nbytes({"a": real, "b": real}) == 12


def _run(tiny, overrides, cost_only=False):
    flag = f"execution.cost_only={str(cost_only).lower()}"
    return mecsim.run(copy.deepcopy(tiny), [*overrides, flag], write=False)


def test_model_bytes_match_the_clients_table(tiny):
    result = _run(tiny, ["algorithm.name=fedavg"])
    assert (result.clients["num_params"] * 4 == MODEL_BYTES).all()


@pytest.mark.parametrize("cost_only", [False, True])
def test_feddf_server_holds_the_average_and_one_teacher_per_upload(tiny, cost_only):
    result = _run(tiny, ["algorithm.name=feddf", f"data.public_size={PUBLIC}"], cost_only)
    assert result.summary["server_state_peak_bytes"] == (1 + 4) * MODEL_BYTES


@pytest.mark.parametrize("cost_only", [False, True])
def test_persfl_counts_the_teacher_in_client_memory(tiny, cost_only):
    overrides = [
        "algorithm.name=persfl",
        "algorithm.fl_rounds=1",
        "protocol.rounds=2",
        "data.val_fraction=0.2",
        "algorithm.distill_epochs=1",
        "algorithm.temperatures=[1, 4]",
        "algorithm.imitations=[0, 0.5]",
    ]
    result = _run(tiny, overrides, cost_only)
    # teacher, personalized model, and the last trained global model
    assert (result.clients["state_peak_bytes"] == 3 * MODEL_BYTES).all()
    assert result.summary["client_state_peak_bytes"] == 3 * MODEL_BYTES


def test_ktpfl_server_holds_the_coefficients_and_the_last_predictions(tiny):
    result = _run(tiny, ["algorithm.name=ktpfl", f"data.public_size={PUBLIC}"])
    n = 4
    assert result.summary["server_state_peak_bytes"] == n * n * 8 + n * PUBLIC * CLASSES * 4


def test_public_download_is_summarized_with_its_time(tiny):
    result = _run(tiny, ["algorithm.name=comet", f"data.public_size={PUBLIC}"])
    public = result.events.query("phase == 'download:public'")
    assert result.summary["public_bytes_down_total"] == 4 * PUBLIC * 64 * 4
    assert result.summary["public_download_s"] == pytest.approx(public["t_end"].max())
    assert result.summary["bytes_down_total"] >= result.summary["public_bytes_down_total"]

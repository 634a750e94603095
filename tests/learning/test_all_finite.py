"""all_finite: one read-back for many tensors, and every kind of non-finite found."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mecsim.algorithms.base import Task
from mecsim.common.errors import ConfigError
from mecsim.executors.base import ClientJob, check_finite
from mecsim.learning import state
from mecsim.learning.state import ModelState, all_finite
from mecsim.learning.training import TrainResult

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("chunk", [1 << 16, 50])  # one piece; pieces, and tensors alone
def test_a_single_non_finite_element_anywhere_is_found(device, bad, dtype, chunk, monkeypatch):
    monkeypatch.setattr(state, "FINITE_CHUNK", chunk)
    tensors = [torch.randn(n, device=device, dtype=dtype) * 1e30 for n in (1, 7, 64, 1000)]
    tensors.insert(1, torch.randn(6, 4, device=device, dtype=dtype).t())  # not contiguous
    tensors.append(torch.arange(5, device=device))  # integers: always finite
    tensors.append(torch.empty(0, device=device, dtype=dtype))
    assert all_finite(tensors)
    for which in range(5):
        for position in (0, tensors[which].numel() - 1):
            spoiled = [t.clone() for t in tensors]
            spoiled[which][np.unravel_index(position, spoiled[which].shape)] = bad
            assert not all_finite(spoiled), (which, position)
            assert all_finite(spoiled[:which] + spoiled[which + 1 :])


def test_huge_finite_weights_are_not_taken_for_infinite():
    assert all_finite([torch.full((10_000,), 3e38), torch.full((3,), -3e38)])
    assert all_finite([])


def test_check_finite_names_the_client_whose_weights_diverged():
    task = Task("local", "model")

    def outcome(value: float) -> TrainResult:
        state = ModelState({"w": torch.full((4,), value), "b": torch.zeros(2)}, {})
        return TrainResult(state, 1, 16)

    jobs = [ClientJob(client=c, round=3, state=None, payload={}, indices={}) for c in (5, 9)]
    check_finite(task, jobs, [outcome(1.0), outcome(2.0)])
    with pytest.raises(ConfigError, match="round 3, client 9, task 'local'"):
        check_finite(task, jobs, [outcome(1.0), outcome(math.nan)])


def test_through_bases_checks_each_stack_once_and_never_misses():
    stacked = torch.randn(6, 4, 3)
    rows = stacked.detach()[:5].unbind()  # as the batched trainer sets clients aside
    again = stacked.detach()[5:].unbind()  # a second alias of the same memory
    assert len(state._distinct_bases([*rows, *again])) == 1
    assert all_finite(rows, through_bases=True)
    stacked[2, 1, 0] = math.nan
    assert not all_finite(rows, through_bases=True) and not all_finite(rows)
    stacked[2, 1, 0] = 0.0
    stacked[5, 0, 0] = math.inf  # outside the rows asked about: only the exact answer is True
    assert not all_finite(rows, through_bases=True) and all_finite(rows)


def test_check_finite_is_exact_where_a_stack_holds_a_non_finite_outside_the_jobs():
    stacked = torch.zeros(3, 4)
    stacked[2, 0] = math.nan  # a row no job returned
    outcomes = [TrainResult(ModelState({"w": row}, {}), 1, 16) for row in stacked[:2].unbind()]
    jobs = [ClientJob(client=c, round=0, state=None, payload={}, indices={}) for c in (0, 1)]
    check_finite(Task("local", "model"), jobs, outcomes)  # no error: both jobs are finite


def test_complex_tensors_are_finite_only_when_both_parts_are():
    z = torch.zeros(4, dtype=torch.complex64)
    assert all_finite([z])
    for bad in (complex(math.nan, 0), complex(0, math.inf)):
        spoiled = z.clone()
        spoiled[2] = bad
        assert not all_finite([spoiled]) and not all_finite([spoiled], through_bases=True)


def test_float64_weights_beyond_float32s_range_are_finite():
    huge = torch.full((5,), 1e300, dtype=torch.float64)
    assert all_finite([huge, torch.ones(3)]) and all_finite([huge], through_bases=True)
    huge[1] = math.inf
    assert not all_finite([huge, torch.ones(3)])

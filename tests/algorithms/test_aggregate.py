import pytest
import torch

from mecsim.algorithms.aggregate import weighted_average
from mecsim.learning.state import payload_nbytes


def test_weighted_average_weights_by_sample_count():
    a = {"w": torch.tensor([0.0, 2.0]), "n": torch.tensor(4)}
    b = {"w": torch.tensor([4.0, 6.0]), "n": torch.tensor(8)}

    avg = weighted_average([a, b], [1, 3])

    torch.testing.assert_close(avg["w"], torch.tensor([3.0, 5.0]))
    assert avg["n"].dtype == torch.int64 and int(avg["n"]) == 7


def test_weighted_average_rejects_bad_input():
    with pytest.raises(ValueError):
        weighted_average([], [])
    with pytest.raises(ValueError):
        weighted_average([{"w": torch.zeros(1)}], [0.0])


def test_payload_nbytes_is_sum_of_numel_times_element_size():
    payload = {
        "a": torch.zeros(3, 4),
        "b": torch.zeros(5, dtype=torch.float64),
        "c": torch.tensor(1),
    }

    assert payload_nbytes(payload) == 12 * 4 + 5 * 8 + 8
    assert payload_nbytes(None) == 0


def test_partial_payloads_average_each_key_over_the_clients_that_sent_it():
    from mecsim.algorithms.aggregate import weighted_average

    a = {"body": torch.tensor([1.0]), "head": torch.tensor([10.0])}
    b = {"body": torch.tensor([3.0])}  # sent no head
    averaged = weighted_average([a, b], [1.0, 3.0])

    torch.testing.assert_close(averaged["body"], torch.tensor([2.5]))
    torch.testing.assert_close(averaged["head"], torch.tensor([10.0]))


def test_merge_replaces_only_the_entries_a_partial_payload_holds():
    from mecsim.learning.state import ModelState

    state = ModelState({"w": torch.zeros(2), "h": torch.zeros(1)}, {"bn": torch.ones(1)})
    merged = state.merge({"w": torch.ones(2), "extra": torch.ones(3)})

    assert torch.equal(merged.params["w"], torch.ones(2))
    assert torch.equal(merged.params["h"], torch.zeros(1))
    assert torch.equal(merged.buffers["bn"], torch.ones(1))


def test_flat_sums_are_each_keys_own_running_sum_bit_for_bit():
    """The alike tensors of a payload are summed as one flat vector: each element sees the
    same float64 operations, in payload order, as summing one key at a time."""
    g = torch.Generator().manual_seed(0)
    shapes = {"conv": (16, 3, 3, 3), "bias": (16,), "fc": (10, 64), "head": (10,)}
    payloads, weights = [], []
    for i in range(40):
        p = {k: torch.randn(s, generator=g) for k, s in shapes.items() if k != "head" or i % 3}
        p["steps"] = torch.tensor(i)  # an integer buffer
        payloads.append(p)
        weights.append(float(torch.rand(1, generator=g)) * 10)

    averaged = weighted_average(payloads, weights)

    for key in [*shapes, "steps"]:
        holders = [(p[key], w) for p, w in zip(payloads, weights, strict=True) if key in p]
        total = float(sum(w for _, w in holders))
        mean = torch.zeros(holders[0][0].shape, dtype=torch.float64)
        for tensor, weight in holders:
            mean.add_(tensor.to(torch.float64), alpha=weight / total)
        dtype = holders[0][0].dtype
        expected = mean.to(dtype) if dtype.is_floating_point else mean.floor().to(dtype)
        assert torch.equal(averaged[key], expected), key
    assert list(averaged) == list(dict.fromkeys(k for p in payloads for k in p))  # first seen


def test_payloads_that_disagree_on_a_shape_are_refused_even_at_equal_sizes():
    a = {"w": torch.zeros(2, 3), "b": torch.zeros(4)}
    b = {"w": torch.zeros(3, 2), "b": torch.zeros(4)}
    with pytest.raises(ValueError, match="shape of 'w'"):
        weighted_average([a, b], [1.0, 1.0])

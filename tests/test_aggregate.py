import pytest
import torch
from mecsim.algorithms.aggregate import weighted_average

from mecsim.state import payload_nbytes


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

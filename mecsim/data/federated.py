"""Per-client data: index tensors into a ``Dataset`` (train, validation, local test).

Random streams (all from the scenario seed): ``("partition",)`` for the
partition, ``("quantity",)`` for quantity-skew weights and
``("local-split", client)`` for a client's validation and local test draws, so
one client's splits do not depend on another's.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from mecsim.data.datasets import Dataset
from mecsim.data.partition import PARTITIONS, lognormal_weights, proportional_counts
from mecsim.errors import ConfigError
from mecsim.rng import numpy_rng


@dataclasses.dataclass(frozen=True, eq=False)
class ClientData:
    """One client's int64 CPU index tensors.

    Attributes:
        train: indices into ``Dataset.x_train`` used for local training.
        val: indices into ``Dataset.x_train``, disjoint from ``train`` (may be empty).
        test: indices into ``Dataset.x_test``: the client's local test set.
    """

    train: torch.Tensor
    val: torch.Tensor
    test: torch.Tensor

    @property
    def num_train(self) -> int:
        """Number of training samples (the client's weight n_i in FedAvg)."""
        return len(self.train)


def build_client_data(
    dataset: Dataset,
    *,
    partition: str,
    num_clients: int,
    seed: int,
    alpha: float = 0.5,
    classes_per_client: int = 2,
    quantity_skew: str = "none",
    lognormal_sigma: float = 2.0,
    min_samples: int = 2,
    val_fraction: float = 0.0,
    local_test_fraction: float = 0.25,
) -> list[ClientData]:
    """Partition ``dataset`` across clients and give each a validation and local test split.

    Args:
        dataset: the loaded dataset.
        partition: a ``PARTITIONS`` name (``data.partition``).
        num_clients: number of clients N.
        seed: scenario seed.
        alpha: Dirichlet concentration (``dirichlet``).
        classes_per_client: classes per client k (``classes``).
        quantity_skew: ``"none"`` or ``"lognormal"`` (client sizes ~ lognormal(0, sigma)).
        lognormal_sigma: sigma of the lognormal quantity skew.
        min_samples: least training samples per client before the validation split.
        val_fraction: share of each client's partition moved to its validation split.
        local_test_fraction: local test size as a share of the client's training size.

    The local test set follows Chen et al. 2023 (App. B): its label distribution
    is the client's training distribution. It has ``round(local_test_fraction *
    n_train)`` samples (at least 1), apportioned to classes by the training label
    counts and drawn from the global test set of each class without replacement
    (topped up with replacement only where a class's test pool is too small;
    classes absent from the test set are skipped). Different clients' local test
    sets may overlap. With the ``natural`` partition of a dataset that has a
    ``natural_test_partition`` (``synthetic``), each client's own test samples are used.
    """
    if quantity_skew == "none":
        weights = None
    elif quantity_skew == "lognormal":
        weights = lognormal_weights(num_clients, numpy_rng(seed, "quantity"), sigma=lognormal_sigma)
    else:
        raise ConfigError(
            "data.quantity_skew", f"must be 'none' or 'lognormal', got {quantity_skew!r}"
        )
    if not 0.0 <= val_fraction < 1.0:
        raise ConfigError("data.val_fraction", f"must lie in [0, 1), got {val_fraction}")
    if local_test_fraction <= 0:
        raise ConfigError(
            "data.local_test_fraction", f"must be positive, got {local_test_fraction}"
        )

    split = PARTITIONS.get(partition)
    parts = split(
        dataset.y_train.cpu().numpy(),
        num_clients,
        numpy_rng(seed, "partition"),
        weights=weights,
        alpha=alpha,
        classes_per_client=classes_per_client,
        min_samples=min_samples,
        natural_partition=dataset.natural_partition,
    )
    natural_test = dataset.natural_test_partition if partition == "natural" else None
    y_train = dataset.y_train.cpu().numpy()
    y_test = dataset.y_test.cpu().numpy()
    test_pool = {c: np.flatnonzero(y_test == c) for c in np.unique(y_test)}

    clients = []
    for client, indices in enumerate(parts):
        rng = numpy_rng(seed, "local-split", client)
        shuffled = rng.permutation(indices)
        n_val = min(int(round(val_fraction * len(shuffled))), len(shuffled) - 1)
        val, train = np.sort(shuffled[:n_val]), np.sort(shuffled[n_val:])
        if natural_test is not None:
            test = np.asarray(natural_test[client])
        else:
            size = max(1, int(round(local_test_fraction * len(train))))
            test = _matching_test(y_train[train], test_pool, size, rng)
        clients.append(
            ClientData(*(torch.as_tensor(a, dtype=torch.int64) for a in (train, val, test)))
        )
    return clients


def _matching_test(
    train_labels: np.ndarray,
    test_pool: dict[int, np.ndarray],
    size: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """``size`` test indices whose label counts are proportional to ``train_labels``'."""
    labels, counts = np.unique(train_labels, return_counts=True)
    kept = [i for i, c in enumerate(labels) if c in test_pool]
    if not kept:
        return np.zeros(0, dtype=np.int64)
    quotas = proportional_counts(size, counts[kept])
    drawn = []
    for label, quota in zip(labels[kept], quotas, strict=True):
        pool = test_pool[label]
        if quota <= len(pool):
            drawn.append(rng.choice(pool, quota, replace=False))
        else:
            drawn.append(np.concatenate([pool, rng.choice(pool, quota - len(pool))]))
    return np.sort(np.concatenate(drawn))


def hold_out_public(
    dataset: Dataset, size: int, seed: int
) -> tuple[Dataset, torch.Tensor, torch.Tensor]:
    """Move ``size`` training samples (stream ``("public",)``) out of ``dataset`` as the public split.

    Returns the dataset without them, and the public inputs and labels. With
    ``size = 0`` the dataset is returned unchanged (and the public split is empty).
    """
    empty_x = dataset.x_train[:0]
    if size == 0:
        return dataset, empty_x, dataset.y_train[:0]
    n = len(dataset.y_train)
    if size >= n:
        raise ConfigError(
            "data.public_size", f"{size} leaves no training data ({n} samples); use fewer"
        )
    if dataset.natural_partition is not None:
        raise ConfigError(
            "data.public_size", f"{dataset.name} is naturally partitioned; use public_size = 0"
        )
    chosen = np.sort(numpy_rng(seed, "public").choice(n, size, replace=False))
    keep = np.setdiff1d(np.arange(n), chosen)
    public = torch.as_tensor(chosen)
    rest = torch.as_tensor(keep)
    trimmed = dataclasses.replace(
        dataset, x_train=dataset.x_train[rest], y_train=dataset.y_train[rest]
    )
    return trimmed, dataset.x_train[public], dataset.y_train[public]

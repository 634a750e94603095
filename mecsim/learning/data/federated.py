"""Per-client data: index tensors into a ``Dataset`` (train, validation, local test).

Random streams (all from the scenario seed): ``("partition",)`` for the
partition, ``("quantity",)`` for quantity-skew weights,
``("local-split", client)`` for a client's validation split (one client's
does not depend on another's) and ``("local-test",)`` for the local test sets,
which are drawn together because they must not overlap.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from mecsim.common.errors import ConfigError
from mecsim.common.rng import numpy_rng
from mecsim.learning.data.datasets import Dataset
from mecsim.learning.data.partition import PARTITIONS, Parts, lognormal_weights, proportional_counts


@dataclasses.dataclass(frozen=True, eq=False)
class ClientData:
    """One client's int64 CPU index tensors.

    Attributes:
        train: indices into ``Dataset.x_train`` used for local training.
        val: indices into ``Dataset.x_train``, disjoint from ``train`` (may be empty).
        test: indices into ``Dataset.x_test``: the client's local test set (with
            ``local_split = "own_data"``, into ``Dataset.x_train``: see
            :attr:`ClientSplits.tests_from_train`).
    """

    train: torch.Tensor
    val: torch.Tensor
    test: torch.Tensor

    @property
    def num_train(self) -> int:
        """Number of training samples (the client's weight n_i in FedAvg)."""
        return len(self.train)


class ClientSplits(list):
    """Every client's :class:`ClientData`, and how many partition draws were rejected."""

    redraws: int = 0
    tests_from_train: bool = False
    """The local tests index the training pool (``local_split = "own_data"``)."""


def build_client_data(
    dataset: Dataset,
    *,
    partition: str,
    num_clients: int,
    seed: int,
    alpha: float = 0.5,
    min_classes: int = 1,
    classes_per_client: int = 2,
    quantity_skew: str = "none",
    lognormal_sigma: float = 2.0,
    min_samples: int = 2,
    val_fraction: float = 0.0,
    local_test_fraction: float = 0.25,
    local_split: str = "test_pool",
    train_share_choices: tuple[float, ...] = (0.1, 0.3, 0.4),
    own_test_share: float = 0.5,
) -> ClientSplits:
    """Partition ``dataset`` across clients and give each a validation and local test split.

    Args:
        dataset: the loaded dataset.
        partition: a ``PARTITIONS`` name (``data.partition``).
        num_clients: number of clients N.
        seed: scenario seed.
        alpha: Dirichlet concentration (``dirichlet``).
        min_classes: Dirichlet draws a client's class mix averages (``dirichlet_clients``).
        classes_per_client: classes per client k (``classes``).
        quantity_skew: ``"none"`` or ``"lognormal"`` (client sizes ~ lognormal(0, sigma)).
        lognormal_sigma: sigma of the lognormal quantity skew.
        min_samples: least training samples per client before the validation split.
        val_fraction: share of each client's partition moved to its validation split.
        local_test_fraction: local test size as a share of the client's training size.
        local_split: ``"test_pool"`` (below) or ``"own_data"``: each client's partition,
            shuffled, gives its training share (drawn from ``train_share_choices``), then
            ``val_fraction`` for validation and ``own_test_share`` as its local test set
            (indices into the training pool), the rest unused (COMET, App. B).

    The local test set follows Chen et al. 2023 (App. B): its label distribution
    is the client's training distribution, and it is drawn without replacement
    from the global test set, with no sample in two clients' sets. A client asks
    for ``round(local_test_fraction * n_train)`` samples (at least 1),
    apportioned to classes by its training label counts; where the clients ask
    for more of a class than the test set holds, every request for that class
    shrinks in proportion (classes absent from the test set are skipped), so a
    client's local test set may be smaller than asked, or empty (it is then left
    out of the personalized accuracy). With the ``natural`` partition of a
    dataset that has a ``natural_test_partition`` (``synthetic``), each client's
    own test samples are used.
    """
    weights = _quantity_weights(quantity_skew, num_clients, seed, lognormal_sigma)
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
        min_classes=min_classes,
        classes_per_client=classes_per_client,
        min_samples=min_samples,
        natural_partition=dataset.natural_partition,
    )
    if local_split == "own_data":
        return _own_data_splits(parts, seed, val_fraction, train_share_choices, own_test_share)
    natural_test = dataset.natural_test_partition if partition == "natural" else None
    y_train = dataset.y_train.cpu().numpy()

    trains, vals = _validation_splits(parts, seed, val_fraction)
    if natural_test is not None:
        tests = [np.asarray(natural_test[c]) for c in range(num_clients)]
    else:
        tests = draw_local_tests(
            [y_train[t] for t in trains],
            dataset.y_test.cpu().numpy(),
            local_test_fraction,
            numpy_rng(seed, "local-test"),
        )
    clients = ClientSplits(
        ClientData(*(torch.as_tensor(a, dtype=torch.int64) for a in split))
        for split in zip(trains, vals, tests, strict=True)
    )
    clients.redraws = parts.redraws
    return clients


def _quantity_weights(
    quantity_skew: str, num_clients: int, seed: int, sigma: float
) -> np.ndarray | None:
    """Relative client sizes: None (no skew) or lognormal(0, ``sigma``) draws."""
    if quantity_skew == "none":
        return None
    if quantity_skew == "lognormal":
        return lognormal_weights(num_clients, numpy_rng(seed, "quantity"), sigma=sigma)
    raise ConfigError("data.quantity_skew", f"must be 'none' or 'lognormal', got {quantity_skew!r}")


def _validation_splits(
    parts: Parts, seed: int, val_fraction: float
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Each client's partition, shuffled by its own stream, cut into (train, validation)
    index sets; a client keeps at least one training sample."""
    trains, vals = [], []
    for client, indices in enumerate(parts):
        rng = numpy_rng(seed, "local-split", client)
        shuffled = rng.permutation(indices)
        n_val = min(int(round(val_fraction * len(shuffled))), len(shuffled) - 1)
        vals.append(np.sort(shuffled[:n_val]))
        trains.append(np.sort(shuffled[n_val:]))
    return trains, vals


def _own_data_splits(
    parts: Parts,
    seed: int,
    val_fraction: float,
    train_share_choices: tuple[float, ...],
    own_test_share: float,
) -> ClientSplits:
    """COMET's per-client split: train / val / test shares of each client's own partition."""
    splits = []
    for client, indices in enumerate(parts):
        rng = numpy_rng(seed, "local-split", client)
        shuffled = rng.permutation(indices)
        n = len(shuffled)
        share = float(rng.choice(np.asarray(train_share_choices, dtype=float)))
        n_train = max(1, int(round(share * n)))
        n_val = min(int(round(val_fraction * n)), n - n_train)
        n_test = min(int(round(own_test_share * n)), n - n_train - n_val)
        cuts = np.cumsum([n_train, n_val, n_test])
        train, val, test = np.split(shuffled, cuts)[:3]
        splits.append(
            ClientData(
                *(torch.as_tensor(np.sort(a), dtype=torch.int64) for a in (train, val, test))
            )
        )
    clients = ClientSplits(splits)
    clients.redraws = parts.redraws
    clients.tests_from_train = True
    return clients


def draw_local_tests(
    train_labels: list[np.ndarray],
    y_test: np.ndarray,
    fraction: float,
    rng: np.random.Generator,
) -> list[np.ndarray]:
    """Disjoint local test sets whose label counts follow each client's training labels.

    Client i asks for ``max(1, round(fraction * len(train_labels[i])))``
    samples, apportioned to its classes (largest remainder); each class's test
    pool is shuffled once and cut into consecutive pieces, one per client, with
    requests scaled down to the pool where they exceed it.
    """
    classes = np.unique(y_test)
    asked = np.zeros((len(train_labels), len(classes)), dtype=np.int64)
    for i, labels in enumerate(train_labels):
        held = np.isin(classes, labels)
        if not held.any():
            continue
        counts = np.array([(labels == c).sum() for c in classes[held]])
        size = max(1, int(round(fraction * len(labels))))
        asked[i, held] = proportional_counts(size, counts)
    drawn: list[list[np.ndarray]] = [[] for _ in train_labels]
    for j, label in enumerate(classes):
        pool = rng.permutation(np.flatnonzero(y_test == label))
        wanted = asked[:, j]
        if wanted.sum() > len(pool):
            wanted = proportional_counts(len(pool), wanted)
        for i, piece in enumerate(np.split(pool[: wanted.sum()], np.cumsum(wanted)[:-1])):
            drawn[i].append(piece)
    return [np.sort(np.concatenate(d)).astype(np.int64) for d in drawn]


def hold_out_public(
    dataset: Dataset, size: int, seed: int, source: Dataset | None = None
) -> tuple[Dataset, torch.Tensor, torch.Tensor]:
    """The public split: ``size`` training samples (stream ``("public",)``) of ``source``.

    Without ``source`` they are moved out of ``dataset`` (returned without
    them); with one (``data.public_dataset``), ``dataset`` is returned whole.
    Returns the private dataset, and the public inputs and labels. With
    ``size = 0`` the public split is empty.
    """
    origin = dataset if source is None else source
    if size == 0:
        return dataset, origin.x_train[:0], origin.y_train[:0]
    n = len(origin.y_train)
    if source is not None and size > n:
        raise ConfigError(
            "data.public_size", f"{size} exceeds {source.name}'s {n} training samples; use fewer"
        )
    if source is None and size >= n:
        raise ConfigError(
            "data.public_size", f"{size} leaves no training data ({n} samples); use fewer"
        )
    if source is None and dataset.natural_partition is not None:
        raise ConfigError(
            "data.public_size", f"{dataset.name} is naturally partitioned; use public_size = 0"
        )
    chosen = np.sort(numpy_rng(seed, "public").choice(n, size, replace=False))
    public = torch.as_tensor(chosen)
    if source is not None:
        return dataset, source.x_train[public], source.y_train[public]
    rest = torch.as_tensor(np.setdiff1d(np.arange(n), chosen))
    trimmed = dataclasses.replace(
        dataset, x_train=dataset.x_train[rest], y_train=dataset.y_train[rest]
    )
    return trimmed, dataset.x_train[public], dataset.y_train[public]

"""Partitions of a training set across clients, registered by name (``data.partition``).

A partition function has the signature::

    fn(labels, num_clients, rng, *, weights=None, **options) -> Parts

``labels`` are the training labels, ``rng`` is the ``"partition"`` stream and
``weights`` (optional, summing to 1) skew client sizes (quantity skew, see
``lognormal_weights``). It returns each client's sorted int64 indices into the
training set as :class:`Parts` (a list that also says how often a random draw
was repeated); clients never share a sample. Options a partition does not use
are ignored (``alpha``, ``min_classes``, ``classes_per_client``, ``min_samples``,
``natural_partition``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mecsim.common.errors import ConfigError
from mecsim.common.registry import Registry


class Parts(list):
    """Each client's training indices, and how many rejected draws preceded them."""

    redraws: int = 0


Partition = Callable[..., Parts]

PARTITIONS: Registry[Partition] = Registry("partition", "data.partition")

MAX_DIRICHLET_TRIES = 100


def lognormal_weights(
    num_clients: int, rng: np.random.Generator, mu: float = 0.0, sigma: float = 2.0
) -> np.ndarray:
    """Client size weights ``~ lognormal(mu, sigma)``, normalized to sum to 1.

    PersFL's DS-3 (Hossain et al.) draws sample counts with ``mu = 0, sigma = 2``.
    """
    weights = rng.lognormal(mu, sigma, num_clients)
    return weights / weights.sum()


def proportional_counts(total: int, weights: np.ndarray) -> np.ndarray:
    """Integer counts summing to ``total``, proportional to ``weights`` (largest remainder).

    Ties go to the lower index, so the result is deterministic.
    """
    share = total * np.asarray(weights, dtype=np.float64) / np.sum(weights)
    counts = np.floor(share).astype(np.int64)
    order = np.argsort(-(share - counts), kind="stable")
    counts[order[: total - counts.sum()]] += 1
    return counts


def split_counts(
    total: int, num_clients: int, weights: np.ndarray | None, min_samples: int
) -> np.ndarray:
    """Counts for ``num_clients`` summing to ``total``: equal (within one) without weights;
    with weights, ``min_samples`` each and the rest proportional to ``weights``."""
    if total < num_clients * min_samples:
        raise ConfigError(
            "clients.count",
            f"{total} samples cannot give {num_clients} clients {min_samples} each; "
            "use fewer clients or a smaller data.min_samples",
        )
    if weights is None:
        return proportional_counts(total, np.ones(num_clients))
    return min_samples + proportional_counts(total - num_clients * min_samples, weights)


def _split(indices: np.ndarray, counts: np.ndarray) -> list[np.ndarray]:
    return np.split(indices, np.cumsum(counts)[:-1])


def _collect(chunks: list[list[np.ndarray]]) -> Parts:
    return Parts(
        np.sort(np.concatenate(c)).astype(np.int64) if c else np.zeros(0, np.int64) for c in chunks
    )


@PARTITIONS.register("iid", "shuffled, split equally (or by quantity-skew weights)")
def iid(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    *,
    weights: np.ndarray | None = None,
    min_samples: int = 2,
    **_options: object,
) -> Parts:
    """Shuffle all samples and split them equally, or proportionally to ``weights``."""
    counts = split_counts(len(labels), num_clients, weights, min_samples)
    return _collect([[part] for part in _split(rng.permutation(len(labels)), counts)])


@PARTITIONS.register("dirichlet", "label skew: each class split by Dir(alpha) over clients")
def dirichlet(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    *,
    weights: np.ndarray | None = None,
    alpha: float = 0.5,
    min_samples: int = 2,
    **_options: object,
) -> Parts:
    """Symmetric Dirichlet label skew (spectral co-distillation, Chen et al. 2023, App. B).

    For each class j draw ``d_j ~ Dir(alpha * 1_N)`` and give client i the share
    ``d_j[i]`` of class j's shuffled samples; every sample goes to exactly one
    client. Small ``alpha``: few classes per client; ``alpha -> inf``: uniform.
    With ``weights``, client i's share of every class is scaled by ``weights[i]``.
    The draw is repeated (same stream, up to 100 times) until every client has at
    least ``min_samples`` samples; ``Parts.redraws`` counts the rejected draws.
    """
    split_counts(len(labels), num_clients, None, min_samples)  # enough samples at all?
    by_class = [np.flatnonzero(labels == c) for c in np.unique(labels)]
    for attempt in range(MAX_DIRICHLET_TRIES):
        chunks: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for idx in by_class:
            share = rng.dirichlet(np.full(num_clients, alpha))
            if weights is not None:
                share = share * weights
            counts = proportional_counts(len(idx), share)
            for client, part in enumerate(_split(rng.permutation(idx), counts)):
                chunks[client].append(part)
        parts = _collect(chunks)
        if min(len(p) for p in parts) >= min_samples:
            parts.redraws = attempt
            return parts
    raise ConfigError(
        "data.alpha",
        f"{MAX_DIRICHLET_TRIES} Dirichlet draws with alpha = {alpha} all left a client with "
        f"fewer than {min_samples} samples; use a larger alpha, fewer clients or a smaller "
        "data.min_samples",
    )


def class_mix(rng: np.random.Generator, concentration: np.ndarray, draws: int) -> np.ndarray:
    """One client's class mix: the mean of ``draws`` Dirichlet draws, each over the
    classes that no earlier draw led (its largest share), so ``draws`` classes lead one
    draw each and hold at least ``1 / (draws * classes)`` of the mix."""
    concentration = np.maximum(concentration, 1e-300)
    if draws == 1:
        return rng.dirichlet(concentration)
    mix = np.zeros(len(concentration))
    open_classes = np.ones(len(concentration), dtype=bool)
    for _ in range(draws):
        draw = np.zeros(len(concentration))
        draw[open_classes] = rng.dirichlet(concentration[open_classes])
        mix += draw / draws
        open_classes[np.argmax(draw)] = False
    return mix


@PARTITIONS.register(
    "dirichlet_clients", "label skew: each client's class mix ~ Dir(alpha p) (Hsu et al.)"
)
def dirichlet_clients(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    *,
    weights: np.ndarray | None = None,
    alpha: float = 0.5,
    min_classes: int = 1,
    min_samples: int = 2,
    **_options: object,
) -> Parts:
    """Client-wise Dirichlet label skew (Hsu, Qi and Brown 2019; COMET's Dir_K(alpha), App. B).

    Client sizes are fixed first: equal (within one), or ``min_samples`` each and
    the rest proportional to ``weights`` (``data.quantity_skew``: the size imbalance
    of COMET's Fig. 3(b)). Client k then draws its class mix ``q_k ~ Dir(alpha p)``,
    ``p`` the pool's class shares, and takes its samples class by class from what
    the clients before it left, without replacement: ``multinomial(n_k, q_k)`` over
    the classes still available (renormalized), repeated for the samples a class
    could not supply. Every client holds exactly its size at any alpha, so 100
    clients at alpha = 0.01 all have data (where ``dirichlet``, which splits each
    class over the clients, leaves most of them empty); clients late in the order
    find some classes exhausted, so their mix follows q_k as far as the pool allows.

    With ``min_classes = m > 1`` (``data.min_classes``), q_k is the mean of m draws,
    each a Dir(alpha p) over the classes no earlier draw led (see :func:`class_mix`):
    at alpha = 0.01 a client holds about 1/m of each of m classes, where one draw
    makes it nearly single-class.
    """
    sizes = split_counts(len(labels), num_clients, weights, min_samples)
    present = np.unique(labels)
    if not 1 <= min_classes <= len(present):
        raise ConfigError(
            "data.min_classes",
            f"must lie in [1, {len(present)}] (the classes), got {min_classes}",
        )
    pools = [list(rng.permutation(np.flatnonzero(labels == c))) for c in present]
    prior = np.array([len(p) for p in pools], dtype=np.float64) / len(labels)
    chunks: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for client, size in enumerate(sizes):
        mix = class_mix(rng, alpha * prior, min_classes)
        needed = int(size)
        while needed > 0:
            left = np.array([len(p) for p in pools], dtype=np.float64)
            share = np.where(left > 0, mix, 0.0)
            share = share / share.sum() if share.sum() > 0 else left / left.sum()
            counts = np.minimum(rng.multinomial(needed, share), left.astype(np.int64))
            for c, n in enumerate(counts):
                if n:
                    chunks[client].append(np.array(pools[c][:n], dtype=np.int64))
                    del pools[c][:n]
            needed -= int(counts.sum())
    return _collect(chunks)


@PARTITIONS.register("classes", "k classes per client (PersFL DS-1; DS-3 with quantity skew)")
def classes(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    *,
    weights: np.ndarray | None = None,
    classes_per_client: int = 2,
    min_samples: int = 2,
    **_options: object,
) -> Parts:
    """Each client holds ``k`` distinct classes (PersFL, Hossain et al., DS-1 / DS-3).

    Client i holds classes ``(offset + i*k + j) mod C`` for ``j < k`` with a random
    ``offset``, so every class has ``floor`` or ``ceil`` of ``N*k/C`` holders. Each
    class's shuffled samples are split equally among its holders (DS-1: equal client
    totals when classes are balanced and ``C`` divides ``N*k``) or proportionally to
    ``weights`` (DS-3), each holder getting at least ``ceil(min_samples / k)`` of it.
    Classes nobody holds (only when ``N*k < C``) are left out.
    """
    present = np.unique(labels)
    k = classes_per_client
    if not 1 <= k <= len(present):
        raise ConfigError(
            "data.classes_per_client", f"must lie in [1, {len(present)}] (the classes), got {k}"
        )
    offset = int(rng.integers(len(present)))
    held = [
        set(((offset + i * k + np.arange(k)) % len(present)).tolist()) for i in range(num_clients)
    ]
    chunks: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
    for position, label in enumerate(present):
        holders = [i for i in range(num_clients) if position in held[i]]
        if not holders:
            continue
        idx = rng.permutation(np.flatnonzero(labels == label))
        w = None if weights is None else weights[holders]
        counts = split_counts(len(idx), len(holders), w, -(-min_samples // k))
        for client, part in zip(holders, _split(idx, counts), strict=True):
            chunks[client].append(part)
    return _collect(chunks)


@PARTITIONS.register("natural", "the dataset's own per-client split (e.g. synthetic)")
def natural(
    labels: np.ndarray,
    num_clients: int,
    rng: np.random.Generator,
    *,
    natural_partition: list[np.ndarray] | None = None,
    **_options: object,
) -> Parts:
    """The dataset's natural partition (``Dataset.natural_partition``); weights are ignored."""
    if natural_partition is None:
        raise ConfigError(
            "data.partition",
            "this dataset has no natural partition; use iid, dirichlet or classes",
        )
    if len(natural_partition) != num_clients:
        raise ConfigError(
            "clients.count",
            f"the natural partition has {len(natural_partition)} clients, not {num_clients}",
        )
    return Parts(np.sort(np.asarray(p, dtype=np.int64)) for p in natural_partition)

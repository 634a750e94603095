import numpy as np
import pytest

from mecsim.common.errors import ConfigError, UnknownNameError
from mecsim.common.rng import numpy_rng
from mecsim.learning.data import PARTITIONS
from mecsim.learning.data.partition import lognormal_weights, proportional_counts

LABELS = np.repeat(np.arange(10), 100)  # balanced: 100 samples per class
SKEWED_LABELS = np.random.default_rng(0).integers(0, 10, 2000)


def _entropy(labels):
    p = np.bincount(labels, minlength=10) / len(labels)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


@pytest.mark.parametrize("name", ["iid", "dirichlet", "dirichlet_clients", "classes"])
@pytest.mark.parametrize("skew", [False, True])
def test_partitions_are_disjoint_and_cover(name, skew):
    # Prepare
    weights = lognormal_weights(8, numpy_rng(1, "quantity")) if skew else None

    # Execute
    parts = PARTITIONS.get(name)(
        SKEWED_LABELS,
        8,
        numpy_rng(1, "partition"),
        weights=weights,
        alpha=0.3,
        classes_per_client=3,
    )

    # Assert
    assert len(parts) == 8
    everything = np.concatenate(parts)
    np.testing.assert_array_equal(np.sort(everything), np.arange(len(SKEWED_LABELS)))
    assert all(p.dtype == np.int64 and len(p) >= 2 for p in parts)


def test_iid_splits_equally():
    # Execute
    parts = PARTITIONS.get("iid")(LABELS, 7, numpy_rng(0, "partition"), weights=None)

    # Assert
    assert sorted(len(p) for p in parts) == [142] + [143] * 6


def test_lognormal_weights_give_unequal_sizes_with_a_floor():
    # Prepare
    weights = lognormal_weights(20, numpy_rng(3, "quantity"), sigma=2.0)

    # Execute
    parts = PARTITIONS.get("iid")(
        LABELS, 20, numpy_rng(3, "partition"), weights=weights, min_samples=5
    )

    # Assert
    sizes = np.array([len(p) for p in parts])
    assert weights.sum() == pytest.approx(1.0)
    assert sizes.min() >= 5 and sizes.max() > 5 * sizes.min()
    assert np.argmax(sizes) == np.argmax(weights)


def test_proportional_counts_sum_exactly():
    # Execute
    counts = proportional_counts(10, np.array([1.0, 1.0, 1.0]))

    # Assert
    assert counts.tolist() == [4, 3, 3]


def test_dirichlet_small_alpha_is_more_skewed():
    # Execute
    entropies = {}
    for alpha in (0.1, 100.0):
        parts = PARTITIONS.get("dirichlet")(LABELS, 10, numpy_rng(0, "partition"), alpha=alpha)
        entropies[alpha] = np.mean([_entropy(LABELS[p]) for p in parts])

    # Assert: near-uniform labels (entropy ~ log 10) for large alpha
    assert entropies[0.1] < entropies[100.0] - 0.8
    assert entropies[100.0] > np.log(10) - 0.05


def test_dirichlet_counts_the_draws_it_rejected():
    def draw(min_samples):
        return PARTITIONS.get("dirichlet")(
            LABELS, 20, numpy_rng(0, "partition"), alpha=0.1, min_samples=min_samples
        )

    first, strict = draw(2), draw(10)

    assert first.redraws == 0  # the first draw already gives every client 2 samples
    assert min(len(p) for p in first) < 10  # but not 10: the strict draw had to repeat
    assert strict.redraws > 0 and min(len(p) for p in strict) >= 10


def test_dirichlet_raises_when_clients_cannot_be_filled():
    with pytest.raises(ConfigError, match="larger alpha") as error:
        PARTITIONS.get("dirichlet")(LABELS, 400, numpy_rng(0, "partition"), alpha=0.01)
    assert error.value.field == "data.alpha"


@pytest.mark.parametrize("k", [1, 2, 4])
def test_classes_gives_k_labels_per_client_and_equal_totals(k):
    # Execute
    parts = PARTITIONS.get("classes")(LABELS, 10, numpy_rng(0, "partition"), classes_per_client=k)

    # Assert
    assert all(len(np.unique(LABELS[p])) == k for p in parts)
    assert all(len(p) == 100 for p in parts)
    holders = np.bincount(np.concatenate([np.unique(LABELS[p]) for p in parts]), minlength=10)
    assert np.all(holders == k)


def test_classes_with_weights_is_ds3():
    # Prepare
    weights = lognormal_weights(10, numpy_rng(0, "quantity"))

    # Execute
    parts = PARTITIONS.get("classes")(
        LABELS, 10, numpy_rng(0, "partition"), weights=weights, classes_per_client=2
    )

    # Assert
    sizes = [len(p) for p in parts]
    assert all(len(np.unique(LABELS[p])) == 2 for p in parts)
    assert max(sizes) > 3 * min(sizes) and min(sizes) >= 2


def test_classes_rejects_too_many_classes():
    with pytest.raises(ConfigError, match="data.classes_per_client"):
        PARTITIONS.get("classes")(LABELS, 10, numpy_rng(0, "partition"), classes_per_client=11)


def test_natural_uses_the_dataset_partition():
    # Prepare
    natural = [np.array([3, 1]), np.array([0, 2])]

    # Execute
    parts = PARTITIONS.get("natural")(LABELS[:4], 2, numpy_rng(0), natural_partition=natural)

    # Assert
    assert [p.tolist() for p in parts] == [[1, 3], [0, 2]]
    with pytest.raises(ConfigError, match="natural partition") as error:
        PARTITIONS.get("natural")(LABELS, 2, numpy_rng(0), natural_partition=None)
    assert error.value.field == "data.partition"


@pytest.mark.parametrize("name", ["iid", "dirichlet", "classes"])
def test_same_seed_same_partition(name):
    # Execute
    a, b, c = (PARTITIONS.get(name)(LABELS, 10, numpy_rng(s, "partition")) for s in (1, 1, 2))

    # Assert
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not all(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


def test_unknown_partition_names_the_field():
    with pytest.raises(UnknownNameError, match="data.partition"):
        PARTITIONS.get("pathological")


# --- client-wise Dirichlet (Hsu et al. 2019; COMET's Dir_K(alpha)) ------------------------


def test_client_wise_dirichlet_gives_every_one_of_100_clients_data_at_alpha_001():
    """COMET's setting (K = 100, alpha = 0.01): the class-wise split leaves most clients
    without data and is refused; the client-wise one gives each its size."""
    from mecsim.learning.data.partition import dirichlet, dirichlet_clients

    labels = np.repeat(np.arange(10), 500)
    with pytest.raises(ConfigError, match="data.alpha"):
        dirichlet(labels, 100, np.random.default_rng(0), alpha=0.01)
    parts = dirichlet_clients(labels, 100, np.random.default_rng(0), alpha=0.01)
    assert [len(p) for p in parts] == [50] * 100
    together = np.concatenate(parts)
    assert len(np.unique(together)) == len(together) == len(labels)  # no sample shared
    held = [len(np.unique(labels[p])) for p in parts]
    assert np.mean([h == 1 for h in held]) > 0.8  # alpha = 0.01: nearly one class each


def test_client_wise_dirichlet_follows_sizes_and_mixes_at_large_alpha():
    from mecsim.learning.data.partition import dirichlet_clients, lognormal_weights

    labels = np.repeat(np.arange(10), 300)
    rng = np.random.default_rng(1)
    weights = lognormal_weights(20, rng, sigma=1.0)
    parts = dirichlet_clients(labels, 20, rng, alpha=1000.0, weights=weights, min_samples=5)
    sizes = np.array([len(p) for p in parts])
    assert sizes.sum() == len(labels) and sizes.min() >= 5
    assert np.corrcoef(sizes, weights)[0, 1] > 0.99
    first = np.bincount(labels[parts[0]], minlength=10) / sizes[0]  # drawn from the full pool
    assert np.abs(first - 0.1).max() < 0.1 and (first > 0).all()  # sampling: 5 sigma


def test_class_mix_of_m_draws_gives_m_led_classes_a_share_each():
    """At alpha = 0.01 one Dirichlet draw is nearly one class; m draws, each over the classes
    no earlier draw led, give m classes about 1/m each, and at least 1/(m C) each."""
    from mecsim.learning.data.partition import class_mix

    concentration = np.full(10, 0.001)
    for m in (1, 2, 3, 5):
        mix = class_mix(np.random.default_rng(m), concentration, m)
        assert mix.sum() == pytest.approx(1.0)
        led = np.sort(mix)[::-1][:m]
        assert led.min() >= 1 / (m * 10) and led.sum() > 0.99
    single = class_mix(np.random.default_rng(4), concentration, 1)  # m = 1: Hsu et al.'s draw
    np.testing.assert_array_equal(single, np.random.default_rng(4).dirichlet(concentration))


def test_client_wise_dirichlet_refuses_more_min_classes_than_classes():
    from mecsim.learning.data.partition import dirichlet_clients

    with pytest.raises(ConfigError, match=r"data.min_classes.*\[1, 10\]"):
        dirichlet_clients(LABELS, 5, np.random.default_rng(0), alpha=0.01, min_classes=11)


def test_comet_cifar10_partition_leaves_fewer_than_half_the_clients_single_class():
    """Issue 48 item 7: the shipped COMET CIFAR-10 data keys on CIFAR-10's label counts
    (100 clients, seed 0). Client-wise Dir(0.01) alone makes 85 clients single-class."""
    from pathlib import Path

    from mecsim.config.scenario import load_scenario

    root = Path(__file__).resolve().parents[3]
    scenario = load_scenario(root / "scenarios" / "comet_cifar10.toml")
    data = scenario.data
    labels = np.repeat(np.arange(10), 5000)
    parts = PARTITIONS.get(data.partition)(
        labels,
        scenario.clients.count,
        numpy_rng(0, "partition"),
        alpha=data.alpha,
        min_classes=data.min_classes,
        min_samples=data.min_samples,
    )
    single = sum(len(np.unique(labels[p])) == 1 for p in parts)
    assert scenario.clients.count == 100 and data.alpha == 0.01
    assert single < 50

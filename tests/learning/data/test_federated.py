import pytest
import torch

from mecsim.common.errors import ConfigError, UnknownNameError
from mecsim.learning.data import ClientData, build_client_data, load_dataset


@pytest.fixture(scope="module")
def digits():
    return load_dataset("digits", seed=0)


def _labels(dataset, clients, split):
    source = dataset.y_test if split == "test" else dataset.y_train
    return [source[getattr(c, split)] for c in clients]


def test_splits_are_index_tensors_covering_the_train_set(digits):
    # Execute
    clients = build_client_data(
        digits, partition="dirichlet", num_clients=6, seed=0, val_fraction=0.2
    )

    # Assert
    assert all(isinstance(c, ClientData) for c in clients)
    assert all(t.dtype == torch.int64 for c in clients for t in (c.train, c.val, c.test))
    used = torch.cat([torch.cat([c.train, c.val]) for c in clients])
    assert torch.equal(used.sort().values, torch.arange(len(digits.x_train)))
    for c in clients:
        n = c.num_train + len(c.val)
        assert len(c.val) == round(0.2 * n)
        assert not set(c.val.tolist()) & set(c.train.tolist())


def test_local_test_matches_train_label_distribution(digits):
    # Execute
    clients = build_client_data(
        digits, partition="dirichlet", num_clients=4, seed=3, alpha=0.3, local_test_fraction=0.15
    )

    # Assert: the test pool (about 36 per class) covers every request, so sizes are as asked
    for c, train, test in zip(
        clients, _labels(digits, clients, "train"), _labels(digits, clients, "test"), strict=True
    ):
        assert len(c.test) == max(1, round(0.15 * c.num_train))
        assert set(test.tolist()) <= set(train.tolist())
        if c.num_train >= 200:
            p_train = torch.bincount(train, minlength=10) / len(train)
            p_test = torch.bincount(test, minlength=10) / len(test)
            assert torch.allclose(p_train, p_test, atol=0.02)


def test_local_test_has_no_repeats_when_the_pool_suffices(digits):
    # Execute: about 36 test images per class, quotas of about 3 per class
    clients = build_client_data(
        digits, partition="iid", num_clients=10, seed=0, local_test_fraction=0.2
    )

    # Assert
    for c in clients:
        assert len(c.test) == round(0.2 * c.num_train)
        assert len(c.test.unique()) == len(c.test)


def test_local_tests_are_disjoint_and_shrink_to_the_test_pool(digits):
    # Execute: clients ask for half their training size, far more than the pool holds
    clients = build_client_data(
        digits, partition="dirichlet", num_clients=8, seed=0, alpha=0.5, local_test_fraction=0.5
    )

    # Assert
    tests = [set(c.test.tolist()) for c in clients]
    assert sum(len(t) for t in tests) == len(set().union(*tests))  # no sample in two sets
    for c, t in zip(clients, tests, strict=True):
        assert len(t) == len(c.test)  # no repeats within a set either
        assert 0 < len(t) <= max(1, round(0.5 * c.num_train))
    drawn = torch.cat([digits.y_test[c.test] for c in clients])
    asked = torch.cat([digits.y_train[c.train] for c in clients])
    for label in range(10):  # a class's pool is used up only where clients asked for more of it
        if 0.5 * (asked == label).sum() > (digits.y_test == label).sum() + 8:
            assert (drawn == label).sum() == (digits.y_test == label).sum()


def test_one_class_per_client_gets_that_class_pool(digits):
    # Execute: local test twice the train size, one class per client (~36 test images per class)
    clients = build_client_data(
        digits,
        partition="classes",
        num_clients=10,
        seed=0,
        classes_per_client=1,
        local_test_fraction=2.0,
    )

    # Assert
    for c, test in zip(clients, _labels(digits, clients, "test"), strict=True):
        assert len(test.unique()) == 1
        assert len(c.test.unique()) == len(c.test) == (digits.y_test == test[0]).sum()


def test_synthetic_natural_uses_own_test_samples():
    # Prepare
    data = load_dataset("synthetic", num_clients=5, seed=1)

    # Execute
    clients = build_client_data(data, partition="natural", num_clients=5, seed=1)

    # Assert
    for c, train, test in zip(
        clients, data.natural_partition, data.natural_test_partition, strict=True
    ):
        assert c.train.tolist() == train.tolist() and c.test.tolist() == test.tolist()


def test_quantity_skew_gives_unequal_clients(digits):
    # Execute
    clients = build_client_data(
        digits, partition="iid", num_clients=10, seed=0, quantity_skew="lognormal"
    )

    # Assert
    sizes = [c.num_train for c in clients]
    assert min(sizes) >= 2 and max(sizes) > 10 * min(sizes)


def test_same_seed_same_clients_different_seed_different(digits):
    # Execute
    a, b, c = (
        build_client_data(digits, partition="dirichlet", num_clients=5, seed=s, val_fraction=0.1)
        for s in (7, 7, 8)
    )

    # Assert
    def same(x, y):
        return all(
            torch.equal(getattr(p, f), getattr(q, f))
            for p, q in zip(x, y, strict=True)
            for f in ("train", "val", "test")
        )

    assert same(a, b) and not same(a, c)


def test_bad_names_and_values_name_their_field(digits):
    with pytest.raises(UnknownNameError, match="data.partition"):
        build_client_data(digits, partition="shards", num_clients=4, seed=0)
    with pytest.raises(ConfigError, match="data.quantity_skew"):
        build_client_data(digits, partition="iid", num_clients=4, seed=0, quantity_skew="zipf")
    with pytest.raises(ConfigError, match="data.partition"):
        build_client_data(digits, partition="natural", num_clients=4, seed=0)


# --- COMET's per-client split (local_split = "own_data") --------------------------------


def test_own_data_split_takes_train_val_and_test_from_each_clients_partition(tiny):
    """COMET, appendix B: each client's data split {0.1, 0.3, 0.4} / 0.1 / 0.5; the
    local test set comes from the client's own partition, after the global test set."""
    import copy

    import mecsim
    from mecsim.runs.world import build_world

    scenario = copy.deepcopy(tiny)
    scenario["data"].update(
        {"local_split": "own_data", "val_fraction": 0.1, "partition": "dirichlet_clients"}
    )
    scenario["data"]["alpha"] = 0.01
    sc = mecsim.load_scenario(scenario)
    world = build_world(sc, torch.device("cpu"))
    data = world.data
    n_global = data.global_test_size
    assert n_global is not None and n_global < len(data.y_test)
    for train, val, test in zip(data.train, data.val, data.test, strict=True):
        n = len(train) + len(val) + len(test)
        whole = round(len(test) / 0.5)  # the partition's size, within rounding
        assert len(train) in {max(1, round(s * whole)) for s in (0.1, 0.3, 0.4)}
        assert abs(len(val) - 0.1 * whole) <= 1 and n <= whole + 1
        assert (test >= n_global).all()  # the client's own samples, after the global test set
    result = mecsim.run(scenario, ["protocol.rounds=1"], write=False)
    assert 0 <= result.summary["final_personal_acc"] <= 1


@pytest.mark.parametrize(
    "overrides, field",
    [
        (["data.local_split=own_data", "data.own_test_share=0.9"], "data"),
        (["data.train_share_choices=[0.1, 1.5]"], "data.train_share_choices"),
    ],
)
def test_own_data_shares_that_cannot_fit_are_refused_in_one_line(overrides, field, capsys):
    from pathlib import Path

    from mecsim.commands.cli import main

    scenario = Path(__file__).resolve().parents[3] / "scenarios" / "quickstart.toml"
    args = ["validate", str(scenario)]
    for o in overrides:
        args += ["--set", o]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {field}: ")

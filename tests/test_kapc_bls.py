"""KAPC + BLS (paper 004, Sec. 5-6): partial layers up (criterion 29) and down (mu)."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest
import torch

import mecsim
from mecsim.algorithms.kapc import KAPC
from mecsim.algorithms.kapc_bls import criterion, search_depth
from mecsim.models import build_model
from mecsim.models.layers import model_layers
from mecsim.simulation import Simulation

BLS = [
    "algorithm.name=kapc_bls",
    "algorithm.epochs=1",
    "algorithm.lr=0.05",
    "protocol.rounds=4",
    "algorithm.mu=0.3",
]
LAYERS = tuple(
    model_layers(build_model("cnn-small", input_shape=(1, 8, 8), num_classes=10, seed=0))
)


def _keys(layers) -> set[str]:
    return {k for layer in layers for k in (*layer.param_names, *layer.buffer_names)}


def test_criterion_29_by_hand():
    ones = torch.ones(3, dtype=torch.float64)
    widths, classes = [4, 4, 10], 10
    # M(1) = 1/2, M(2) = 1/4 + 1/2, M(3) = 1/8 + 1/4 + 1/2; prod of B = 1
    assert criterion(1, ones, ones, widths, classes)  # 3*4*0.5/(1*10*4) = 0.15 < 0.875
    assert criterion(2, ones, ones, widths, classes)  # 3*4*0.75/(2*10*2) = 0.225 < 0.875
    assert not criterion(3, ones, ones, widths, classes)  # equal sides at Omega = L
    assert search_depth(2, ones, ones, widths, classes) == 1  # down while it holds
    assert search_depth(3, ones, ones, widths, classes) == 3
    small = torch.tensor([1.0, 0.1, 0.1], dtype=torch.float64)
    # M(3) = 0.125 + 2.5 + 5; Omega = 1: 0.15 vs 7.625 * 0.01; Omega = 2: 1.575 vs 0.7625
    assert not criterion(1, small, ones, widths, classes)
    assert not criterion(2, small, ones, widths, classes)
    assert search_depth(1, small, ones, widths, classes) == 3  # up until it holds, or L


@pytest.fixture(scope="module")
def bls_run(tiny_module):
    uploads, downloads = [], []
    aggregate, payloads = KAPC.aggregate, Simulation.payloads

    def record_aggregate(self, server_state, ups, ctx):
        uploads.extend((ctx.round, u.client, dict(u.payload)) for u in ups)
        return aggregate(self, server_state, ups, ctx)

    def record_payloads(self, selected, round_=0):
        out = payloads(self, selected, round_)
        cube = self.server_state["cube"].clone()
        downloads.extend((round_, c, set(p), cube) for c, p in out.items())
        return out

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(KAPC, "aggregate", record_aggregate)
        patch.setattr(Simulation, "payloads", record_payloads)
        result = mecsim.run(copy.deepcopy(tiny_module), BLS, write=False)
    return result, uploads, downloads


def test_an_upload_is_exactly_the_first_omega_layers_and_its_bytes(bls_run):
    result, uploads, _ = bls_run
    events = result.events.query("phase == 'upload'").set_index(["round", "client"])["bytes"]
    depths = set()
    for round_, client, payload in uploads:
        depth = next(d for d in range(len(LAYERS) + 1) if _keys(LAYERS[:d]) == set(payload))
        depths.add(depth)
        assert events[(round_, client)] == sum(t.nbytes for t in payload.values())
    assert len(LAYERS) - 1 in depths  # first selection: L - 1
    assert min(depths) < len(LAYERS) - 1  # then the criterion chooses


def test_a_layer_over_mu_is_absent_from_the_download(bls_run):
    _, _, downloads = bls_run
    dropped = 0
    for _, client, keys, cube in downloads:
        for index, layer in enumerate(LAYERS):
            sent = set(layer.param_names) <= keys
            assert sent == (float(cube[client, index, client]) <= 0.3)
            dropped += not sent
        assert not any(k in keys for layer in LAYERS for k in layer.buffer_names)
    assert dropped > 0


def test_without_selection_bls_is_kapc(tiny):
    kapc = mecsim.run(copy.deepcopy(tiny), [*BLS[1:4], "algorithm.name=kapc"], write=False)
    same = [*BLS[:4], "algorithm.mu=1", "algorithm.client_selection=false"]
    bls = mecsim.run(tiny, same, write=False)
    pd.testing.assert_series_equal(kapc.events["bytes"], bls.events["bytes"])
    pd.testing.assert_series_equal(kapc.rounds["personal_acc"], bls.rounds["personal_acc"])


# --- mecsim report -----------------------------------------------------------------------


def test_uploaded_layers_are_read_back_from_bytes():
    from mecsim.analysis.cost_report import uploaded_layers

    events = pd.DataFrame(
        {
            "round": [0, 0, 1, 1],
            "direction": ["up"] * 4,
            "role": ["sender"] * 4,
            "bytes": [10, 30, 60, 30],  # layers of 10, 20 and 30 bytes
        }
    )
    depth = uploaded_layers(events, [10, 20, 30])
    assert depth.tolist() == [1.5, 2.5]
    odd = uploaded_layers(events.assign(bytes=[10, 25, 60, 30]), [10, 20, 30])
    assert np.isnan(odd[0]) and odd[1] == 2.5


def test_report_writes_kapcs_tables_across_runs(tiny, tmp_path, capsys):
    from mecsim.cli import main

    dirs = []
    for name, extra in (("kapc", []), ("bls", ["algorithm.mu=0.3"])):
        overrides = [*BLS[:4], *extra] if name == "bls" else [*BLS[1:4], "algorithm.name=kapc"]
        mecsim.run(copy.deepcopy(tiny), overrides, out=tmp_path / name)
        dirs.append(str(tmp_path / name))

    assert main(["report", *dirs, "--out", str(tmp_path / "report")]) == 0
    printed = capsys.readouterr().out
    assert "KAPC Table 5" in printed and "KAPC Fig. 8" in printed
    cost = pd.read_csv(tmp_path / "report" / "cost.csv").set_index("run")
    rounds = pd.read_csv(tmp_path / "kapc" / "rounds.csv")
    kapc = cost.loc["kapc / compute_and_wait"]
    assert kapc["up_mb"] == pytest.approx(rounds["bytes_up"].mean() / 2**20)
    assert kapc["best_mean_acc"] == pytest.approx(rounds["personal_acc"].max())
    assert cost.loc["kapc_bls / compute_and_wait", "up_mb"] < kapc["up_mb"]
    layers = pd.read_csv(tmp_path / "report" / "layers.csv", index_col="round")
    assert (layers["kapc / compute_and_wait"] == len(LAYERS)).all()
    assert layers["kapc_bls / compute_and_wait"].max() < len(LAYERS)
    time = pd.read_csv(tmp_path / "report" / "time.csv")
    pct = time[[c for c in time.columns if c.endswith("_pct")]].sum(axis=1)
    np.testing.assert_allclose(pct, 100)
    assert (tmp_path / "report" / "layers.png").stat().st_size > 0


def test_report_refuses_bad_input_with_one_line(tmp_path, capsys):
    from mecsim.cli import main

    assert main(["report", str(tmp_path / "missing")]) == 2
    assert "is not a mecsim run directory" in capsys.readouterr().err
    taken = tmp_path / "taken"
    taken.mkdir()
    assert main(["report", str(tmp_path), "--out", str(taken)]) == 2
    assert "--out" in capsys.readouterr().err

"""Every registered algorithm under every protocol it declares, on the serial and batched executors.

Checks, per run of two rounds: the bytes of every upload and download are
the nbytes of the payload the algorithm actually returned; serial and
batched executors produce the same events table (times, bytes, FLOPs) and
the same accuracies within float tolerance; every task's FLOPs are positive.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

import mecsim
from mecsim.algorithms import ALGORITHMS
from mecsim.protocols import PROTOCOLS
from mecsim.protocols.registry import protocol_settings
from mecsim.state import payload_nbytes

PROTOCOL_KEYS = {
    "deadline": ["protocol.deadline_s=60"],
    "fedbuff": ["protocol.buffer_size=2"],
    "fedasync": ["protocol.concurrency=2"],
}
SHORT = {  # keep every task short, whatever its schedule key is called
    "personal_steps": 2,
    "head_steps": 2,
    "finetune_steps": 2,
}


def cases() -> list:
    out = []
    for name in ALGORITHMS.names():
        algorithm = ALGORITHMS.get(name)
        for kind in sorted(algorithm.protocols or PROTOCOLS.names()):
            out.append(pytest.param(name, kind, id=f"{name}-{kind}"))
    return out


def needs(name: str) -> list[str]:
    """What the algorithm declares it needs: public data, validation data, a round count."""
    algorithm = ALGORITHMS.get(name)
    out = []
    if algorithm.public_data != "none":
        out += ["data.public_size=40", "algorithm.public_batch_size=8"]
    if getattr(algorithm, "needs_validation", False):
        out.append("data.val_fraction=0.3")
    if getattr(algorithm, "required_rounds", None) is not None:  # PersFL: 1 FL round + 1 local
        out += ["algorithm.fl_rounds=1", "algorithm.temperatures=[2]", "algorithm.imitations=[0.5]"]
        out += ["algorithm.distill_epochs=1"]
    fields = algorithm.Settings.model_fields
    return [
        o for o in out if not o.startswith("algorithm.") or o.split(".")[1].split("=")[0] in fields
    ]


def overrides(name: str, kind: str) -> list[str]:
    fields = ALGORITHMS.get(name).Settings.model_fields
    short = [f"algorithm.{k}={v}" for k, v in SHORT.items() if k in fields]
    assert "kind" in protocol_settings(kind).model_fields
    return [
        f"algorithm.name={name}",
        "algorithm.steps=2",
        "algorithm.momentum=0.5",
        "model.name=cnn-small-bn",
        f"protocol.kind={kind}",
        *short,
        *PROTOCOL_KEYS.get(kind, []),
        *needs(name),
    ]


def spy(monkeypatch, cls, hook: str, sent: list):
    original = getattr(cls, hook)

    def recording(self, state, ctx, *args):
        payload = original(self, state, ctx, *args)
        if payload:
            sent.append((ctx.round, ctx.client, payload_nbytes(payload)))
        return payload

    monkeypatch.setattr(cls, hook, recording)


@pytest.mark.parametrize(("name", "kind"), cases())
def test_algorithm_conforms_under_protocol(tiny, monkeypatch, name, kind):
    cls = ALGORITHMS.get(name)
    uploads: list = []
    downlinks: list = []
    spy(monkeypatch, cls, "upload", uploads)
    spy(monkeypatch, cls, "downlink", downlinks)
    serial = mecsim.run(tiny, overrides(name, kind), executor="serial", write=False)
    sent_up, sent_down = list(uploads), {b for _, _, b in downlinks}
    batched = mecsim.run(tiny, overrides(name, kind), executor="batched", write=False)

    events = serial.events
    up = events[events["phase"] == "upload"]
    if kind not in ("fedasync", "fedbuff"):  # async runs end with uploads still in flight
        assert sorted(up["bytes"]) == sorted(b for _, _, b in sent_up)
    for (job, client), nbytes in up.set_index(["job", "client"])["bytes"].items():
        assert (job, client, nbytes) in sent_up
    down = events[events["phase"] == "download"]
    assert set(down["bytes"]) <= sent_down
    compute = events[events["phase"].str.startswith("compute:")]
    assert len(compute) > 0 and (compute["flops"] > 0).all()

    pd.testing.assert_frame_equal(serial.events, batched.events)
    for column in ("generic_acc", "personal_acc"):
        np.testing.assert_allclose(serial.rounds[column], batched.rounds[column], atol=0.05)

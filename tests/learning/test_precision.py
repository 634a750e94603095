"""``execution.precision = "bf16"`` (issue 50): the forward pass runs under bfloat16
autocast, the rest in fp32; the events (times, bytes, FLOPs) are the fp32 run's and the
accuracy stays within a tolerance of it."""

from __future__ import annotations

import pandas as pd
import torch

import mecsim
from mecsim.learning.training import ModelFunction

RUN = ["protocol.rounds=4", "clients.count=6", "output.progress=false"]


def test_a_bf16_run_times_and_counts_as_fp32_and_learns_as_well(tiny):
    fp32 = mecsim.run(tiny, [*RUN, "execution.precision=fp32"], write=False, executor="serial")
    bf16 = mecsim.run(tiny, [*RUN, "execution.precision=bf16"], write=False, executor="serial")
    pd.testing.assert_frame_equal(fp32.events, bf16.events)  # FLOPs are counted alike
    accuracy = fp32.rounds["personal_acc"].iloc[-1]
    assert abs(bf16.rounds["personal_acc"].iloc[-1] - accuracy) < 0.05
    # it did train in bf16: the final models differ in their low bits, not more
    a, b = fp32.server_state["global"].params, bf16.server_state["global"].params
    assert any(not torch.equal(a[k], b[k]) for k in a)
    assert all(torch.allclose(a[k], b[k], atol=0.05) for k in a)


def test_the_batched_executor_trains_bf16_as_the_serial_one(tiny):
    runs = [
        mecsim.run(tiny, [*RUN, "execution.precision=bf16"], write=False, executor=executor)
        for executor in ("serial", "batched")
    ]
    pd.testing.assert_frame_equal(runs[0].events, runs[1].events)
    a, b = (r.server_state["global"].params for r in runs)
    assert all(torch.allclose(a[k], b[k], atol=2e-2) for k in a)


def test_bf16_computes_the_forward_in_bf16_and_returns_fp32():
    model = torch.nn.Sequential(torch.nn.Linear(8, 4))
    params = dict(model.named_parameters())
    x = torch.randn(3, 8)
    out = ModelFunction(model, precision="bf16")(params, {}, x)["logits"]
    assert out.dtype == torch.float32
    exact = ModelFunction(model)(params, {}, x)["logits"]
    rounded = x.bfloat16() @ params["0.weight"].bfloat16().T + params["0.bias"].bfloat16()
    torch.testing.assert_close(out, rounded.float(), rtol=1e-2, atol=1e-2)
    assert not torch.equal(out, exact)

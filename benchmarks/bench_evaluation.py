"""Personalized evaluation of many clients: one model at a time against stacked groups.

Each client holds its own model (as Ditto's or FedPer's clients do) and a
local test set; the evaluator predicts every client's test set with its own
model, either one ``predict`` per client or :func:`mecsim.learning.training.predict_many`
(what runs with the batched executor). Prints both times, their ratio,
whether the predicted labels are identical, and the bound: one model
predicting all the clients' samples at once.

    python benchmarks/bench_evaluation.py [--model cnn-small] [--clients 20 200 1000] [--test 20]
"""

from __future__ import annotations

import argparse
import time

import torch

from mecsim.learning.models import build_model
from mecsim.learning.state import ModelState
from mecsim.learning.training import predict, predict_many


def timed(fn, repeat: int) -> tuple[float, list[torch.Tensor]]:
    fn()  # warm-up
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - started)
    return best, out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="cnn-small")
    parser.add_argument("--shape", type=int, nargs=3, default=[1, 8, 8])
    parser.add_argument("--clients", type=int, nargs="+", default=[20, 200, 1000])
    parser.add_argument("--test", type=int, default=20, help="mean local test samples")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    shape = tuple(args.shape)
    model = build_model(args.model, input_shape=shape, num_classes=10, seed=0)
    base = ModelState.of(model)
    generator = torch.Generator().manual_seed(0)
    for k in args.clients:
        states = [
            ModelState(
                {
                    n: v + 0.01 * torch.randn(v.shape, generator=generator)
                    for n, v in base.params.items()
                },
                base.buffers,
            )
            for _ in range(k)
        ]
        sizes = torch.randint(args.test // 2, args.test * 3 // 2 + 1, (k,), generator=generator)
        inputs = [torch.randn(int(n), *shape, generator=generator) for n in sizes]

        def one_at_a_time(states=states, inputs=inputs):
            return [predict(model, s, x) for s, x in zip(states, inputs, strict=True)]

        def batched(states=states, inputs=inputs):
            return predict_many(model, states, inputs)

        pool = torch.cat(inputs)

        def bound(pool=pool):
            return [predict(model, base, pool)]

        one_s, one = timed(one_at_a_time, args.repeat)
        many_s, many = timed(batched, args.repeat)
        bound_s, _ = timed(bound, args.repeat)
        same = all(torch.equal(a, b) for a, b in zip(one, many, strict=True))
        print(
            f"{args.model}, {k} clients x ~{args.test} test samples: one at a time "
            f"{one_s * 1e3:.1f} ms, batched {many_s * 1e3:.1f} ms, "
            f"one / batched {one_s / many_s:.1f}x, batched / bound {many_s / bound_s:.2f}x "
            f"(bound {bound_s * 1e3:.1f} ms); identical labels: {same}",
            flush=True,
        )


if __name__ == "__main__":
    main()

"""Where one batched training call's wall time goes, phase by phase, against the bound.

``train_batched`` for K clients of one model, each phase timed with the device
synchronised before and after it: drawing the clients' batch orders
(``_lockstep_batches``), stacking their states, the eager steps, the CUDA graph
capture, the whole segment of steps, and setting the states aside. The bound is one
model on the same samples in batches of K x batch. On a GPU the difference between
the call and its steps is per-client host work, which no kernel change removes.

    python benchmarks/bench_batched_phases.py --device cuda --model cnn-small --clients 1000
    python benchmarks/bench_batched_phases.py --device cuda --model resnet18 --clients 100 \\
        --steps 5 --batch 10
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from collections.abc import Callable

import torch
from bench_local_training import CASES

import mecsim.executors.batched as batched
import mecsim.executors.lockstep as lockstep
from mecsim.algorithms.losses import cross_entropy_loss
from mecsim.learning.models import build_model
from mecsim.learning.state import ModelState
from mecsim.learning.training import ModelFunction, Schedule, SplitData, train

SECONDS: dict[str, float] = defaultdict(float)
CALLS: dict[str, int] = defaultdict(int)


def phase(name: str, fn: Callable, device: torch.device) -> Callable:
    """``fn`` with its wall time (device synchronised around it) added to ``name``."""

    def timed(*args, **kwargs):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        result = fn(*args, **kwargs)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        SECONDS[name] += time.perf_counter() - start
        CALLS[name] += 1
        return result

    return timed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", default="cnn-small", choices=sorted(CASES))
    parser.add_argument("--clients", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3, help="calls; the last is reported")
    args = parser.parse_args()
    device = torch.device(args.device)
    shape, classes = CASES[args.model]
    model = build_model(args.model, input_shape=shape, num_classes=classes, seed=0).to(device)
    function, loss = ModelFunction(model), cross_entropy_loss("train")
    per_client = args.steps * args.batch
    x = torch.randn(args.clients * per_client, *shape, device=device)
    y = torch.randint(0, classes, (len(x),), device=device)
    start = ModelState.of(model)
    schedule = Schedule(epochs=1, batch_size=args.batch, lr=0.01, momentum=0.5)
    splits = [
        {
            "train": SplitData(
                x,
                y,
                torch.arange(i * per_client, (i + 1) * per_client, device=device),
                args.batch,
                torch.Generator(),
            )
        }
        for i in range(args.clients)
    ]
    all_samples = torch.arange(len(x), device=device)
    whole = {"train": SplitData(x, y, all_samples, args.clients * args.batch, torch.Generator())}
    bound_schedule = Schedule(epochs=1, batch_size=args.clients * args.batch, lr=0.01, momentum=0.5)

    batched._lockstep_batches = phase("batch orders", batched._lockstep_batches, device)
    batched.stack = phase("stack states", batched.stack, device)
    batched._set_aside = phase("set states aside", batched._set_aside, device)
    lockstep.Lockstep.eager = phase("eager steps", lockstep.Lockstep.eager, device)
    lockstep.Lockstep._capture = phase("graph capture", lockstep.Lockstep._capture, device)
    lockstep.Lockstep.segment = phase("segments (all steps)", lockstep.Lockstep.segment, device)
    call = phase("train_batched", batched.train_batched, device)
    bound = phase("bound", train, device)
    for _ in range(args.repeat):
        SECONDS.clear(), CALLS.clear()
        for i, split in enumerate(splits):
            split["train"].generator.manual_seed(i)
        call(function, [start] * args.clients, splits, schedule, loss)
        whole["train"].generator.manual_seed(0)
        bound(function, start, whole, bound_schedule, loss)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"{args.model}, {args.clients} clients x {args.steps} steps, batch {args.batch}, "
          f"{name}, torch {torch.__version__}")  # fmt: skip
    first = ("train_batched", "bound")
    for key in (*first, *(k for k in SECONDS if k not in first)):
        print(f"  {key:22s} {SECONDS[key]:8.4f} s  x{CALLS[key]}")
    print(f"  call / bound {SECONDS['train_batched'] / SECONDS['bound']:.2f}x")


if __name__ == "__main__":
    main()

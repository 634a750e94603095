"""Memory of stacked client state for the batched executor (ResNet-18 by default).

Reports the stacked parameters + buffers of K clients (what the batched
executor holds per task), plus SGD momentum; on a GPU also the measured peak
memory of one batched training step (batch 10, CIFAR-sized inputs).

    python benchmarks/bench_memory.py [--clients 100] [--device cuda] [--max-batch-clients 25]
"""

from __future__ import annotations

import argparse

import torch

from mecsim.algorithms.losses import cross_entropy_loss
from mecsim.executors import train_batched
from mecsim.learning.models import build_model
from mecsim.learning.state import ModelState, payload_nbytes
from mecsim.learning.training import ModelFunction, Schedule, SplitData

GIB = 2**30


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--clients", type=int, default=100)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--max-batch-clients", type=int, default=None)
    args = parser.parse_args()
    model = build_model(args.model, input_shape=(3, 32, 32), num_classes=10, seed=0)
    state = ModelState.of(model)
    per_client = payload_nbytes(state.to_payload())
    params = payload_nbytes(state.params)
    k = args.clients
    print(f"{args.model}: {per_client / 2**20:.2f} MiB of parameters + buffers per client")
    print(
        f"stacked state of {k} clients: {k * per_client / GIB:.2f} GiB;"
        f" with SGD momentum: {(k * per_client + k * params) / GIB:.2f} GiB;"
        f" a training step adds gradients: {(k * per_client + 2 * k * params) / GIB:.2f} GiB"
    )
    if args.device != "cuda" or not torch.cuda.is_available():
        print("(no CUDA device: peak memory of a training step not measured)")
        return
    device = torch.device("cuda")
    model.to(device)
    function = ModelFunction(model)
    start = state.to(device)
    group = args.max_batch_clients or k
    x = torch.randn(group * 10, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (len(x),), device=device)
    splits = [
        {
            "train": SplitData(
                x,
                y,
                torch.arange(i * 10, (i + 1) * 10, device=device),
                10,
                torch.Generator(device=device).manual_seed(i),
            )
        }
        for i in range(group)
    ]
    schedule = Schedule(steps=2, batch_size=10, lr=0.01, momentum=0.5)
    torch.cuda.reset_peak_memory_stats()
    train_batched(function, [start] * group, splits, schedule, cross_entropy_loss("train"))
    torch.cuda.synchronize()
    print(
        f"measured peak GPU memory, one batched group of {group} clients (2 steps, batch 10):"
        f" {torch.cuda.max_memory_allocated() / GIB:.2f} GiB"
    )


if __name__ == "__main__":
    main()

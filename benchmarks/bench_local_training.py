"""Local-training throughput: serial vs batched vs the single-model bound.

For K clients of one architecture, each doing S SGD steps of batch B on its
own data, time (1) the serial trainer one client after another, (2) the
batched trainer (one vmapped computation over stacked clients, the model
hand-batched where mecsim.learning.models.stacked supports it), (3) the same with every
layer through vmap's batching rules, for comparison, and (4) the throughput
bound: ONE model doing S steps of batch K*B (the same samples). Ratios are
measured side by side in one process, the four interleaved, best of
``--repeat`` each. On a GPU it also times the batched trainer without CUDA
graphs (``eager/graphed``), counts the kernels of one SGD step, batched and
bound, with torch.profiler, and prints the convolution formulation chosen
for each layer (``execution.kernels = "auto"``; ``--kernels`` pins one).

    python benchmarks/bench_local_training.py                 # CPU defaults
    python benchmarks/bench_local_training.py --device cuda --clients 50 200 1000 \
        --models cnn-small resnet18 --resnet-steps 5 --resnet-max-clients 100
"""

from __future__ import annotations

import argparse
import time

import torch

from mecsim.algorithms.losses import cross_entropy_loss
from mecsim.executors import train_batched
from mecsim.learning.models import build_model
from mecsim.learning.models.stacked_conv import MODES, choices
from mecsim.learning.state import ModelState
from mecsim.learning.training import ModelFunction, Schedule, SplitData, train

CASES = {
    "cnn-small": ((1, 8, 8), 10),
    "cnn-kapc": ((1, 28, 28), 10),
    "resnet18": ((3, 32, 32), 10),
}


def timed(fn, device: torch.device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


def kernels_per_step(fn, steps: int) -> float:
    """GPU kernels one call of ``fn`` launches, per SGD step (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    events = prof.key_averages()
    launched = sum(e.count for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
    return launched / max(steps, 1)


def top_kernels(fn, rows: int) -> None:
    """The GPU kernels that take most of one call of ``fn``'s time (torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=rows))


def bench(
    model_name: str,
    clients: int,
    steps: int,
    batch: int,
    device: torch.device,
    repeat: int,
    precision: str = "fp32",
    kernels: str = "auto",
    with_serial: bool = True,
    profile_rows: int = 0,
    with_bf16: bool = True,
) -> dict:
    shape, classes = CASES[model_name]
    model = build_model(model_name, input_shape=shape, num_classes=classes, seed=0).to(device)
    function = ModelFunction(model, precision=precision, kernels=kernels)
    vmapped = ModelFunction(model, hand_batched=False, precision=precision, kernels=kernels)
    halved = ModelFunction(model, precision="bf16", kernels=kernels)  # under bf16 autocast
    loss = cross_entropy_loss("train")
    per_client = steps * batch
    x = torch.randn(clients * per_client, *shape, device=device)
    y = torch.randint(0, classes, (len(x),), device=device)
    start = ModelState.of(model)
    schedule = Schedule(epochs=1, batch_size=batch, lr=0.01, momentum=0.5)
    bound_schedule = Schedule(epochs=1, batch_size=clients * batch, lr=0.01, momentum=0.5)

    built: dict[tuple[int, int], list[dict[str, SplitData]]] = {}

    def splits(size: int, count: int) -> list[dict[str, SplitData]]:
        """The clients' inputs, built once per case outside the timings (on a GPU,
        building 1,000 index tensors takes 20 ms, a sixth of a batched call); each
        client's generator is reseeded per call, so every call draws the same batches."""
        if (size, count) not in built:
            built[size, count] = [
                {
                    "train": SplitData(
                        x,
                        y,
                        torch.arange(i * len(x) // count, (i + 1) * len(x) // count, device=device),
                        size,
                        torch.Generator(),  # on the CPU, as mecsim's batch streams
                    )
                }
                for i in range(count)
            ]
        for i, split in enumerate(built[size, count]):
            split["train"].generator.manual_seed(i)
        return built[size, count]

    def serial():
        for split in splits(batch, clients):
            train(function, start, split, schedule, loss)

    def batched():
        train_batched(function, [start] * clients, splits(batch, clients), schedule, loss)

    def vmap_rules():
        train_batched(vmapped, [start] * clients, splits(batch, clients), schedule, loss)

    def bound():  # one model, the same samples, batches of clients x batch
        train(function, start, splits(clients * batch, 1)[0], bound_schedule, loss)

    def batched_bf16():
        train_batched(halved, [start] * clients, splits(batch, clients), schedule, loss)

    def batched_eager():
        train_batched(
            function, [start] * clients, splits(batch, clients), schedule, loss, cuda_graphs=False
        )

    cases = (("batched", batched), ("vmap", vmap_rules), ("bound", bound))
    if with_serial:
        cases = (("serial", serial), *cases)
    if precision == "fp32" and with_bf16:
        cases += (("batched_bf16", batched_bf16),)
    if device.type == "cuda":
        cases += (("batched_eager", batched_eager),)
    for _, fn in cases:  # warm-up (allocator, kernels)
        fn()
    # interleaved, best of ``repeat`` each: a slow spell of a shared machine then slows
    # all of them alike instead of deciding one
    best = dict.fromkeys((name for name, _ in cases), float("inf"))
    for _ in range(repeat):
        for name, fn in cases:
            best[name] = min(best[name], timed(fn, device))
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        batched()
        best["peak_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
        best["kernels_batched"] = kernels_per_step(batched, steps)
        best["kernels_eager"] = kernels_per_step(batched_eager, steps)
        best["kernels_bound"] = kernels_per_step(bound, steps)
        if profile_rows:
            top_kernels(batched, profile_rows)
    best.setdefault("serial", float("nan"))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--models", nargs="+", default=["cnn-small", "resnet18"])
    parser.add_argument("--clients", nargs="+", type=int, default=[10, 50, 200])
    parser.add_argument("--steps", type=int, default=20, help="SGD steps per client (cnn)")
    parser.add_argument("--resnet-steps", type=int, default=1, help="SGD steps per client (resnet)")
    parser.add_argument(
        "--resnet-max-clients", type=int, default=50, help="skip larger resnet cases"
    )
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument(
        "--precision",
        choices=("fp32", "bf16"),
        default="fp32",
        help="execution.precision of every case (fp32 also times batched under bf16)",
    )
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-bf16", action="store_true", help="skip the bf16 column")
    parser.add_argument(
        "--serial-max-clients", type=int, default=None, help="skip the serial trainer above this"
    )
    parser.add_argument(
        "--profile", type=int, default=0, help="GPU: print this many top kernels of a batched call"
    )
    parser.add_argument(
        "--kernels",
        choices=MODES,
        default="auto",
        help="execution.kernels: the stacked convolutions' formulation (auto: measured)",
    )
    parser.add_argument(
        "--cudnn-benchmark",
        action="store_true",
        help="let cuDNN time its convolution algorithms (deterministic ones only)",
    )
    args = parser.parse_args()
    device = torch.device(args.device)
    if args.cudnn_benchmark:
        torch.backends.cudnn.benchmark = True
        torch.backends.cudnn.deterministic = True
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device={device} ({name}) torch={torch.__version__} threads={torch.get_num_threads()}")
    print(
        f"{'model':<10} {'clients':>7} {'steps':>5} {'serial s':>9} {'batched s':>9} {'bound s':>8}"
        f" {'serial/batched':>14} {'batched/bound':>13} {'vmap rules/bound':>16}"
        + (f" {'bf16/fp32':>11}" if args.precision == "fp32" else "")
    )
    for name in args.models:
        resnet = name.startswith("resnet")
        steps = args.resnet_steps if resnet else args.steps
        for k in args.clients:
            if resnet and k > args.resnet_max_clients:
                continue
            repeat = 1 if resnet else args.repeat
            with_serial = args.serial_max_clients is None or k <= args.serial_max_clients
            t = bench(
                name,
                k,
                steps,
                args.batch,
                device,
                repeat,
                args.precision,
                args.kernels,
                with_serial,
                args.profile,
                not args.no_bf16,
            )
            peak = ""
            if "peak_gib" in t:
                peak = (
                    f" eager/graphed {t['batched_eager'] / t['batched']:.2f}x,"
                    f" kernels/step {t['kernels_batched']:.0f} (eager {t['kernels_eager']:.0f})"
                    f" vs bound {t['kernels_bound']:.0f}, {t['peak_gib']:.2f} GiB peak"
                )
            halved = f" {t.get('batched_bf16', float('nan')) / t['batched']:>10.2f}x"
            halved = halved if args.precision == "fp32" else ""
            print(
                f"{name:<10} {k:>7} {steps:>5} {t['serial']:>9.3f} {t['batched']:>9.3f} {t['bound']:>8.3f}"
                f" {t['serial'] / t['batched']:>13.2f}x {t['batched'] / t['bound']:>12.2f}x"
                f" {t['vmap'] / t['bound']:>15.2f}x{halved}{peak}",
                flush=True,
            )
    for layer, formulation in choices().items():
        print(f"chosen: {formulation:<13} for {layer}")


if __name__ == "__main__":
    main()

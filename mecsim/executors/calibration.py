"""Resolve ``execution.executor = "auto"`` by measurement, and bound batched memory.

Before the first round, a probe trains ``k`` clients of the run's default
architecture for one SGD step on random data of the run's input shape and
batch size, once one client after another (the serial executor's work) and
once as one vmapped group (the batched executor's), each after a warm-up.

* ``auto`` picks batched unless serial is clearly faster
  (:data:`SERIAL_MARGIN`): small CNNs batch 3-5x faster, while large models
  on a CPU (ResNet-18) run 2-3x faster serially, because their vmapped
  convolutions become grouped convolutions that CPU kernels run poorly.
  On a GPU batched is taken without timing.
* The batched group size is bounded by memory: the probe measures what one
  more client adds to a batched step (on CUDA the allocator's peak; on a CPU
  the tensors autograd saves for backward plus the stacked parameters,
  buffers, gradients, momentum and updated parameters) and caps groups so
  one fits in the budget (``execution.memory_budget_gb``, default half the
  memory available when the run starts). The cap never changes results.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch

from mecsim.algorithms.losses import cross_entropy_loss
from mecsim.executors.batched import train_batched
from mecsim.learning.state import ModelState, payload_nbytes
from mecsim.learning.training import ModelFunction, Schedule, SplitData, train

SERIAL_MARGIN = 1.2
"""``auto`` runs serial only when the probe's serial step is this much faster than batched."""

PROBE_CLIENTS = 8
"""Clients in the timing probe (fewer when a round has fewer)."""


@dataclass(frozen=True)
class Calibration:
    """What the probe measured and what it decided."""

    executor: str
    serial_s: float | None
    batched_s: float | None
    probe_clients: int
    client_bytes: int
    budget_bytes: int
    max_clients: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def available_memory(device: torch.device) -> int:
    """Bytes free for new tensors: CUDA's free memory, or the OS's available RAM."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def _probe_splits(
    shape: tuple[int, ...], classes: int, batch: int, k: int, device: torch.device
) -> list[dict[str, SplitData]]:
    g = torch.Generator().manual_seed(0)  # the run's own random streams are untouched
    x = torch.randn(k * batch, *shape, generator=g).to(device)
    y = torch.randint(0, classes, (k * batch,), generator=g).to(device)
    return [
        {
            "train": SplitData(
                x,
                y,
                torch.arange(i * batch, (i + 1) * batch, device=device),
                batch,
                torch.Generator(device=device).manual_seed(i),
            )
        }
        for i in range(k)
    ]


def timed(fn, device: torch.device) -> float:
    """Seconds ``fn`` takes: the best of 3, or of fewer once a call took 0.25 s or more
    (one slow outlier must not decide)."""
    best = float("inf")
    for _ in range(3):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - start)
        if best >= 0.25:
            break
    return best


def _saved_bytes(fn) -> int:
    """Bytes of the distinct tensors autograd saves for backward while ``fn`` runs."""
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(storages.values())


def calibrate(
    function: ModelFunction,
    input_shape: tuple[int, ...],
    num_classes: int,
    batch_size: int,
    clients: int,
    device: torch.device,
    requested: str,
    budget_bytes: int | None = None,
) -> Calibration:
    """Measure serial against batched training on a probe; see the module docstring.

    ``requested`` is ``auto`` (decide) or ``batched`` (only size the groups).
    """
    k = max(1, min(PROBE_CLIENTS, clients))
    start = ModelState.of(function.model)
    loss = cross_entropy_loss("train")
    schedule = Schedule(steps=1, batch_size=batch_size, lr=0.0)
    splits = _probe_splits(tuple(input_shape), num_classes, batch_size, k, device)

    def serial() -> None:
        for split in splits:
            train(function, start, split, schedule, loss)

    def batched() -> None:
        train_batched(function, [start] * k, splits, schedule, loss)

    timing = requested == "auto" and device.type != "cuda"
    serial_s = batched_s = None
    if timing:
        serial()
        serial_s = timed(serial, device)
    saved_bytes = _saved_bytes(batched)  # also the warm-up
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        batched_s = timed(batched, device)
        group_bytes = torch.cuda.max_memory_allocated(device) - before
    else:
        batched_s = timed(batched, device) if timing else None
        state = payload_nbytes(start.params)
        # stacked state + gradients + momentum + updated parameters, and the buffers twice
        group_bytes = saved_bytes + k * (4 * state + 2 * payload_nbytes(start.buffers))
    client_bytes = max(1, -(-group_bytes // k))
    budget = budget_bytes if budget_bytes is not None else available_memory(device) // 2
    executor = "batched"
    if serial_s is not None and batched_s is not None:
        executor = "serial" if serial_s * SERIAL_MARGIN < batched_s else "batched"
    return Calibration(
        executor=executor,
        serial_s=serial_s,
        batched_s=batched_s,
        probe_clients=k,
        client_bytes=int(client_bytes),
        budget_bytes=int(budget),
        max_clients=max(1, int(budget // client_bytes)),
    )

"""End to end: ``mecsim run`` against a plain PyTorch FedAvg loop, both as whole processes.

The workload (issue 14): scikit-learn's digits, 20 clients with Dirichlet(0.3)
label skew, the cnn-small architecture, 30 rounds of 2 local epochs, batch 16,
SGD lr 0.1 momentum 0.5, the global model evaluated on the test set every
round. The plain loop is what a researcher would write without a simulator:
one client after another, ``torch.optim.SGD`` on shuffled mini-batches, a
sample-weighted average of the state dicts, no network, cost model, tables
or report. ``mecsim run`` does the same training with its full cost model and
writes the run directory (tables, report, plot).

Each pair of processes runs back to back (order alternating); the ratio is
taken from the medians of the wall times.

    python benchmarks/bench_vs_plain.py [--repeat 3] [--executor auto]
    python benchmarks/bench_vs_plain.py --plain     # the plain loop alone, in this process
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLIENTS, ALPHA, ROUNDS, EPOCHS, BATCH, LR, MOMENTUM, SEED = 20, 0.3, 30, 2, 16, 0.1, 0.5, 0

SCENARIO = f"""
name = "vs-plain"
seed = {SEED}
[data]
dataset = "digits"
partition = "dirichlet"
alpha = {ALPHA}
[model]
name = "cnn-small"
[algorithm]
name = "fedavg"
epochs = {EPOCHS}
batch_size = {BATCH}
lr = {LR}
momentum = {MOMENTUM}
[protocol]
kind = "compute_and_wait"
rounds = {ROUNDS}
eval_every = 1
[clients]
count = {CLIENTS}
"""


def plain_fedavg() -> float:
    """The plain loop; returns the final test accuracy."""
    import gzip
    import importlib.util

    import numpy as np
    import torch
    from torch import nn

    torch.manual_seed(SEED)
    rng = np.random.default_rng(SEED)
    sklearn_dir = Path(importlib.util.find_spec("sklearn").submodule_search_locations[0])
    with gzip.open(sklearn_dir / "datasets" / "data" / "digits.csv.gz") as f:
        data = np.loadtxt(f, delimiter=",")
    x = torch.tensor(data[:, :-1] / 16.0, dtype=torch.float32).view(-1, 1, 8, 8)
    y = torch.tensor(data[:, -1], dtype=torch.int64)
    order = rng.permutation(len(y))
    test, train = order[: len(y) // 5], order[len(y) // 5 :]
    mean, std = x[train].mean(), x[train].std()
    x = (x - mean) / std
    x_train, y_train, x_test, y_test = x[train], y[train], x[test], y[test]

    parts: list[list[int]] = [[] for _ in range(CLIENTS)]  # Dirichlet label skew
    for c in range(10):
        idx = rng.permutation(np.flatnonzero(y_train.numpy() == c))
        cuts = (np.cumsum(rng.dirichlet(np.full(CLIENTS, ALPHA))) * len(idx)).astype(int)[:-1]
        for client, piece in enumerate(np.split(idx, cuts)):
            parts[client] += piece.tolist()
    parts = [p if len(p) >= 2 else rng.choice(len(y_train), 2).tolist() for p in parts]

    def cnn_small() -> nn.Module:
        return nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(32 * 2 * 2, 64), nn.ReLU(), nn.Linear(64, 10),
        )  # fmt: skip

    model, global_model = cnn_small(), cnn_small()
    loss_fn = nn.CrossEntropyLoss()
    accuracy = 0.0
    for _ in range(ROUNDS):
        total = sum(len(p) for p in parts)
        average = {k: torch.zeros_like(v) for k, v in global_model.state_dict().items()}
        for part in parts:
            model.load_state_dict(global_model.state_dict())
            optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
            xs, ys = x_train[part], y_train[part]
            model.train()
            for _ in range(EPOCHS):
                for batch in torch.randperm(len(part)).split(BATCH):
                    optimizer.zero_grad()
                    loss_fn(model(xs[batch]), ys[batch]).backward()
                    optimizer.step()
            for k, v in model.state_dict().items():
                average[k] += v * (len(part) / total)
        global_model.load_state_dict(average)
        global_model.eval()
        with torch.no_grad():
            accuracy = (global_model(x_test).argmax(1) == y_test).float().mean().item()
    return accuracy


def timed_process(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--plain", action="store_true", help="run the plain loop here and exit")
    parser.add_argument("--repeat", type=int, default=3, help="paired runs (medians are compared)")
    parser.add_argument("--executor", default="auto", help="mecsim's execution.executor")
    parser.add_argument("--device", default="cpu", help="mecsim's execution.device")
    args = parser.parse_args()
    if args.plain:
        print(f"plain FedAvg: final test accuracy {plain_fedavg():.4f}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Path(tmp) / "vs_plain.toml"
        scenario.write_text(SCENARIO)
        plain = [sys.executable, __file__, "--plain"]
        times: dict[str, list[float]] = {"plain": [], "mecsim": []}
        for i in range(args.repeat):
            mecsim = [
                sys.executable, "-m", "mecsim", "run", str(scenario), "--no-progress",
                "--out", str(Path(tmp) / f"run{i}"),
                "--set", f"execution.executor={args.executor}",
                "--device", args.device,
            ]  # fmt: skip
            pair = [("plain", plain), ("mecsim", mecsim)]
            for name, command in pair if i % 2 == 0 else pair[::-1]:
                times[name].append(timed_process(command))
        summary = (Path(tmp) / "run0" / "summary.json").read_text()
    plain_s, mecsim_s = (statistics.median(times[k]) for k in ("plain", "mecsim"))
    print(f"plain loop  : {' '.join(f'{t:.2f}' for t in times['plain'])} s (median {plain_s:.2f})")
    print(
        f"mecsim run  : {' '.join(f'{t:.2f}' for t in times['mecsim'])} s (median {mecsim_s:.2f})"
    )
    print(f"mecsim / plain wall time: {mecsim_s / plain_s:.2f}x (target <= 0.5x)")
    run = json.loads(summary)
    print(
        f"mecsim executor: {run['executor']}, final generic accuracy {run['final_generic_acc']:.4f}"
    )


if __name__ == "__main__":
    main()

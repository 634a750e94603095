"""The quickstart scaled up, CPU against GPU: whole-process wall time, same events?

Each case runs ``mecsim run scenarios/quickstart.toml`` as its own process
(imports, CUDA start-up and writing included) on the CPU and on the GPU,
one after the other, and compares the two runs' events tables.

    python benchmarks/bench_device_quickstart.py --clients 200 1000 \\
        --set data.dataset=mnist-5k --set protocol.rounds=5
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd


def run(clients: int, device: str, out: Path, settings: list[str]) -> float:
    """Wall seconds of one whole ``mecsim run`` process."""
    command = [sys.executable, "-m", "mecsim", "run", "scenarios/quickstart.toml"]
    command += ["--set", f"clients.count={clients}", "--device", device, "--out", str(out)]
    for setting in settings:
        command += ["--set", setting]
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
    print((done.stdout + done.stderr).strip().splitlines()[-1], flush=True)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", nargs="+", type=int, default=[200, 1000])
    parser.add_argument("--set", action="append", default=[], dest="settings")
    parser.add_argument("--devices", nargs=2, default=["cpu", "cuda"])
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for clients in args.clients:
            seconds, events = {}, {}
            for device in args.devices:
                out = Path(tmp) / f"{device}-{clients}"
                seconds[device] = run(clients, device, out, args.settings)
                events[device] = pd.read_parquet(out / "events.parquet")
            first, second = args.devices
            rows.append(
                f"{clients:>7} {seconds[first]:>8.2f} {seconds[second]:>8.2f}"
                f" {seconds[first] / seconds[second]:>9.2f}x"
                f" {events[first].equals(events[second])!s:>16}"
            )
    print(f"settings: {' '.join(args.settings) or '(the quickstart as it is)'}")
    print(
        f"{'clients':>7} {args.devices[0] + ' s':>8} {args.devices[1] + ' s':>8}"
        f" {'speed-up':>10} {'events identical':>16}"
    )
    print("\n".join(rows))


if __name__ == "__main__":
    main()

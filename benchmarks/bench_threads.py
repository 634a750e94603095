"""``execution.threads``: the quickstart's whole process with ``auto``, one thread and one
thread per CPU, on an idle machine and beside a competing CPU-bound process.

Each configuration runs ``--repeat`` times, interleaved; the best wall time of each is
printed with its CPU time, and ``auto``'s ratio to the better of one thread and all
CPUs (the target: within 1.3x).

    python benchmarks/bench_threads.py --repeat 2
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_once(threads: str) -> tuple[float, float]:
    """(wall s, CPU s of the child) of one quickstart process with ``execution.threads``."""
    with tempfile.TemporaryDirectory() as tmp:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "mecsim",
                "run",
                str(ROOT / "scenarios" / "quickstart.toml"),
                "--no-progress",
                "--out",
                str(Path(tmp) / "run"),
                "--set",
                f"execution.threads={threads}",
            ],
            check=True,
            capture_output=True,
            env={k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"},
        )
        wall = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def measure(label: str, repeat: int) -> dict[str, tuple[float, float]]:
    cpus = str(len(os.sched_getaffinity(0)))
    settings = {"auto": "auto", "1 thread": "1", f"{cpus} threads": cpus}
    best: dict[str, tuple[float, float]] = {}
    for _ in range(repeat):
        for name, value in settings.items():
            wall, cpu = run_once(value)
            if name not in best or wall < best[name][0]:
                best[name] = (wall, cpu)
    print(f"{label}:")
    for name, (wall, cpu) in best.items():
        print(f"  {name:>10}: wall {wall:6.2f} s, CPU {cpu:6.2f} s")
    others = min(w for n, (w, _) in best.items() if n != "auto")
    print(f"  auto / best of the others: {best['auto'][0] / others:.2f}x (target <= 1.3x)")
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    print(
        f"{platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, "
        f"{datetime.date.today()}, python {platform.python_version()}"
    )
    measure("idle machine", args.repeat)
    competitor = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(1.0)
        measure("beside one CPU-bound process", args.repeat)
    finally:
        competitor.kill()


if __name__ == "__main__":
    main()

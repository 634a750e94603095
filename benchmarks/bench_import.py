"""Import time beyond torch: ``import mecsim.runs.runner, mecsim.commands.cli`` in a fresh
process against ``import torch`` alone, side by side (issue 45's target: at most 0.2 s).

Each repeat runs both processes back to back (order alternating); the figure is the
median over repeats of (mecsim process - torch process), whole-process wall time.

    python benchmarks/bench_import.py --repeat 5
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

TORCH = "import torch"
MECSIM = "import torch, mecsim.runs.runner, mecsim.commands.cli"
IN_PROCESS = (
    "import time, torch; t = time.perf_counter(); import mecsim.runs.runner, mecsim.commands.cli; "
    "print(time.perf_counter() - t)"
)
"""The same imports timed inside the process, after torch: free of the noise of two
whole-process times (torch alone takes about 3 s here, give or take 0.2)."""
HEAVY = ("pandas", "pyarrow", "matplotlib", "scipy", "ray", "sklearn", "torchvision", "mlxtend")


ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
"""Byte-code is written and read as after any first run (a shell that sets
PYTHONDONTWRITEBYTECODE would time the compiler instead: 0.17 s of mecsim's own import)."""


def wall(code: str) -> float:
    """Seconds a fresh interpreter takes to run ``code`` and exit."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=ENV)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    wall(MECSIM)  # warm the file cache, write the byte-code
    torch_s, mecsim_s = [], []
    for i in range(args.repeat):
        pair = [(TORCH, torch_s), (MECSIM, mecsim_s)]
        for code, times in pair if i % 2 == 0 else pair[::-1]:
            times.append(wall(code))
    beyond = statistics.median(m - t for m, t in zip(mecsim_s, torch_s, strict=True))
    inside = [
        float(subprocess.run([sys.executable, "-c", IN_PROCESS], capture_output=True, text=True,
                             env=ENV, check=True).stdout)
        for _ in range(args.repeat)
    ]  # fmt: skip
    print(f"import torch alone: median {statistics.median(torch_s):.3f} s")
    print(f"+ mecsim.runs.runner, mecsim.commands.cli: median {statistics.median(mecsim_s):.3f} s")
    print(f"beyond torch: median {beyond:.3f} s over {args.repeat} pairs (target <= 0.2 s)")
    print(f"beyond torch, timed in the process: median {statistics.median(inside):.3f} s")
    probe = f"import sys; {MECSIM}; print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=ENV)
    print(f"heavy modules imported: {loaded.stdout.strip() or 'none'}")


if __name__ == "__main__":
    main()

"""What the scenario headers say a full run takes, against a run now: each ``# time:``
line's command is run as written (into a temporary ``--out``), timed as a whole process,
and its stated personalized accuracy compared with the run's (``summary.json``).

The quick claims (``# quick:``, accuracy after a few rounds) are checked by the tests;
these full runs take minutes, so they are a benchmark, not a test.

    python benchmarks/bench_scenario_headers.py --only quickstart comet_digits
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIME = re.compile(
    r"^# time: (?P<cmd>mecsim .+?) -> about (?P<s>[\d.]+) s"
    r"(, personalized accuracy (?P<acc>[\d.]+))?$"
)


def claims() -> list[tuple[str, str, float, float | None]]:
    found = []
    for path in sorted((ROOT / "scenarios").glob("*.toml")):
        for line in path.read_text().splitlines():
            match = TIME.match(line)
            if match:
                acc = float(match["acc"]) if match["acc"] else None
                found.append((path.stem, match["cmd"], float(match["s"]), acc))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="scenario names (default: every one)")
    args = parser.parse_args()
    print(f"{platform.node()}, {os.cpu_count()} CPUs, {datetime.date.today()}")
    for name, command, stated_s, stated_acc in claims():
        if args.only and name not in args.only:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            argv = shlex.split(command)
            argv = [sys.executable, "-m", "mecsim", *argv[1:], "--out", str(Path(tmp) / "out")]
            started = time.perf_counter()
            subprocess.run(argv, cwd=ROOT, check=True, capture_output=True)
            wall = time.perf_counter() - started
            line = f"{name:<22} stated {stated_s:7.0f} s, measured {wall:7.1f} s ({wall / stated_s:.2f}x)"
            if stated_acc is not None:
                summary = json.loads((Path(tmp) / "out" / "summary.json").read_text())
                acc = summary["final_personal_acc"]
                line += f"; personalized accuracy stated {stated_acc}, measured {acc:.3f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()

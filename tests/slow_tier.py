"""Write ``tests/slow_tests.txt`` from measured durations: the fast tier is what fits a budget.

    python -m pytest -q --record-durations durations.json
    python tests/slow_tier.py durations.json [--budget-s 100]

Tests are taken fastest first into the fast tier until their seconds reach the budget;
the rest are listed (slowest first, each with its seconds) and ``conftest.py`` marks them
``slow``. The fastest test of each test file stays fast unless it takes over
``--file-cap-s`` (the Ray cluster's file: every test starts a cluster), so
``-m "not slow"`` still touches every file (and through them every module).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

OUT = Path(__file__).with_name("slow_tests.txt")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("durations", type=Path, help="JSON written by --record-durations")
    parser.add_argument("--budget-s", type=float, default=100.0)
    parser.add_argument("--file-cap-s", type=float, default=10.0)
    args = parser.parse_args()
    seconds: dict[str, float] = json.loads(args.durations.read_text())
    by_file: dict[str, list[str]] = defaultdict(list)
    for node in seconds:
        by_file[node.split("::")[0]].append(node)
    firsts = (min(nodes, key=seconds.__getitem__) for nodes in by_file.values())
    fast = {node for node in firsts if seconds[node] <= args.file_cap_s}
    spent = sum(seconds[n] for n in fast)
    for node in sorted(seconds, key=seconds.__getitem__):
        if node not in fast and spent + seconds[node] <= args.budget_s:
            fast.add(node)
            spent += seconds[node]
    slow = sorted(set(seconds) - fast, key=lambda n: -seconds[n])
    lines = [f"{node}  # {seconds[node]:.1f} s" for node in slow]
    header = (
        f"# Tests measured slow ({len(slow)} of {len(seconds)}; the other "
        f"{len(fast)} take {spent:.0f} s): written by tests/slow_tier.py, read by conftest.py\n"
    )
    OUT.write_text(header + "\n".join(lines) + "\n")
    print(f"fast tier: {len(fast)} tests, {spent:.0f} s measured; slow: {len(slow)} -> {OUT}")


if __name__ == "__main__":
    main()

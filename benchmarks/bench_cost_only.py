"""Cost-only at scale: one compute-and-wait round of many clients, in bulk and per client.

Each measurement is a whole Python process (``mecsim.run`` of the quickstart
in cost-only mode, uniform 20-200 samples per client, one round) so peak
memory is the process's own: wall time of the run, of the whole process, and
peak RSS, with ``execution.bulk_rounds`` on (numpy) and off (one SimPy process
per client). It also prints the peak RSS of importing what a run imports
(torch's CUDA wheel alone is about 0.5 GB) and whether both paths give the
same tables at ``--check`` clients.

    python benchmarks/bench_cost_only.py --clients 100000
    python benchmarks/bench_cost_only.py --scale   # the issue-34 targets, bulk only

``--scale`` runs, each as a whole process, one round of 1,000,000 clients
and 10 rounds of 100,000 clients, and prints their wall times and peak RSS
against the targets (30 s and 4 GB; 30 s), with the machine and the date.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from _child import run_child

CHILD = """
import json, resource, sys, time
started = time.perf_counter()
import mecsim
import mecsim.runs.runner
imported = time.perf_counter()
clients, bulk, rounds = int(sys.argv[1]), sys.argv[2] == "1", int(sys.argv[3])
if clients:
    mecsim.run(
        "scenarios/quickstart.toml",
        {
            "execution.cost_only": True,
            "execution.bulk_rounds": bulk,
            "clients.count": clients,
            "clients.num_samples": {"dist": "uniform", "low": 20, "high": 200},
            "protocol.rounds": rounds,
        },
        write=False,
        progress=False,
    )
done = time.perf_counter()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"import_s": imported - started, "run_s": done - imported, "peak": peak}))
"""

CHECK = """
import sys, mecsim, pandas as pd
settings = {
    "execution.cost_only": True,
    "clients.count": int(sys.argv[1]),
    "clients.num_samples": {"dist": "uniform", "low": 20, "high": 200},
    "protocol.rounds": 2,
}
runs = [
    mecsim.run("scenarios/quickstart.toml", {**settings, "execution.bulk_rounds": flag},
               write=False, progress=False)
    for flag in (False, True)
]
pd.testing.assert_frame_equal(runs[0].events, runs[1].events, check_exact=True)
print(len(runs[0].events))
"""


def measure(clients: int, bulk: bool, rounds: int = 1) -> dict[str, float]:
    return run_child(CHILD, str(clients), "1" if bulk else "0", str(rounds))


def scale() -> None:
    """The issue-34 targets, each a whole process: 10^6 clients x 1 round, 10^5 x 10."""
    import datetime
    import os
    import platform

    cpus = os.cpu_count()
    print(f"{platform.processor() or platform.machine()}, {cpus} CPUs, {datetime.date.today()}")
    for clients, rounds, wall, peak in ((1_000_000, 1, 30, 4), (100_000, 10, 30, None)):
        r = measure(clients, True, rounds)
        target = f"target < {wall} s" + (f", < {peak} GB" if peak else "")
        print(
            f"{clients:,} clients x {rounds} round(s), cost-only, bulk: run {r['run_s']:.1f} s, "
            f"process {r['process_s']:.1f} s, peak RSS {r['peak'] / 1e9:.2f} GB ({target})",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=100_000)
    parser.add_argument("--check", type=int, default=1_000, help="clients of the table check")
    parser.add_argument("--skip-per-client", action="store_true", help="bulk only")
    parser.add_argument("--scale", action="store_true", help="the 10^6- and 10^5-client targets")
    args = parser.parse_args()
    if args.scale:
        scale()
        return

    gb = 1e9
    baseline = measure(0, True)
    print(f"imports alone: {baseline['import_s']:.2f} s, peak RSS {baseline['peak'] / gb:.2f} GB")
    paths = [True] if args.skip_per_client else [True, False]
    results = {}
    for bulk in paths:
        r = results[bulk] = measure(args.clients, bulk)
        name = "bulk" if bulk else "per-client"
        print(
            f"{name:>10}, {args.clients} clients, 1 round: run {r['run_s']:.2f} s, "
            f"process {r['process_s']:.2f} s, peak RSS {r['peak'] / gb:.2f} GB "
            f"({(r['peak'] - baseline['peak']) / gb:.2f} GB beyond the imports)",
            flush=True,
        )
    if len(results) == 2:
        print(
            f"per-client / bulk: run {results[False]['run_s'] / results[True]['run_s']:.1f}x, "
            f"peak RSS {results[False]['peak'] / results[True]['peak']:.2f}x"
        )
    rows = subprocess.run(
        [sys.executable, "-c", CHECK, str(args.check)], check=True, capture_output=True, text=True
    ).stdout.split()[-1]
    print(f"identical events tables at {args.check} clients, 2 rounds ({rows} rows): True")


if __name__ == "__main__":
    main()

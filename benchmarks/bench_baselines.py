"""Every algorithm on the quickstart at Dirichlet(0.1), client momentum 0 and 0.9, 30 rounds:
the baseline table of ``docs/baselines.md``.

Each algorithm runs with the quickstart's ``[algorithm]`` table (2 epochs, batch 16, lr
0.05) and its own defaults for everything else, under compute-and-wait (or the first
protocol it declares), with what it needs: 200 public images for the algorithms that
distil on public data, a 20 % validation split where it selects models on one, and
PersFL's 29 FedAvg rounds before its local round, and FedBN on cnn-small's BatchNorm
variant. A run that stops with "training diverged" is reported as diverged. The
executor (batched) and the thread count (1) are pinned: runs on other executors or
thread counts write the same events table, but their float rounding differs, which
moves these 30-round accuracies (by up to about 0.02 for most algorithms).

    python benchmarks/bench_baselines.py                 # prints the table
    python benchmarks/bench_baselines.py --write docs/baselines.md
    python benchmarks/bench_baselines.py --only fedavg scaffold --momentum 0.9
    python benchmarks/bench_baselines.py --new-clients 4 --only fedavg ditto fedbabu scd pfedme

``--new-clients K`` instead runs the quickstart as it is (Dirichlet(0.5), momentum 0.9)
with K clients held out (``evaluation.new_clients``) under both adaptations and
tables the new clients' accuracy beside the trained clients'.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "quickstart.toml"
PINNED = [
    "output.progress=false",
    "execution.executor=batched",  # auto's timing probe would pick by machine load
    "execution.threads=1",  # "auto" follows the idle CPUs, and float rounding with it
]
"""Settings every run of this benchmark takes, so a table repeats on one machine."""


def settings(name: str, momentum: float) -> list[str]:
    """The quickstart at Dirichlet(0.1) with algorithm ``name`` and what it needs."""
    from mecsim.algorithms import ALGORITHMS
    from mecsim.commands.conformance import requirements

    algorithm = ALGORITHMS.get(name)
    kinds = sorted(algorithm.protocols or ["compute_and_wait"])
    kind = "compute_and_wait" if "compute_and_wait" in kinds else kinds[0]
    out = [
        f"algorithm.name={name}",
        f"algorithm.momentum={momentum}",
        "data.alpha=0.1",
        "protocol.rounds=30",
        f"protocol.kind={kind}",
        *PINNED,
    ]
    out += requirements(name, 30, public_size=200, val_fraction=0.2)
    if name == "fedbn":  # it keeps normalization layers local: the BatchNorm variant
        out.append("model.name=cnn-small-bn")
    return out


def run_one(name: str, momentum: float) -> dict[str, object]:
    import mecsim
    from mecsim.common.errors import MecsimError

    started = time.perf_counter()
    try:
        result = mecsim.run(SCENARIO, settings(name, momentum), write=False)
    except MecsimError as error:
        if "diverged" not in str(error):
            raise
        return {"algorithm": name, "momentum": momentum, "diverged": str(error).split(":")[1]}
    s = result.summary
    return {
        "algorithm": name,
        "momentum": momentum,
        "generic": s["final_generic_acc"],
        "personal": s["final_personal_acc"],
        "up_kb": s["bytes_up_per_round"] / 1024,
        "down_kb": s["bytes_down_per_round"] / 1024,
        "sim_s": s["sim_time_s"],
        "wall_s": time.perf_counter() - started,
    }


def new_client_row(name: str, held_out: int) -> dict[str, object]:
    """The quickstart with ``held_out`` new clients, adapted both ways."""
    import mecsim
    from mecsim.commands.conformance import requirements

    row: dict[str, object] = {"algorithm": name}
    for adaptation in ("algorithm", "finetune"):
        keys = [
            f"algorithm.name={name}",
            f"evaluation.new_clients={held_out}",
            f"evaluation.new_client_adaptation={adaptation}",
            *PINNED,
            *requirements(name, 30, public_size=200, val_fraction=0.2),
        ]
        s = mecsim.run(SCENARIO, keys, write=False).summary
        row["personal"] = s["final_personal_acc"]
        row[f"new:{adaptation}"] = s["new_client_acc"]
    return row


def render_new_clients(rows: list[dict[str, object]], held_out: int) -> str:
    lines = [
        f"| algorithm | trained clients' personalized acc | {held_out} new clients, own "
        "step | new clients, fine-tuned generic model |",
        "| --- | ---: | ---: | ---: |",
    ]
    for r in rows:
        cells = [fmt(r[k]) for k in ("personal", "new:algorithm", "new:finetune")]
        lines.append(f"| {r['algorithm']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def fmt(x: object) -> str:
    if isinstance(x, float):
        return "n/a" if math.isnan(x) else f"{x:.3f}"
    return str(x)


def render(rows: list[dict[str, object]]) -> str:
    lines = [
        "| algorithm | momentum | generic acc | personalized acc | up KiB/round | "
        "down KiB/round (received) | simulated s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        if "diverged" in r:
            lines.append(
                f"| {r['algorithm']} | {r['momentum']} | diverged ({r['diverged'].strip()}) | | | | |"
            )
            continue
        cells = [fmt(r[k]) for k in ("generic", "personal", "up_kb", "down_kb", "sim_s")]
        lines.append(f"| {r['algorithm']} | {r['momentum']} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    from mecsim.algorithms import ALGORITHMS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="algorithms (default: every one)")
    parser.add_argument("--momentum", nargs="*", type=float, default=[0.0, 0.9])
    parser.add_argument("--write", help="also write the table to this Markdown file")
    parser.add_argument("--new-clients", type=int, default=0, help="the new-client table")
    args = parser.parse_args()
    names = args.only or ALGORITHMS.names()
    header = f"{platform.node()}, {os.cpu_count()} CPUs, {datetime.date.today()}"
    print(header, flush=True)
    if args.new_clients:
        table = render_new_clients(
            [new_client_row(n, args.new_clients) for n in names], args.new_clients
        )
        print(table)
        if args.write:
            Path(args.write).write_text(table)
        return
    rows = []
    for name in names:
        for momentum in args.momentum:
            row = run_one(name, momentum)
            rows.append(row)
            print(
                render([row]).splitlines()[-1], f"({row.get('wall_s', 0):.1f} s wall)", flush=True
            )
    table = render(rows)
    print(table)
    if args.write:
        Path(args.write).write_text(table)


if __name__ == "__main__":
    main()

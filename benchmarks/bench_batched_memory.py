"""Batched memory without hand tuning: 1,000 clients training on mnist-5k.

Each measurement is a whole Python process (``mecsim.run`` of the quickstart
with ``data.dataset = "mnist-5k"`` split iid, 1,000 clients, one round) so its peak RSS
is the process's own. It compares the batched executor sized by its probe
(``execution.memory_budget_gb``, the default setting's mechanism with a
stated budget), the batched executor with every client in one vmapped group
(``max_batch_clients = clients``, what ``batched`` did before the probe), and
the serial executor, and checks that all three give the same events table
and accuracies.

    python benchmarks/bench_batched_memory.py [--clients 1000] [--budget-gb 1] [--limit-gb 2]
"""

from __future__ import annotations

import argparse
import json

from _child import run_child

CHILD = """
import hashlib, json, resource, sys
import mecsim
clients, executor, cap, budget = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
settings = {
    "data.dataset": "mnist-5k",
    "data.partition": "iid",
    "clients.count": clients,
    "protocol.rounds": 1,
    "execution.executor": executor,
}
if cap != "-":
    settings["execution.max_batch_clients"] = int(cap)
if budget != "-":
    settings["execution.memory_budget_gb"] = float(budget)
result = mecsim.run("scenarios/quickstart.toml", settings, write=False, progress=False)
calibration = result.summary["calibration"] or {}
print(json.dumps({
    "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    "events": hashlib.sha256(result.events.to_csv(index=False).encode()).hexdigest(),
    "accuracy": result.rounds[["generic_acc", "personal_acc"]].to_numpy().tolist(),
    "group": calibration.get("max_clients"),
}))
"""


def measure(clients: int, executor: str, cap: int | None, budget: float | None) -> dict:
    return run_child(
        CHILD,
        str(clients),
        executor,
        "-" if cap is None else str(cap),
        "-" if budget is None else str(budget),
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, default=1_000)
    parser.add_argument("--budget-gb", type=float, default=1.0, help="execution.memory_budget_gb")
    parser.add_argument("--limit-gb", type=float, default=2.0, help="the stated process budget")
    args = parser.parse_args()
    gib = 2**30
    runs = {
        "batched, sized by the probe": measure(args.clients, "batched", None, args.budget_gb),
        "batched, one group of all clients": measure(args.clients, "batched", args.clients, None),
        "serial": measure(args.clients, "serial", None, None),
    }
    for name, r in runs.items():
        group = f", groups of {r['group']} clients" if r["group"] else ""
        print(
            f"{name:>34}: peak RSS {r['peak'] / gib:.2f} GiB, process {r['process_s']:.1f} s{group}"
        )
    sized, whole = runs["batched, sized by the probe"], runs["batched, one group of all clients"]
    print(
        f"sized peak / stated budget of {args.limit_gb:g} GiB: {sized['peak'] / gib / args.limit_gb:.2f}x; "
        f"one group / sized: {whole['peak'] / sized['peak']:.2f}x"
    )
    same = len({(r["events"], json.dumps(r["accuracy"])) for r in runs.values()}) == 1
    print(f"identical events tables and accuracies across the three: {same}")


if __name__ == "__main__":
    main()

"""Start-up and writing: what ``mecsim run`` pays before it trains and after it has finished.

1. Imports. A recording process runs the quickstart through the CLI and notes,
   in order, every module imported on the main thread before the first round
   trains (the moment the writers' background thread starts), and what is
   imported after. Fresh timing processes then ``import torch`` and import
   that list as the CLI does (the runner with the cyclic GC paused, the rest
   after): the median time beyond ``import torch`` is the figure of target 2
   (at most 0.3 s for a scenario with no torchvision model or dataset).
2. Writing. Whole quickstart runs through the CLI, timing
   ``write_run_directory`` against the run's wall time (target: at most 5 %).

    python benchmarks/bench_startup.py --repeat 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile

HEAVY = ("pandas", "pyarrow", "matplotlib", "torchvision", "sklearn", "mlxtend", "ray", "scipy")
HEAVY += ("triton", "torch._dynamo", "sympy", "pydantic")

RECORD = """
import json, sys
import torch
torch_modules = set(sys.modules)
import mecsim.commands.cli, mecsim.runs.runner as runner
start_writers, seen = runner._import_writers_in_background, {}

def snapshot():
    seen["before"] = [m for m in sys.modules if m not in torch_modules]
    start_writers()

runner._import_writers_in_background = snapshot
code = mecsim.commands.cli.main(["run", "scenarios/quickstart.toml", "--no-progress",
                        "--set", "protocol.rounds=2", "--set", f"output.dir={sys.argv[1]}"])
assert code == 0, code
before = set(seen["before"])
after = [m for m in sys.modules if m not in torch_modules and m not in before]
print(json.dumps({"before": seen["before"], "after": after}))
"""

TIME_IMPORTS = """
import gc, importlib, json, sys, time
names = json.loads(sys.stdin.read())
started = time.perf_counter()
import torch
torch_done = time.perf_counter()
import mecsim.commands.cli
mecsim.commands.cli._import_run_machinery()
for name in names:
    if name not in sys.modules and not name.endswith("__main__"):
        try:
            importlib.import_module(name)
        except Exception:
            pass
done = time.perf_counter()
print(json.dumps({"torch_s": torch_done - started, "beyond_s": done - torch_done}))
"""

TIME_WRITING = """
import json, sys, time
import mecsim.commands.cli, mecsim.runs.runner as runner
write, spent = runner.write_run_directory, []

def timed(*args, **kwargs):
    t = time.perf_counter()
    write(*args, **kwargs)
    spent.append(time.perf_counter() - t)

runner.write_run_directory = timed
started = time.perf_counter()
code = mecsim.commands.cli.main(["run", "scenarios/quickstart.toml", "--no-progress",
                        "--set", f"output.dir={sys.argv[1]}", "--set", "output.overwrite=true"])
assert code == 0, code
print(json.dumps({"wall_s": time.perf_counter() - started, "write_s": spent[0]}))
"""


def child(code: str, *args: str, stdin: str = "") -> dict:
    done = subprocess.run(
        [sys.executable, "-c", code, *args], input=stdin, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as out:
        modules = child(RECORD, out)
    before, after = modules["before"], modules["after"]
    heavy = lambda names: sorted(m for m in names if m in HEAVY) or ["none"]  # noqa: E731
    print(f"imported before training: {len(before)} modules; heavy: {', '.join(heavy(before))}")
    print(f"imported after (writers' thread, tables): heavy: {', '.join(heavy(after))}")

    timings = [child(TIME_IMPORTS, stdin=json.dumps(before)) for _ in range(args.repeat)]
    torch_s = statistics.median(t["torch_s"] for t in timings)
    beyond = statistics.median(t["beyond_s"] for t in timings)
    print(
        f"import torch: {torch_s:.3f} s; beyond it, before training: {beyond:.3f} s "
        f"(target <= 0.3 s; medians of {args.repeat} fresh processes)"
    )

    with tempfile.TemporaryDirectory() as out:
        runs = [child(TIME_WRITING, out) for _ in range(args.repeat)]
    shares = [r["write_s"] / r["wall_s"] for r in runs]
    middle = sorted(runs, key=lambda r: r["write_s"] / r["wall_s"])[len(runs) // 2]
    print(
        f"quickstart: writing the run directory {middle['write_s']:.3f} s of "
        f"{middle['wall_s']:.2f} s = {statistics.median(shares):.1%} (target <= 5 %)"
    )


if __name__ == "__main__":
    main()

"""BLS's download savings over KAPC (paper 004, Table 3) and what makes them: each mu
with the relationship learning on (``algorithm.relation_steps = 1``, the scenario's) and
off (0, Algorithm 5's write-back alone), cumulative after 30 rounds (the scenario's
length) and 100 (the paper's), and per round in four windows, so their growth with
rounds shows. Nine 100-round runs of ``scenarios/kapc_bls_mnist5k.toml`` on the pinned
batched executor with 1 thread (about 5 min each on a CPU core; ``--jobs`` at a time).

    python benchmarks/bench_bls_download_savings.py --out runs/bls100 --jobs 2

Runs already in ``--out`` (a ``rounds.parquet``) are read, not run again.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "scenarios" / "kapc_bls_mnist5k.toml"
PINNED = ["protocol.rounds=100", "execution.executor=batched", "execution.threads=1",
          "output.progress=false", "output.overwrite=true"]  # fmt: skip
MUS = (0.3, 0.5, 0.7, 0.9)
WINDOWS = ((0, 10), (20, 30), (45, 55), (90, 100))


def runs() -> dict[str, list[str]]:
    """Run name -> its settings."""
    named = {"kapc": ["algorithm.name=kapc"]}
    for steps, suffix in ((1, ""), (0, "-norel")):
        for mu in MUS:
            named[f"mu{mu}{suffix}"] = [
                "algorithm.name=kapc_bls", f"algorithm.mu={mu}", f"algorithm.relation_steps={steps}"
            ]  # fmt: skip
    return named


def run(out: Path, name: str, settings: list[str]) -> None:
    if (out / name / "rounds.parquet").is_file():
        return
    sets = [a for s in [*PINNED, *settings] for a in ("--set", s)]
    command = [sys.executable, "-m", "mecsim", "run", str(SCENARIO), "--out", str(out / name)]
    subprocess.run([*command, *sets], check=True, capture_output=True)


def savings(out: Path) -> pd.DataFrame:
    """Download savings (%) of every BLS run against KAPC's."""
    kapc = pd.read_parquet(out / "kapc" / "rounds.parquet")["bytes_down"].to_numpy()
    rows = []
    for name in runs():
        if name == "kapc":
            continue
        bls = pd.read_parquet(out / name / "rounds.parquet")["bytes_down"].to_numpy()
        row = {"run": name}
        for r in (30, 100):
            row[f"after {r}"] = 100 * (1 - bls[:r].sum() / kapc[:r].sum())
        for a, b in WINDOWS:
            row[f"rounds {a + 1}-{b}"] = 100 * (1 - bls[a:b].sum() / kapc[a:b].sum())
        rows.append(row)
    return pd.DataFrame(rows).set_index("run").round(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/bls100"))
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args()
    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(lambda item: run(args.out, *item), runs().items()))
    print(savings(args.out).to_string())


if __name__ == "__main__":
    main()

"""``mecsim report``: KAPC's cost tables across runs (paper 004, Tables 5 and 6, Fig. 8).

One row per run, every figure derived from the run's events and rounds
tables (server memory from its summary, measured on the server state):

* Table 5 - mean time per round: upload, download, client compute and
  server, in seconds and percent of their sum (:func:`~.costs.time_split`);
* Table 6 - per round: MiB up and down (all clients of the round; MiB = 2^20
  bytes, the unit the paper calls MB: 10 ResNet-18 uploads are its 426.54 MB), client
  and server GFLOPs; server peak state memory; best mean accuracy (the best
  round's personalized accuracy);
* Fig. 8 - the mean number of leading layers each round's uploads carried,
  read back from their bytes (an upload of the first d layers has exactly
  their bytes; other uploads leave it undefined).

Two FLOP conventions stand side by side. mecsim's ``client_gflops`` are the
FLOPs actually run, forward and backward, counted by dispatch (torch's
counter: a multiply-accumulate is 2 FLOPs; losses' element-wise work where
metered). The paper counted with pytorch-OpCounter, which reports forward
multiply-accumulates of a model per sample; ``client_gmacs_paper`` is that
figure once per optimizer step of the round's local training (a batch-of-1
count taken once a step: 444.3 GMACs for FedAvg against Table 6's 424.13, within 5 %), and
``client_gmacs_samples`` once per trained sample (:func:`paper_client_macs`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from mecsim.analysis.columns import MIB
from mecsim.analysis.compare import RunRecord
from mecsim.analysis.costs import PHASES, summarize, time_split


def time_table(runs: Sequence[RunRecord]) -> pd.DataFrame:
    """Table 5: mean seconds per round of each phase and its percent of their sum."""
    rows = []
    for run in runs:
        split = time_split(run.events)
        total = sum(split.values())
        row: dict[str, object] = {"run": run.label, "time_s": total}
        for phase in PHASES:
            row[f"{phase}_s"] = split[phase]
            row[f"{phase}_pct"] = 100 * split[phase] / total if total else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def cost_table(runs: Sequence[RunRecord]) -> pd.DataFrame:
    """Table 6: per-round MiB up/down, client/server GFLOPs (:func:`~.costs.summarize` of the
    run's tables); server memory; best accuracy."""
    rows = []
    for run in runs:
        s = summarize(run.events, run.rounds)
        rows.append(
            {
                "run": run.label,
                "up_mib": s["bytes_up_per_round"] / MIB,
                "down_mib": s["bytes_down_per_round"] / MIB,
                "down_air_mib": s["bytes_down_air_per_round"] / MIB,
                "client_gflops": s["client_flops_per_round"] / 1e9,
                "client_gmacs_paper": paper_client_macs(run) / 1e9,
                "client_gmacs_samples": paper_client_macs(run, per="sample") / 1e9,
                "server_gflops": s["server_flops_per_round"] / 1e9,
                "server_memory_mib": run.summary.get("server_state_peak_bytes", math.nan) / MIB,
                "final_mean_acc": s["final_personal_acc"],
                "best_mean_acc": s["best_personal_acc"],
            }
        )
    return pd.DataFrame(rows)


def paper_client_macs(run: RunRecord, per: str = "step") -> float:
    """Client work per round in KAPC Table 6's convention: forward multiply-accumulates of
    one sample (pytorch-OpCounter's count of conv and linear layers on a batch-of-1
    input) counted once per optimizer step (``per="step"``: 416.6-444.3 GMACs for
    FedAvg's ResNet-18 setting against Table 6's 424.13), or once per trained sample
    (``per="sample"``: 33x Table 6, the batch size), summed over the clients with a
    computation in the round, averaged over rounds. NaN when the run directory has no
    clients table (runs written before it had the ``forward_macs_per_sample`` column)."""
    clients = run.clients
    if clients is None or "forward_macs_per_sample" not in clients:
        return math.nan
    events = run.events
    trained = events[(events["client"] >= 0) & events["phase"].str.startswith("compute:")]
    pairs = trained[["round", "client"]].drop_duplicates()
    table = clients.set_index("client")
    steps, batch = run.settings.get("algorithm.steps"), run.settings.get("algorithm.batch_size")
    num_train = table["num_train"].to_numpy()
    size = np.minimum(int(batch or 1), np.maximum(num_train, 1))
    epochs = int(run.settings.get("algorithm.epochs", 1))
    count = np.full(len(num_train), steps) if steps else epochs * -(-num_train // size)
    if per == "sample":
        count = count * size if steps else epochs * num_train
    per_client = pd.Series(count * table["forward_macs_per_sample"].to_numpy(), table.index)
    per_round = per_client.reindex(pairs["client"]).to_numpy()
    total = pd.Series(per_round, index=pairs["round"].to_numpy()).groupby(level=0).sum()
    return float(total.reindex(run.rounds["round"], fill_value=0).mean())


def uploaded_layers(events: pd.DataFrame, layer_bytes: Sequence[int]) -> pd.Series:
    """Per round, the mean number of leading layers the uploads carried (Fig. 8).

    ``layer_bytes``: each layer's bytes in model order. NaN for a round with
    an upload that is not a prefix of whole layers.
    """
    prefixes = {int(b): d for d, b in enumerate(np.cumsum([0, *layer_bytes]))}
    uploads = events[(events["direction"] == "up") & (events["role"] == "sender")]
    depth = uploads["bytes"].map(lambda b: prefixes.get(int(b), math.nan))
    return depth.groupby(uploads["round"]).agg(lambda s: s.mean(skipna=False))


def render(time: pd.DataFrame, cost: pd.DataFrame, layers: pd.DataFrame) -> str:
    """The three tables as Markdown."""
    lines = [
        "# mecsim cost report",
        "",
        "## Mean time per round (KAPC Table 5)",
        "",
        "Client phases are averaged over each round's clients; percent of the four phases' sum.",
        "",
        "| run | time (s) | upload s (%) | download s (%) | client s (%) | server s (%) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for _, r in time.iterrows():
        cells = [f"{r[f'{p}_s']:.3f} ({r[f'{p}_pct']:.2f})" for p in PHASES]
        lines.append(f"| {r['run']} | {r['time_s']:.3f} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Communication, computation and memory per round (KAPC Table 6)",
        "",
        "MiB = 2^20 bytes (the paper's MB) over all clients of a round. Client GFLOPs:",
        "mecsim's count (forward and backward FLOPs run, a multiply-accumulate = 2); client",
        "GMACs (paper): KAPC's convention (pytorch-OpCounter on one sample, counted once per",
        "optimizer step); per sample: the same count once per trained sample.",
        "Accuracy: the personalized accuracy (evaluation.personal_mean) of the last and of",
        "the best round.",
        "",
        "| run | up MiB | down MiB | client GFLOPs | client GMACs (paper) | per sample"
        " | server GFLOPs | server memory MiB | final acc | best acc |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for _, r in cost.iterrows():
        lines.append(
            f"| {r['run']} | {r['up_mib']:.3f} | {r['down_mib']:.3f} | {r['client_gflops']:.4f}"
            f" | {r['client_gmacs_paper']:.4f} | {r['client_gmacs_samples']:.4f}"
            f" | {r['server_gflops']:.6f}"
            f" | {r['server_memory_mib']:.3f} | {r['final_mean_acc']:.4f}"
            f" | {r['best_mean_acc']:.4f} |"
        )
    if not layers.empty:
        lines += [
            "",
            "## Mean uploaded layers per round (KAPC Fig. 8)",
            "",
            "| run | mean | min | max |",
            "| --- | ---: | ---: | ---: |",
        ]
        for run, series in layers.items():
            lines.append(
                f"| {run} | {series.mean():.2f} | {series.min():.2f} | {series.max():.2f} |"
            )
    return "\n".join(lines) + "\n"


def plot_layers(layers: pd.DataFrame, path: Path, write=None) -> list[Path]:
    """Mean uploaded layers against the round, one line per run (Fig. 8), each drawn in
    its own dashes and markers: runs whose depths coincide stay visible (``write``: see
    :func:`~.plots.save_figure`)."""
    import matplotlib.pyplot as plt

    from mecsim.analysis.plots import legend_below, line_style, save_figure

    fig, ax = plt.subplots(figsize=(6, 3.8), layout="constrained")
    for index, (run, series) in enumerate(layers.items()):
        ax.plot(series.index, series.values, label=str(run), **line_style(index, len(series)))
    ax.set_xlabel("round")
    ax.set_ylabel("mean uploaded layers")
    ax.xaxis.get_major_locator().set_params(integer=True)
    legend_below(fig, *ax.get_legend_handles_labels(), fontsize=7)
    return save_figure(fig, path, ("png",), dpi=120, write=write)

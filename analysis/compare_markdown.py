"""``compare.md``: the comparison table (:func:`~.compare.compare_runs`) as Markdown
sections, each a table of some of its columns, and a glossary of every column.

Bytes are shown in MiB (2^20 bytes) in every table, as in ``mecsim report``; the CSV
keeps bytes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import pandas as pd

from mecsim.analysis.columns import MIB, glossary
from mecsim.analysis.scheduling import SCHEDULING_COLUMNS

Cell = tuple[str, Callable[[pd.Series], str]]
"""A column of a Markdown table: its header and how a row of the comparison fills it."""


def fixed(column: str, digits: int = 2, scale: float = 1.0, suffix: str = "") -> Callable:
    """A cell showing ``column`` divided by ``scale`` with ``digits`` decimals (``-`` for a
    missing value: NaN or None)."""

    def cell(row: pd.Series) -> str:
        value = row.get(column, math.nan)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return "-"
        return f"{float(value) / scale:.{digits}f}{suffix}"

    return cell


def markdown_table(table: pd.DataFrame, cells: Sequence[Cell]) -> list[str]:
    """A pipe table: a row per run, its label first, then ``cells``."""
    lines = [
        "| run | " + " | ".join(header for header, _ in cells) + " |",
        "| --- |" + " ---: |" * len(cells),
    ]
    for _, row in table.iterrows():
        lines.append(f"| {row['run']} | " + " | ".join(fill(row) for _, fill in cells) + " |")
    return lines


def titled(title: str, intro: str, table: pd.DataFrame, cells: Sequence[Cell]) -> list[str]:
    """A section: its heading, ``intro`` (a line of Markdown per line) and its table."""
    return ["", f"## {title}", "", *intro.splitlines(), "", *markdown_table(table, cells)]


def _any(table: pd.DataFrame, column: str) -> bool:
    """Whether some run has a nonzero, known ``column``."""
    return column in table and bool((table[column].fillna(0) != 0).any())


def render_seeds(seeds: pd.DataFrame, targets: list[float]) -> str:
    """The variants' seed means with 95 % confidence half-widths, as Markdown."""
    columns = [f"pm_time_{t:g}" for t in targets] + [f"pm_speedup_{t:g}" for t in targets]
    columns += ["final_pm_acc", "energy_j", "bytes_up"]
    header = ["variant", "n"] + columns
    lines = [
        "",
        "## Seeds: mean ± 95 % confidence half-width (Student t)",
        "",
        "| " + " | ".join(header) + " |",
        "|" + " --- |" * len(header),
    ]
    for _, r in seeds.iterrows():
        cells = [str(r["variant"]), str(int(r["n"]))]
        for c in columns:
            mean, half = r.get(c, math.nan), r.get(f"{c}_ci95", math.nan)
            cells.append(
                "-"
                if math.isnan(mean)
                else f"{mean:.4g} ± {half:.2g}"
                if not math.isnan(half)
                else f"{mean:.4g}"
            )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _targets(table: pd.DataFrame, targets: list[float], baseline: str | None) -> list[str]:
    over = (
        f"the run with `{baseline}` and every other setting equal (its label is the "
        "`baseline` column of compare.csv)"
        if baseline
        else "nothing (no baseline: the runs differ in seed alone)"
    )
    lines = [
        "# mecsim comparison",
        "",
        "Simulated seconds until the personalized-model accuracy (weighted local test) first",
        "reaches each target, and the speedup over the run's baseline (Chen et al. 2023,",
        f"Table 4). Speedups are over {over}; `--baseline KEY=VALUE` picks another.",
        "`-`: target not reached.",
        "",
    ]
    cells: list[Cell] = [(f"PM {t:.0%} (s)", fixed(f"pm_time_{t:g}")) for t in targets]
    cells += [(f"speedup {t:.0%}", fixed(f"pm_speedup_{t:g}", suffix="x")) for t in targets]
    cells += [
        ("final PM acc", fixed("final_pm_acc", 4)),
        ("final GM acc", fixed("final_gm_acc", 4)),
    ]
    return lines + markdown_table(table, cells)


def costs_section(table: pd.DataFrame) -> list[str]:
    title = "Time, energy and bytes"
    intro = (
        "Simulated seconds to the end of the last round; joules of the whole run (clients'\n"
        "idle energy included, and shown on its own); MiB = 2^20 bytes, summed over clients\n"
        "and rounds."
    )
    cells: list[Cell] = [
        ("simulated s", fixed("sim_time_s")),
        ("idle s per client", fixed("idle_s_per_client")),
        ("energy J", fixed("energy_j")),
        ("of it idle J", fixed("idle_energy_j")),
        ("MiB up", fixed("bytes_up", scale=MIB)),
        ("MiB down", fixed("bytes_down", scale=MIB)),
    ]
    return titled(title, intro, table, cells)


def edges_section(table: pd.DataFrame) -> list[str]:
    """Backhaul and handovers, where some run has either (multi-cell, hierarchical)."""
    if not (_any(table, "bytes_backhaul") or _any(table, "handovers_per_round")):
        return []
    title = "Edges: backhaul and handovers"
    intro = (
        "Bytes and joules over the edge-cloud backhaul (summed over edges and rounds; the\n"
        "joules are part of the energy above), and handovers per round (all clients)."
    )
    cells: list[Cell] = [
        ("MiB backhaul", fixed("bytes_backhaul", 3, scale=MIB)),
        ("backhaul J", fixed("backhaul_energy_j", 3)),
        ("handovers/round", fixed("handovers_per_round")),
    ]
    return titled(title, intro, table, cells)


def communication_section(table: pd.DataFrame) -> list[str]:
    title = "Accuracy and communication"
    intro = (
        "MiB per direction (per round: the mean over rounds, summed over the round's clients;\n"
        "total: every transfer, the public split's one-time download included), seconds per\n"
        "round a client spends uploading and downloading, and the largest state a client and\n"
        "the server kept."
    )
    mib = [
        ("MiB up/round", "bytes_up_per_round"),
        ("MiB down/round", "bytes_down_per_round"),
        ("MiB up total", "bytes_up_total"),
        ("MiB down total", "bytes_down_total"),
        ("public MiB", "public_bytes_down"),
    ]
    cells: list[Cell] = [
        ("best PM acc", fixed("best_pm_acc", 4)),
        ("PM std", fixed("pm_acc_std", 4)),
        ("best GM acc", fixed("best_gm_acc", 4)),
        *((header, fixed(column, 3, scale=MIB)) for header, column in mib),
        ("public s", fixed("public_download_s", 3)),
        ("up s/round", fixed("upload_s_per_round", 3)),
        ("down s/round", fixed("download_s_per_round", 3)),
        ("client state MiB", fixed("client_state_peak_bytes", 3, scale=MIB)),
        ("server state MiB", fixed("server_state_peak_bytes", 3, scale=MIB)),
    ]
    return titled(title, intro, table, cells)


def scheduling_section(table: pd.DataFrame) -> list[str]:
    """What a scheduling study compares (:mod:`.scheduling`)."""
    title = "Scheduling"
    intro = (
        "Clients a round took, Jain's index of how evenly clients took part (1: equally),\n"
        "the clients' mean transmit power over their air time, energy per client\n"
        "(`summary.json`'s total, idle included), the share of a finite cell band the\n"
        "uploads used while any was on the air, a round's upload phase (first start to last\n"
        "end), the updates that reached the server a round, and the personalized accuracy\n"
        "averaged over the evaluated rounds."
    )
    headers = ("clients/round", "participation fairness", "mean tx power W", "J per client",
               "band utilization", "upload phase s", "updates/round", "mean PM acc")  # fmt: skip
    cells: list[Cell] = [(h, fixed(c, 3)) for h, c in zip(headers, SCHEDULING_COLUMNS, strict=True)]
    return titled(title, intro, table, cells)


def new_clients_section(table: pd.DataFrame) -> list[str]:
    """The new clients' results, where some run has new clients."""
    if not _any(table, "new_clients"):
        return []
    title = "New clients"
    intro = (
        "Clients held out of training that join after the last round: their mean accuracy\n"
        "after adapting and its spread over them, what joining cost one of them on average\n"
        "(MiB received, GFLOPs), and the seconds until the last had joined (one span).\n"
        "Each one's accuracy is the `new_client_accs` column of compare.csv."
    )
    cells: list[Cell] = [
        ("new clients", fixed("new_clients", 0)),
        ("accuracy", fixed("new_client_acc", 4)),
        ("std", fixed("new_client_acc_std", 4)),
        ("MiB per client", fixed("new_client_bytes_down_per_client", 3, scale=MIB)),
        ("GFLOPs per client", fixed("new_client_flops_per_client", 3, scale=1e9)),
        ("join s", fixed("new_client_join_s", 3)),
    ]
    return titled(title, intro, table, cells)


def render_markdown(
    table: pd.DataFrame, targets: list[float], baseline: str | None = None, columns: bool = True
) -> str:
    """The comparison as Markdown: time to target and speedups (over ``baseline``), costs,
    edges, communication, scheduling, new clients, and (``columns``) what each column
    means."""
    lines = _targets(table, targets, baseline)
    sections = (costs_section, edges_section, communication_section, scheduling_section,
                new_clients_section)  # fmt: skip
    for section in sections:
        lines += section(table)
    if columns:
        lines += glossary(list(table.columns))
    return "\n".join(lines) + "\n"

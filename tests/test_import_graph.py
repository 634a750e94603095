"""The floors of the house (docs/design.md, "The layers"): no runtime import runs back up.

Every import of a mecsim module, at module level or inside a function (imports
under ``if TYPE_CHECKING:`` are type-only and excluded), must go to the same
floor or a lower one. The package root ``mecsim`` (its ``__version__``, the API
facade) is loaded before any submodule and may be named anywhere.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"mecsim": "mecsim", "algorithms": "mecsim.algorithms", "channels": "mecsim.channels"}
PACKAGES["analysis"] = "mecsim.analysis"

FLOORS: list[tuple[str, ...]] = [
    # 0: leaves every floor may use
    (
        "mecsim.errors", "mecsim.rng", "mecsim.registry", "mecsim.config", "mecsim.state",
        "mecsim.devices", "mecsim.distributions", "mecsim.threads", "mecsim.plugins",
        "mecsim.client_table", "mecsim.gc_pause", "mecsim.interrupts", "mecsim.process",
    ),
    # 1: models, data, the physical layer, the trainer and the FLOP meter
    ("mecsim.models", "mecsim.data", "mecsim.channels", "mecsim.training", "mecsim.cost", "mecsim.geometry", "mecsim.mobility", "mecsim.handover"),
    ("mecsim.algorithms",),  # 2
    ("mecsim.executors",),  # 3
    # 4: what the clock asks and records, and the reports computed from the tables
    (
        "mecsim.network", "mecsim.network_config", "mecsim.link_checks", "mecsim.radio", "mecsim.recorder", "mecsim.evaluation", "mecsim.faults",
        "mecsim.newcomers", "mecsim.checkpoint", "mecsim.invariants", "mecsim.analysis",
    ),
    ("mecsim.protocols", "mecsim.simulation", "mecsim.scenario", "mecsim.sections", "mecsim.validation", "mecsim.sim_transfers", "mecsim.sim_compute", "mecsim.sim_server"),  # 5: the clock
    ("mecsim.runner", "mecsim.output", "mecsim.world", "mecsim.tables"),  # 6: scenario -> world -> simulation -> tables
    # 7: commands
    (
        "mecsim.api", "mecsim.cli", "mecsim.sweeps", "mecsim.comparison", "mecsim.describe",
        "mecsim.conformance", "mecsim.__main__", "mecsim.ray_sweeps", "mecsim.cli_parser",
    ),
]  # fmt: skip


def floor(module: str) -> int | None:
    """The floor of ``module``: that of its longest listed prefix."""
    best: tuple[int, int] | None = None
    for index, prefixes in enumerate(FLOORS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[1]:
                    best = (index, len(prefix))
    return None if best is None else best[0]


def module_name(path: Path) -> str:
    relative = path.relative_to(ROOT).with_suffix("")
    name = ".".join((PACKAGES[relative.parts[0]], *relative.parts[1:]))
    return name.removesuffix(".__init__")


def runtime_imports(path: Path) -> list[tuple[str, int]]:
    """(module, line) of every mecsim import outside ``if TYPE_CHECKING:`` blocks."""
    tree = ast.parse(path.read_text())
    type_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for inner in ast.walk(node)
    }
    found = []
    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mecsim"):
            found.append((node.module, node.lineno))
        elif isinstance(node, ast.Import):
            found += [(a.name, node.lineno) for a in node.names if a.name.startswith("mecsim")]
    return found


def sources() -> list[Path]:
    return sorted(p for folder in PACKAGES for p in (ROOT / folder).rglob("*.py"))


def test_every_module_has_a_floor():
    missing = [module_name(p) for p in sources() if floor(module_name(p)) is None]
    missing = [m for m in missing if m != "mecsim"]
    assert not missing, f"add these modules to a floor in FLOORS: {missing}"


def test_no_import_runs_back_up():
    upward = []
    for path in sources():
        me = module_name(path)
        mine = floor(me)
        for target, line in runtime_imports(path):
            theirs = floor(target)
            if target != "mecsim" and mine is not None and theirs is not None and theirs > mine:
                upward.append(f"{me}:{line} imports {target} (floor {mine} -> {theirs})")
    assert not upward, "\n".join(upward)

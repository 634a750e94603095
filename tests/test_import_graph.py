"""The floors of the house (docs/design.md, "The layers"): no runtime import runs back up.

Every import of a mecsim module, at module level or inside a function (imports
under ``if TYPE_CHECKING:`` are type-only and excluded), must go to the same
floor or a lower one. A floor is a folder of ``mecsim/`` (or one of the top-level
folders imported as ``mecsim.channels``, ``mecsim.algorithms``, ``mecsim.analysis``).
The package root ``mecsim`` (its ``__version__``, the API facade) is loaded before
any submodule and may be named anywhere. Module-level imports form no circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"mecsim": "mecsim", "algorithms": "mecsim.algorithms", "channels": "mecsim.channels"}
PACKAGES["analysis"] = "mecsim.analysis"

FLOORS: list[tuple[str, ...]] = [
    ("mecsim.common",),  # 0: leaves every floor may use
    (
        "mecsim.learning",
        "mecsim.channels",
        "mecsim.policies",
    ),  # 1: payloads, trainer, FLOP meter, models, data; physics; radio decisions
    ("mecsim.net",),  # 2: links, radios, cells, geometry, mobility, handover
    ("mecsim.algorithms",),  # 3: what a client and the server compute
    ("mecsim.executors",),  # 4: where client work runs
    ("mecsim.engine",),  # 5: the clock, its activities and ledger
    ("mecsim.protocols",),  # 6: activities composed into rounds
    ("mecsim.config",),  # 7: scenario files (every section's settings, validation)
    ("mecsim.analysis",),  # 8: reports and checks computed from the tables
    ("mecsim.runs",),  # 9: scenario -> world -> simulation -> tables -> run directory
    ("mecsim.commands", "mecsim.__main__"),  # 10: what a user calls
]


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


def module_level_imports(path: Path) -> set[str]:
    """The mecsim modules ``path`` imports when it is loaded (its top-level statements,
    ``TYPE_CHECKING`` blocks excepted), each resolved to a module file."""
    known = {module_name(p) for p in sources()}
    tree = ast.parse(path.read_text())
    found = set()
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("mecsim"):
            candidates = [f"{node.module}.{a.name}" for a in node.names] + [node.module]
        elif isinstance(node, ast.Import):
            candidates = [a.name for a in node.names if a.name.startswith("mecsim")]
        else:
            continue
        for name in candidates:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != "mecsim":
                found.add(name)
    return found


def test_no_circle_among_module_level_imports():
    graph = {module_name(p): module_level_imports(p) - {module_name(p)} for p in sources()}
    # a package's __init__ that re-exports its modules is the package: drop the edge
    # from a module to its own package (the child is loaded by its parent first)
    for me, targets in graph.items():
        targets -= {t for t in targets if me.startswith(t + ".")}
    state: dict[str, int] = {}
    circles = []

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                circles.append(" -> ".join([*trail[trail.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    assert not circles, "\n".join(circles)


def test_every_folder_says_what_lives_there_and_what_it_may_import():
    for init in sorted((ROOT / "mecsim").glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert "import" in doc.lower(), f"{init.relative_to(ROOT)}: say what the folder may import"

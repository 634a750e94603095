"""Every name the docs show imports, and the flat 0.1 module paths still do.

The README and ``docs/*.md`` show imports in code blocks (``from mecsim.x import Y``)
and dotted names in the text (``mecsim.protocols.PROTOCOLS``): each must resolve.
Plug-ins written against the paths before the layer folders (``mecsim.state``,
``mecsim.devices``) keep working: the old path is the very module at the new one.
"""

from __future__ import annotations

import ast
import importlib
import re
import sys
import warnings
from pathlib import Path

import pytest

from mecsim.common.moved import new_name

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
GENERATED = {"reference.md"}  # settings, not module paths


def code_imports() -> set[tuple[str, str | None]]:
    """(module, name) of every mecsim import in the docs' Python blocks."""
    found: set[tuple[str, str | None]] = set()
    for doc in DOCS:
        for block in re.findall(r"```python\n(.*?)```", doc.read_text(), re.S):
            for node in ast.walk(ast.parse(block)):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("mecsim"):
                    found |= {(node.module, a.name) for a in node.names}
                elif isinstance(node, ast.Import):
                    found |= {(a.name, None) for a in node.names if a.name.startswith("mecsim")}
    return found


def dotted_names() -> set[str]:
    """Every ``mecsim.a.b`` named in backticks in the docs' text."""
    found: set[str] = set()
    for doc in DOCS:
        if doc.name not in GENERATED:
            found |= set(re.findall(r"`(mecsim(?:\.\w+)+)`", doc.read_text()))
    return found - {"mecsim.plugins"}  # the entry-point group's name, not a module


def resolve(dotted: str) -> object:
    """The module or attribute ``dotted`` names (the longest importable prefix, then
    attributes)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise ModuleNotFoundError(dotted)


def test_the_docs_show_imports_and_the_scan_finds_them():
    assert ("mecsim.algorithms.base", "AlgorithmSettings") in code_imports()
    assert "mecsim.protocols.PROTOCOLS" in dotted_names()


@pytest.mark.parametrize("module,name", sorted(code_imports(), key=str))
def test_every_import_the_docs_show_works(module, name):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # the docs show the new paths
        imported = importlib.import_module(module)
    if name is not None:
        assert hasattr(imported, name), f"{module} has no {name}"


@pytest.mark.parametrize("dotted", sorted(dotted_names()))
def test_every_dotted_name_in_the_docs_resolves(dotted):
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # the docs show the new paths
        resolve(dotted)


@pytest.mark.parametrize(
    "old,new,name",
    [
        ("mecsim.state", "mecsim.learning.state", "ModelState"),
        ("mecsim.training", "mecsim.learning.training", "Loss"),
        ("mecsim.devices", "mecsim.learning.devices", "DEVICES"),
        ("mecsim.models.layers", "mecsim.learning.models.layers", "Layer"),
        ("mecsim.data", "mecsim.learning.data", "DATASETS"),
        ("mecsim.rng", "mecsim.common.rng", "numpy_rng"),
        ("mecsim.errors", "mecsim.common.errors", "ConfigError"),
        ("mecsim.registry", "mecsim.common.registry", "Registry"),
        ("mecsim.recorder", "mecsim.engine.recorder", "BYTE_FLOWS"),
    ],
)
def test_a_plugin_written_against_the_flat_paths_still_imports(old, new, name):
    for alias in [m for m in sys.modules if m == old or old.startswith(m + ".")]:
        if new_name(alias) is not None:
            sys.modules.pop(alias)  # as in a fresh process: the old paths not yet seen
    with pytest.warns(DeprecationWarning, match=r"moved to mecsim\.(learning|common|engine)\b"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert getattr(module, name) is getattr(importlib.import_module(new), name)


def test_the_public_api_stays_at_the_root():
    import mecsim

    for name in ("run", "load", "compare", "sweep", "load_scenario"):
        assert callable(getattr(mecsim, name))
    from mecsim.algorithms import ALGORITHMS
    from mecsim.learning.models import MODELS
    from mecsim.protocols import PROTOCOLS

    assert "fedavg" in ALGORITHMS and "cnn-small" in MODELS and "compute_and_wait" in PROTOCOLS

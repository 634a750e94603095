"""Module paths from before the layer folders (mecsim 0.1's flat package) still import.

A plug-in or script written against the old paths (``from mecsim.state import
ModelState``, ``from mecsim.devices import DEVICES``) gets the very module that now
lives in its layer folder, and one ``DeprecationWarning`` naming the new path. No
module is loaded twice: ``mecsim.models.layers`` *is* ``mecsim.learning.models.layers``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

MOVED = {
    "mecsim.errors": "mecsim.common.errors",
    "mecsim.rng": "mecsim.common.rng",
    "mecsim.registry": "mecsim.common.registry",
    "mecsim.threads": "mecsim.common.threads",
    "mecsim.gc_pause": "mecsim.common.gc_pause",
    "mecsim.interrupts": "mecsim.common.interrupts",
    "mecsim.plugins": "mecsim.common.plugins",
    "mecsim.distributions": "mecsim.common.distributions",
    "mecsim.state": "mecsim.learning.state",
    "mecsim.training": "mecsim.learning.training",
    "mecsim.cost": "mecsim.learning.cost",
    "mecsim.devices": "mecsim.learning.devices",
    "mecsim.models": "mecsim.learning.models",
    "mecsim.data": "mecsim.learning.data",
    "mecsim.network": "mecsim.net.network",
    "mecsim.network_config": "mecsim.net.settings",
    "mecsim.radio": "mecsim.net.radio",
    "mecsim.link_checks": "mecsim.net.link_checks",
    "mecsim.geometry": "mecsim.net.geometry",
    "mecsim.mobility": "mecsim.net.mobility",
    "mecsim.handover": "mecsim.net.handover",
    "mecsim.simulation": "mecsim.engine.simulation",
    "mecsim.sim_compute": "mecsim.engine.compute",
    "mecsim.sim_server": "mecsim.engine.server",
    "mecsim.sim_transfers": "mecsim.engine.transfers",
    "mecsim.process": "mecsim.engine.process",
    "mecsim.recorder": "mecsim.engine.recorder",
    "mecsim.checkpoint": "mecsim.engine.checkpoint",
    "mecsim.evaluation": "mecsim.engine.evaluation",
    "mecsim.newcomers": "mecsim.engine.newcomers",
    "mecsim.faults": "mecsim.engine.faults",
    "mecsim.scenario": "mecsim.config.scenario",
    "mecsim.sections": "mecsim.config.sections",
    "mecsim.validation": "mecsim.config.validation",
    "mecsim.client_table": "mecsim.config.client_table",
    "mecsim.runner": "mecsim.runs.runner",
    "mecsim.world": "mecsim.runs.world",
    "mecsim.tables": "mecsim.runs.tables",
    "mecsim.output": "mecsim.runs.output",
    "mecsim.cli": "mecsim.commands.cli",
    "mecsim.cli_parser": "mecsim.commands.parser",
    "mecsim.api": "mecsim.commands.api",
    "mecsim.sweeps": "mecsim.commands.sweeps",
    "mecsim.ray_sweeps": "mecsim.commands.ray_sweeps",
    "mecsim.conformance": "mecsim.commands.conformance",
    "mecsim.describe": "mecsim.commands.describe",
    "mecsim.comparison": "mecsim.commands.comparison",
    "mecsim.invariants": "mecsim.analysis.invariants",
}
"""Old module path -> where the module lives now."""


def new_name(old: str) -> str | None:
    """Where module ``old`` lives now (a submodule of a moved package too), or None."""
    for prefix, target in MOVED.items():
        if old == prefix or old.startswith(prefix + "."):
            return target + old[len(prefix) :]
    return None


class MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path first and hands back the module at its new one."""

    def find_spec(self, fullname: str, path=None, target=None):  # noqa: ANN001
        new = new_name(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=False)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = new_name(spec.name)
        assert new is not None
        if spec.name in MOVED:  # warn once per old path a user named, not per submodule
            warnings.warn(
                f"{spec.name} moved to {new}; import it from there", DeprecationWarning, 3
            )
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """The module ran at its new path already."""


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, MovedModuleFinder())

"""Plug-ins: modules that register models, algorithms, datasets, devices or protocols.

Two ways in: ``mecsim run --import mypkg.mymodule`` (repeatable; a ``.py``
path works too), and installed packages that declare an entry point in the
group ``mecsim.plugins``, loaded the first time any registry is read::

    [project.entry-points."mecsim.plugins"]
    mypkg = "mypkg.mecsim_plugin"

Importing a plug-in module runs its ``@ALGORITHMS.register(...)`` (etc.)
decorators; nothing else is needed.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points
from pathlib import Path
from types import TracebackType

from mecsim.common.errors import ConfigError

GROUP = "mecsim.plugins"
"""The entry-point group installed packages register their plug-in modules under."""

log = logging.getLogger(__name__)
_entry_points_loaded = False
_modules: set[str] = set()
"""Names of the plug-in modules (and entry-point packages) loaded in this process."""


def load_entry_points() -> list[str]:
    """Import every installed plug-in (once per process); return their names. A plug-in
    that fails to import is skipped with a warning, so it cannot break mecsim."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return []
    _entry_points_loaded = True
    loaded = []
    for point in entry_points(group=GROUP):
        _modules.add(point.value.split(":")[0].split(".")[0])
        try:
            point.load()
        except (Exception, SystemExit) as error:  # a broken third-party package
            what = f"sys.exit({error.code})" if isinstance(error, SystemExit) else error
            log.warning("skipped the mecsim plug-in %r (%s): %s", point.name, point.value, what)
            continue
        loaded.append(point.name)
    return loaded


def import_module(name: str):
    """Import a plug-in by module name (the working directory is searched first) or by
    the path of a ``.py`` file."""
    if name.endswith(".py"):
        path = Path(name)
        if not path.is_file():
            raise ConfigError("--import", f"file not found: {name}")
        loaded = sys.modules.get(path.stem)
        if loaded is not None and getattr(loaded, "__file__", None) == str(path.resolve()):
            return loaded  # imported already (registering twice would be refused)
        _modules.add(path.stem)
        spec = importlib.util.spec_from_file_location(path.stem, path.resolve())
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        try:
            spec.loader.exec_module(module)
        except Exception as error:
            sys.modules.pop(path.stem, None)
            raise ConfigError(
                "--import", f"{name} failed: {type(error).__name__}: {error}"
            ) from None
        return module
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    _modules.add(name)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        raise ConfigError(
            "--import",
            f"cannot import {name!r} ({error}); run from its directory, add it to "
            "PYTHONPATH, or give the .py file's path",
        ) from None
    except Exception as error:
        raise ConfigError(
            "--import", f"importing {name!r} failed: {type(error).__name__}: {error}"
        ) from None


def load_plugins(imports: Sequence[str] = ()) -> None:
    """Installed plug-ins, then the ``--import`` modules in order."""
    load_entry_points()
    for name in imports:
        import_module(name)


def blame(traceback: TracebackType | None) -> str | None:
    """Where a plug-in raised: ``"module.function() line N"`` of the innermost frame of
    a traceback that runs a plug-in's code, or None if no plug-in frame is in it."""
    found = None
    while traceback is not None:
        frame = traceback.tb_frame
        module = str(frame.f_globals.get("__name__", ""))
        if module in _modules or module.split(".")[0] in _modules:
            found = f"{module}.{frame.f_code.co_name}() line {traceback.tb_lineno}"
        traceback = traceback.tb_next
    return found

"""Name -> object registries for algorithms, models, datasets, partitions, devices."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from collections.abc import Callable
from typing import Generic, TypeVar

from mecsim.common.errors import UnknownNameError

T = TypeVar("T")


def _load_plugins() -> None:
    """Installed plug-ins register before any name is looked up (once per process)."""
    from mecsim.common.plugins import load_entry_points

    load_entry_points()


class Registry(Generic[T]):
    """A registry of named objects of one kind.

    ``kind`` names the registry in error messages (``"algorithm"``) and
    ``field`` is the scenario key that selects from it (``"algorithm.name"``).
    ``package``, if given, holds the modules that register into it, module
    ``package.NAME`` registering ``NAME``: a name is imported when first looked up
    (its own module, else the whole package), so a run imports the one algorithm it
    uses, not all of them; asking for every name imports every module.
    """

    def __init__(self, kind: str, field: str, package: str | None = None) -> None:
        self.kind = kind
        self.field = field
        self.package = package
        self._items: dict[str, T] = {}
        self._descriptions: dict[str, str] = {}
        self._all_loaded = package is None

    def register(self, name: str, description: str = "") -> Callable[[T], T]:
        """Decorator: register ``obj`` under ``name`` (names are unique)."""

        def decorator(obj: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self._items[name] = obj
            doc = description or (getattr(obj, "__doc__", None) or "").strip()
            self._descriptions[name] = doc.splitlines()[0] if doc else ""
            return obj

        return decorator

    def add(self, name: str, obj: T, description: str = "") -> T:
        """Register ``obj`` under ``name`` without decorator syntax."""
        return self.register(name, description)(obj)

    def remove(self, name: str) -> None:
        """Forget ``name`` (a notebook reloading its plug-in registers it again)."""
        self._items.pop(name, None)
        self._descriptions.pop(name, None)

    def _load(self, name: object) -> None:
        """Import the module that registers ``name``: its own, else every one."""
        _load_plugins()
        if name in self._items or self._all_loaded:
            return
        own = f"{self.package}.{name}"
        if isinstance(name, str) and name.isidentifier() and importlib.util.find_spec(own):
            importlib.import_module(own)
        if name not in self._items:
            self._load_all()

    def _load_all(self) -> None:
        """Import every module of the package (once)."""
        _load_plugins()
        if self._all_loaded:
            return
        package = importlib.import_module(str(self.package))
        for module in pkgutil.iter_modules(package.__path__):
            importlib.import_module(f"{self.package}.{module.name}")
        self._all_loaded = True

    def get(self, name: str) -> T:
        """Return the object registered as ``name``; unknown names raise a clear error."""
        self._load(name)
        try:
            return self._items[name]
        except KeyError:
            raise UnknownNameError(self.field, self.kind, name, self.names()) from None

    def __contains__(self, name: object) -> bool:
        self._load(name)
        return name in self._items

    def names(self) -> list[str]:
        """Registered names, sorted."""
        self._load_all()
        return sorted(self._items)

    def describe(self) -> dict[str, str]:
        """Name -> one-line description, sorted by name."""
        return {name: self._descriptions[name] for name in self.names()}

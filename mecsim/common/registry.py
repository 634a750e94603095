"""Name -> object registries for algorithms, models, datasets, partitions, devices."""

from __future__ import annotations

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
    """

    def __init__(self, kind: str, field: str) -> None:
        self.kind = kind
        self.field = field
        self._items: dict[str, T] = {}
        self._descriptions: dict[str, str] = {}

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

    def get(self, name: str) -> T:
        """Return the object registered as ``name``; unknown names raise a clear error."""
        _load_plugins()
        try:
            return self._items[name]
        except KeyError:
            raise UnknownNameError(self.field, self.kind, name, self.names()) from None

    def __contains__(self, name: object) -> bool:
        _load_plugins()
        return name in self._items

    def names(self) -> list[str]:
        """Registered names, sorted."""
        _load_plugins()
        return sorted(self._items)

    def describe(self) -> dict[str, str]:
        """Name -> one-line description, sorted by name."""
        return {name: self._descriptions[name] for name in self.names()}

"""Objects report the public module they are imported from, not the private one they live in.

``sessionledger.FileStore`` reads better in a traceback or a repr than
``sessionledger.eventlog._filestore.FileStore``. Functions, exceptions and plain classes are
renamed; msgspec structs, dataclasses and pydantic models keep their defining module, because
their string annotations are resolved in that module's namespace.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Iterable
from types import ModuleType

import msgspec


def _renamable(obj: object) -> bool:
    if inspect.isfunction(obj):
        return True
    if not inspect.isclass(obj):
        return False
    if issubclass(obj, msgspec.Struct) or dataclasses.is_dataclass(obj):
        return False
    return not any(base.__module__.startswith("pydantic") for base in obj.__mro__)


def _rename(obj: object, module: str, package: str) -> None:
    current = getattr(obj, "__module__", "") or ""
    if _renamable(obj) and current.startswith(f"{package}."):
        obj.__module__ = module


def publish(*packages: ModuleType, facade: str, names: Iterable[str]) -> None:
    """Give each package's exports that package's name, then the facade's exports the facade's."""
    for package in packages:
        for name in getattr(package, "__all__", ()):
            if name in vars(package):  # lazily loaded names are left to load on their own
                _rename(vars(package)[name], package.__name__, package.__name__)
    facade_ns = {
        name: getattr(package, name)
        for package in packages
        for name in names
        if name in vars(package)
    }
    for obj in facade_ns.values():
        _rename(obj, facade, facade)

"""The examples in the packages' docstrings run and print what they say."""

from __future__ import annotations

import doctest
import importlib
import pkgutil
from types import ModuleType

import pytest

PACKAGES = (
    "sessionledger",
    "sessionledger.eventlog",
    "sessionledger.projections",
    "sessionledger.replay",
    "sessionledger.tools",
)
SKIP = (
    "sessionledger.tools.bench",
    "sessionledger.tools.soak",
    "sessionledger.tools.__main__",
    "sessionledger.tools.cli.__main__",
)


def _modules() -> list[str]:
    names = []
    for package in PACKAGES:
        names.append(package)
        module = importlib.import_module(package)
        for info in pkgutil.walk_packages(module.__path__, prefix=f"{package}."):
            if not info.name.startswith(SKIP):
                names.append(info.name)
    return names


def _with_examples(name: str) -> ModuleType | None:
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    return module if any(t.examples for t in finder.find(module)) else None


@pytest.mark.parametrize("name", [n for n in _modules() if _with_examples(n) is not None])
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
    assert result.attempted > 0

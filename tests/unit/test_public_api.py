"""Each package's ``__all__``: a sorted tuple that names exactly what the package exports."""

from __future__ import annotations

import importlib
import types

import pytest

PACKAGES = (
    "sessionledger",
    "sessionledger.eventlog",
    "sessionledger.eventlog.backend",
    "sessionledger.eventlog.codec",
    "sessionledger.eventlog.preview",
    "sessionledger.projections",
    "sessionledger.replay",
    "sessionledger.tools",
)


def sort_key(name: str) -> tuple[int, str]:
    """ruff's RUF022 order: SCREAMING_CASE, then CamelCase, then everything else."""
    if name.isupper():
        return (0, name)
    if name[:1].isupper():
        return (1, name)
    return (2, name)


def test_sort_key_matches_the_documented_order() -> None:
    names = ["apply", "Header", "ZERO_HASH", "BaseStore", "A_B", "fold"]
    assert sorted(names, key=sort_key) == [
        "A_B",
        "ZERO_HASH",
        "BaseStore",
        "Header",
        "apply",
        "fold",
    ]


@pytest.mark.parametrize("package", PACKAGES)
def test_all_is_a_sorted_tuple_without_duplicates(package: str) -> None:
    module = importlib.import_module(package)
    exported = module.__all__
    assert isinstance(exported, tuple)
    assert all(isinstance(name, str) for name in exported)
    assert len(set(exported)) == len(exported)
    assert list(exported) == sorted(exported, key=sort_key)


@pytest.mark.parametrize("package", PACKAGES)
def test_every_name_resolves(package: str) -> None:
    module = importlib.import_module(package)
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert missing == []


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_is_in_all(package: str) -> None:
    module = importlib.import_module(package)
    public = {
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and not isinstance(value, types.ModuleType)
        and name != "annotations"  # from __future__
    }
    assert sorted(public - set(module.__all__)) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_star_import_gives_all(package: str) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {package} import *", namespace)
    namespace.pop("__builtins__")
    assert set(namespace) == set(importlib.import_module(package).__all__)


def test_plumbing_is_not_in_the_application_surface() -> None:
    """What the sibling packages need lives in ``codec`` and ``backend``, not in ``eventlog``."""
    eventlog = importlib.import_module("sessionledger.eventlog")
    for name in (
        "sessionledger.eventlog.backend",
        "sessionledger.eventlog.codec",
        "sessionledger.eventlog.preview",
    ):
        plumbing = set(importlib.import_module(name).__all__)
        # reading and checking a whole log is for applications too
        shared = plumbing & set(eventlog.__all__) - {"decode_log", "verify_chain"}
        assert shared == set(), name


@pytest.mark.parametrize(
    "package",
    [
        "sessionledger.eventlog",
        "sessionledger.eventlog.backend",
        "sessionledger.eventlog.codec",
        "sessionledger.eventlog.preview",
    ],
)
def test_public_items_have_docstrings(package: str) -> None:
    module = importlib.import_module(package)
    undocumented = [
        name
        for name in module.__all__
        if isinstance(getattr(module, name), type | types.FunctionType)
        and not (getattr(module, name).__doc__ or "").strip()
    ]
    assert undocumented == []

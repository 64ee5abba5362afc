"""The layering rule: ``tools -> replay -> projections -> eventlog``, checked on every import.

Every ``.py`` file of the four packages is parsed with :mod:`ast`; every ``import`` and
``from ... import`` (relative ones resolved, function-level ones included) is checked. The
packages install as ``sessionledger.<part>``; nothing imports a part by its bare folder name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOP = "sessionledger"
PACKAGES = ("eventlog", "projections", "replay", "tools")
FORBIDDEN: dict[str, frozenset[str]] = {
    "eventlog": frozenset({"projections", "replay", "tools"}),
    "projections": frozenset({"replay", "tools"}),
    "replay": frozenset({"tools"}),
    "tools": frozenset(),
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([TOP, *parts] if parts[0] in PACKAGES else parts)


def imported_modules(
    source: bytes, name: str, *, is_package: bool = False
) -> list[tuple[int, str]]:
    """Every module the module ``name`` imports (absolute names), with line numbers, in order."""
    tree = ast.parse(source, filename=name)
    package = name.split(".") if is_package else name.split(".")[:-1]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if not node.level:
                found.append((node.lineno, node.module or ""))
                continue
            up = node.level - 1
            assert up <= len(package), f"{name}:{node.lineno}: relative import beyond the top"
            base = package[: len(package) - up]
            if node.module:
                found.append((node.lineno, ".".join([*base, node.module])))
            else:  # ``from .. import x`` imports the module (or package) ``x``
                found.extend((node.lineno, ".".join([*base, a.name])) for a in node.names)
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            arg = node.args[0]
            if (
                called in ("import_module", "__import__")
                and isinstance(arg, ast.Constant)
                and isinstance(arg.value, str)
            ):
                found.append((node.lineno, arg.value))
    return sorted(found)


def file_imports(path: Path) -> list[tuple[int, str]]:
    return imported_modules(
        path.read_bytes(), module_name(path), is_package=path.name == "__init__.py"
    )


def python_files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def test_every_package_has_python_files() -> None:
    for package in PACKAGES:
        assert python_files(package), package


@pytest.mark.parametrize("package", PACKAGES)
def test_layering(package: str) -> None:
    violations = [
        f"{path.relative_to(ROOT)}:{line}: imports {target}"
        for path in python_files(package)
        for line, target in file_imports(path)
        if target.split(".")[0] == TOP
        and target.split(".")[1:2]
        and target.split(".")[1] in FORBIDDEN[package]
    ]
    assert violations == []


@pytest.mark.parametrize("package", [*PACKAGES, "tests"])
def test_nothing_imports_a_bare_part(package: str) -> None:
    """``import eventlog`` would load a second copy of the package beside ``sessionledger.eventlog``."""
    violations = [
        f"{path.relative_to(ROOT)}:{line}: imports {target}"
        for path in python_files(package)
        for line, target in file_imports(path)
        if target.split(".")[0] in PACKAGES
    ]
    assert violations == []


def test_checker_sees_relative_function_level_and_dynamic_imports() -> None:
    """The checker itself: a planted violation of each kind is found."""
    source = (
        b"import os\n"
        b"from .. import replay\n"
        b"from ..projections import history\n"
        b"from ._codec import x\n"
        b"def f():\n"
        b"    import sessionledger.tools.cli\n"
        b"    from sessionledger.projections._x import y\n"
        b"    return importlib.import_module('sessionledger.replay')\n"
    )
    targets = [t for _, t in imported_modules(source, "sessionledger.eventlog._probe")]
    assert targets == [
        "os",
        "sessionledger.replay",
        "sessionledger.projections",
        "sessionledger.eventlog._codec",
        "sessionledger.tools.cli",
        "sessionledger.projections._x",
        "sessionledger.replay",
    ]
    in_package = imported_modules(b"from . import _x\n", "sessionledger.replay", is_package=True)
    assert in_package == [(1, "sessionledger.replay._x")]


#: Reach-ins that are the point of the module, each with its reason.
PRIVATE_ALLOWED: dict[str, str] = {
    "tools/soak/_faults.py": "fault injection replaces the file store's write and fsync",
    "tools/bench/_pg_read.py": "fills 100,000 catalog rows directly, with the store's column rules",
}


def _private_reach_ins(path: Path, source: bytes | None = None) -> list[str]:
    """Imports by ``path`` of another part's private module or private name."""
    own = module_name(path).split(".")[1]
    tree = ast.parse(path.read_bytes() if source is None else source, filename=str(path))
    found: list[str] = []
    for node in ast.walk(tree):
        modules: list[tuple[str, list[str]]] = []
        if isinstance(node, ast.Import):
            modules = [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            modules = [(node.module, [alias.name for alias in node.names])]
        for module, names in modules:
            parts = module.split(".")
            if parts[0] != TOP or len(parts) < 2 or parts[1] == own:
                continue
            private = [p for p in parts[2:] if p.startswith("_")]
            private += [n for n in names if n.startswith("_")]
            if private:
                line = getattr(node, "lineno", 0)
                found.append(f"{path.relative_to(ROOT)}:{line}: {module} {private}")
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_no_private_name_crosses_a_package_boundary(package: str) -> None:
    """What a sibling needs from another part is public there (in its ``__all__``)."""
    violations = [
        finding
        for path in python_files(package)
        if str(path.relative_to(ROOT)) not in PRIVATE_ALLOWED
        for finding in _private_reach_ins(path)
    ]
    assert violations == []


def test_reach_in_checker_finds_planted_ones() -> None:
    probe = ROOT / "replay" / "_probe.py"
    assert len(_private_reach_ins(probe, b"from sessionledger.eventlog._codec import x\n")) == 1
    assert len(_private_reach_ins(probe, b"from sessionledger.eventlog import _filestore\n")) == 1
    assert len(_private_reach_ins(probe, b"import sessionledger.projections._catalog as c\n")) == 1
    assert _private_reach_ins(probe, b"from sessionledger.replay._verify import x\n") == []
    assert _private_reach_ins(probe, b"from sessionledger.eventlog import FileStore\n") == []

"""The built wheel installs beside a project that has its own ``tools/`` package and ``replay.py``.

Builds the wheel with ``pip wheel --no-deps``, installs it into a fresh virtual environment, and
works from a project folder whose own ``tools`` and ``replay`` must stay importable and unharmed.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def _run(args: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        args, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Built from a copy, so setuptools' build/ and egg-info never land in the working tree.
    source = tmp_path_factory.mktemp("source") / "src"
    skip = shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", ".bench", "*.egg-info", "__pycache__", ".*_cache"
    )
    shutil.copytree(ROOT, source, symlinks=True, ignore=skip)
    out = tmp_path_factory.mktemp("wheel")
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(out), str(source)],
        source,
    )
    (built,) = out.glob("sessionledger-*.whl")
    return built


def test_wheel_holds_one_top_level_package_and_every_part(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        top_level = next(n for n in names if n.endswith("top_level.txt"))
        assert archive.read(top_level).decode().split() == ["sessionledger"]
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"sessionledger"}
    for part in (
        "eventlog",
        "projections",
        "replay",
        "tools/cli",
        "tools/nanobot",
        "tools/openai_agents",
        "tools/bench",
        "tools/soak",
        "tools/web",
    ):
        assert f"sessionledger/{part}/__init__.py" in names, part
    assert "sessionledger/py.typed" in names
    # The viewer serves nothing from elsewhere: its assets ship in the wheel.
    for asset in ("viewer.css", "viewer.js"):
        assert f"sessionledger/tools/web/static/{asset}" in names, asset


def test_installed_beside_a_project_with_its_own_tools_and_replay(
    wheel: Path, tmp_path: Path
) -> None:
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = str(env_dir / "bin" / "python")
    _run([py, "-m", "pip", "install", "-q", str(wheel)], tmp_path)
    _run([py, "-m", "pip", "check"], tmp_path)

    project = tmp_path / "project"
    (project / "tools").mkdir(parents=True)
    (project / "tools" / "__init__.py").write_text("MINE = 'project tools'\n")
    (project / "replay.py").write_text("def verify() -> str:\n    return 'project replay'\n")
    script = (
        "import sessionledger, sessionledger.tools.nanobot, sessionledger.tools.openai_agents\n"
        "from sessionledger.tools.nanobot import SessionManager\n"
        "from sessionledger.tools.openai_agents import EventLogSession\n"
        "import tools, replay\n"
        "assert tools.MINE == 'project tools', tools\n"
        "assert replay.verify() == 'project replay'\n"
        "store = sessionledger.MemoryStore()\n"
        "store.session('a').append_message('user', 'hi')\n"
        "assert sessionledger.verify(store).ok\n"
        "print('ok')\n"
    )
    assert _run([py, "-c", script], project).stdout.strip() == "ok"
    cli = str(env_dir / "bin" / "sessionledger")
    demo = _run([cli, "demo"], project)
    assert "reopened" in demo.stdout
    assert "usage" in _run([cli, "bench", "--help"], project).stdout
    assert "usage" in _run([py, "-m", "sessionledger.tools.bench", "--help"], project).stdout
    assert (project / "tools" / "__init__.py").read_text() == "MINE = 'project tools'\n"


def test_importing_the_facade_loads_neither_pydantic_nor_rich() -> None:
    code = (
        "import sys, sessionledger\n"
        "print(sorted(m for m in ('pydantic', 'rich') if m in sys.modules))\n"
    )
    done = _run([sys.executable, "-c", code], ROOT)
    assert done.stdout.strip() == "[]"

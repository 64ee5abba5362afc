"""Getting a framework's tests, running them twice and comparing the outcomes."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from sessionledger.eventlog import EventLogError

AGENTS_REQUIREMENT = "openai-agents==0.24.0"
PLUGINS = {
    "agents": "sessionledger.tools.peer._agents_plugin",
    "nanobot": "sessionledger.tools.peer._nanobot_plugin",
}
#: A test file is selected when it names one of these (unless every file is asked for).
MARKERS = {"agents": ("SQLiteSession",), "nanobot": ("Session(", "SessionManager")}


class PeerError(EventLogError):
    """The framework's tests could not be got or run."""


@dataclass
class Outcomes:
    """One run: test id -> passed, failed or skipped."""

    results: dict[str, str] = field(default_factory=dict)

    def count(self, outcome: str) -> int:
        """How many tests had ``outcome``."""
        return sum(1 for value in self.results.values() if value == outcome)


def agents_source(workdir: Path, python: str) -> Path:
    """Download the SDK's sdist into ``workdir`` and unpack it; return the unpacked tree."""
    download = workdir / "sdist"
    download.mkdir(parents=True, exist_ok=True)
    command = [python, "-m", "pip", "download", "--no-binary", ":all:", "--no-deps"]
    done = subprocess.run(
        [*command, AGENTS_REQUIREMENT, "-d", str(download)], capture_output=True, text=True
    )
    archives = sorted(download.glob("openai_agents-*.tar.gz"))
    if done.returncode != 0 or not archives:
        raise PeerError(f"pip download {AGENTS_REQUIREMENT} failed: {done.stderr.strip()[-500:]}")
    with tarfile.open(archives[-1]) as archive:
        archive.extractall(workdir, filter="data")
    tree = workdir / archives[-1].name.removesuffix(".tar.gz")
    if not (tree / "tests").is_dir():
        raise PeerError(f"{archives[-1]} holds no tests/ directory")
    return tree


def select(source: Path, framework: str, everything: bool) -> list[str]:
    """The test files to run (relative to ``source``): those naming the session classes."""
    files = sorted((source / "tests").rglob("test_*.py"))
    if not everything:
        markers = MARKERS[framework]
        files = [f for f in files if any(m in f.read_text(errors="replace") for m in markers)]
    return [str(f.relative_to(source)) for f in files]


def run(
    source: Path,
    files: list[str],
    report: Path,
    *,
    python: str,
    plugin: str | None,
    extra: list[str],
    timeout: float,
) -> Outcomes:
    """Run pytest on ``files`` in ``source`` (with ``plugin`` when given); parse its report."""
    command = [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={report}"]
    if plugin is not None:
        command += ["-p", plugin]
    try:
        subprocess.run(
            [*command, *extra, *files],
            cwd=source,
            timeout=timeout,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired as exc:
        raise PeerError(f"the run took more than {timeout:.0f} s: {' '.join(command)}") from exc
    if not report.exists():
        raise PeerError(f"pytest wrote no report ({' '.join(command)})")
    return parse_junit(report)


def parse_junit(path: Path) -> Outcomes:
    """Outcomes from a JUnit XML report: failures and errors count as failed."""
    outcomes = Outcomes()
    for case in ET.parse(path).getroot().iter("testcase"):
        test_id = f"{case.get('classname', '')}::{case.get('name', '')}"
        tags = {child.tag for child in case}
        if tags & {"failure", "error"}:
            outcome = "failed"
        elif "skipped" in tags:
            outcome = "skipped"
        else:
            outcome = "passed"
        if outcomes.results.get(test_id) != "failed":  # a teardown error after a pass fails it
            outcomes.results[test_id] = outcome
    return outcomes


def regressions(theirs: Outcomes, ours: Outcomes) -> list[str]:
    """Tests that passed on the framework's classes and did not pass on ours."""
    return sorted(
        test
        for test, outcome in theirs.results.items()
        if outcome == "passed" and ours.results.get(test, "missing") != "passed"
    )


def node_id(source: Path, test_id: str) -> str | None:
    """The pytest node id of a JUnit ``classname::name`` test id under ``source``."""
    classname, _, name = test_id.partition("::")
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        path = "/".join(parts[:cut]) + ".py"
        if (source / path).is_file():
            return "::".join([path, *parts[cut:], name])
    return None


def has_module(python: str, module: str) -> bool:
    """Whether ``python`` can import ``module``."""
    probe = subprocess.run([python, "-c", f"import {module}"], capture_output=True)
    return probe.returncode == 0


def default_python() -> str:
    """This interpreter."""
    return sys.executable

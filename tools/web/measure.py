"""Measure the viewer: page weight and time to first byte on a long session.

``python -m sessionledger.tools.web.measure --messages 10000 100000`` writes each session (the
benchmarks' conversation with tool calls) to a scratch file store, serves it with
``sessionledger serve`` in its own process and times, over several rounds (medians, first
round reported apart: it reads the log into the viewer's cache): the session page's first
byte and whole body, the model's view at the head, a timeline page from the middle, and a
time-travel point; the page weight is the page plus its stylesheet and script.
"""

from __future__ import annotations

import argparse
import http.client
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

from sessionledger.eventlog import FileStore
from sessionledger.tools.bench._workload import conversation

KEY = "bench:viewer"


def _get(port: int, path: str) -> tuple[float, float, int]:
    """Seconds to the first byte, seconds to the last, body bytes."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    start = time.perf_counter()
    conn.request("GET", path)
    response = conn.getresponse()
    first = response.read(1)
    ttfb = time.perf_counter() - start
    body = first + response.read()
    total = time.perf_counter() - start
    conn.close()
    if response.status != 200:
        raise RuntimeError(f"GET {path}: {response.status} {body[:200]!r}")
    return ttfb, total, len(body)


def _write(root: Path, n: int) -> int:
    with FileStore(root, durability="none") as store:
        s = store.session(KEY)
        for m in conversation(n):
            s.append_message(m.pop("role"), m.pop("content", None), **m)
        return s.state.seq


def _serve(root: Path, port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sessionledger.tools.cli",
            "serve",
            "--store",
            str(root),
            "--port",
            str(port),
        ],
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            _get(port, "/static/viewer.css")
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the viewer did not start")


def measure(n: int, rounds: int, port: int) -> dict[str, float]:
    """Figures for one session of ``n`` messages."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "store"
        seq = _write(root, n)
        size = sum(p.stat().st_size for p in root.glob("*.jsonl"))
        proc = _serve(root, port)
        try:
            k = quote(KEY, safe="")
            paths = {
                "page": f"/session?key={k}",
                "view": f"/api/view?key={k}",
                "middle": f"/api/timeline?key={k}&around={seq // 2}",
                "travel": f"/api/view?key={k}&seq={seq // 2}",
            }
            cold = {name: _get(port, path) for name, path in paths.items()}
            runs: dict[str, list[tuple[float, float, int]]] = {name: [] for name in paths}
            for _ in range(rounds):
                for name, path in paths.items():
                    runs[name].append(_get(port, path))
            css = _get(port, "/static/viewer.css")[2]
            js = _get(port, "/static/viewer.js")[2]
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    out: dict[str, float] = {"messages": n, "log_mb": size / 1e6}
    out["page_kb"] = runs["page"][0][2] / 1024
    out["weight_kb"] = (runs["page"][0][2] + css + js) / 1024
    out["cold_ttfb_ms"] = cold["page"][0] * 1000
    out["cold_page_ms"] = cold["page"][1] * 1000
    for name, samples in runs.items():
        out[f"{name}_ttfb_ms"] = statistics.median(s[0] for s in samples) * 1000
        out[f"{name}_ms"] = statistics.median(s[1] for s in samples) * 1000
    out["cold_view_ms"] = cold["view"][1] * 1000
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the measurements and print one line of figures per session length."""
    parser = argparse.ArgumentParser(prog="python -m sessionledger.tools.web.measure")
    parser.add_argument("--messages", type=int, nargs="+", default=[10_000])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--port", type=int, default=8799)
    args = parser.parse_args(argv)
    for n in args.messages:
        figures = measure(n, args.rounds, args.port)
        print("  ".join(f"{k}={v:,.1f}" for k, v in figures.items()), flush=True)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

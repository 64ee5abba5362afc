"""Measure the viewer: page weight and time to first byte on a long session.

``python -m sessionledger.tools.web.measure --messages 10000 100000`` writes each session (the
benchmarks' conversation with tool calls) to a scratch file store, serves it with
``sessionledger serve`` in its own process and times, over several rounds (medians, first
round reported apart: the first look at the log): the session page's first byte and whole
body (and with ``--browser CHROMIUM``, a real browser's time until it shows the timeline and
until it shows the model's view, on a freshly started server), the model's view at the head, a timeline page from the middle, and a
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
from collections.abc import Iterator
from contextlib import contextmanager
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


@contextmanager
def serving(
    store: Path, port: int, *extra: str, stderr: int = subprocess.DEVNULL, patience: float = 30.0
) -> Iterator[str]:
    """Run ``sessionledger serve`` on ``store`` in its own process; yield its base URL once it
    answers, and stop it afterwards.

    Raises:
        RuntimeError: it exited or did not answer within ``patience`` seconds (with its error
            output when ``stderr`` is ``subprocess.PIPE``).
    """
    command = [sys.executable, "-m", "sessionledger.tools.cli", "serve"]
    command += ["--store", str(store), "--port", str(port), *extra]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
    try:
        deadline = time.monotonic() + patience
        while True:
            try:
                _get(port, "/static/viewer.css")
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    proc.wait()
                    err = proc.stderr.read().decode() if proc.stderr else ""
                    raise RuntimeError(f"the viewer did not start: {err}") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()


def _browser(url: str, executable: str) -> tuple[float, float]:
    """Seconds until a browser shows the timeline, and until it shows the model's view."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        page = browser.new_page()
        page.goto(url.split("/session")[0] + "/static/viewer.css")  # the browser's own start-up
        start = time.perf_counter()
        page.goto(url, wait_until="domcontentloaded")
        page.wait_for_selector("#events article")
        shown = time.perf_counter() - start
        page.wait_for_selector("#view .view-head", timeout=120_000)
        view = time.perf_counter() - start
        browser.close()
    return shown, view


def measure(
    n: int, rounds: int, port: int, keep: Path | None = None, browser: str | None = None
) -> dict[str, float]:
    """Figures for one session of ``n`` messages (written once into ``keep`` if given)."""
    with tempfile.TemporaryDirectory() as tmp:
        root = keep / f"viewer-{n}" if keep is not None else Path(tmp) / "store"
        if root.exists():
            with FileStore(root) as store:
                seq = store.load(KEY).state.seq
        else:
            seq = _write(root, n)
        size = sum(p.stat().st_size for p in root.glob("*.jsonl"))
        with serving(root, port):
            k = quote(KEY, safe="")
            paths = {
                "page": f"/session?key={k}",
                "view": f"/api/view?key={k}",
                "middle": f"/api/timeline?key={k}&around={seq // 2}",
                "travel": f"/api/view?key={k}&seq={seq // 2}",
            }
            if browser is not None:
                shown, view = _browser(f"http://127.0.0.1:{port}{paths['page']}", browser)
            cold = {name: _get(port, path) for name, path in paths.items()}
            runs: dict[str, list[tuple[float, float, int]]] = {name: [] for name in paths}
            for _ in range(rounds):
                for name, path in paths.items():
                    runs[name].append(_get(port, path))
            css = _get(port, "/static/viewer.css")[2]
            js = _get(port, "/static/viewer.js")[2]
    out: dict[str, float] = {"messages": n, "log_mb": size / 1e6}
    out["page_kb"] = runs["page"][0][2] / 1024
    out["weight_kb"] = (runs["page"][0][2] + css + js) / 1024
    out["cold_ttfb_ms"] = cold["page"][0] * 1000
    out["cold_page_ms"] = cold["page"][1] * 1000
    for name, samples in runs.items():
        out[f"{name}_ttfb_ms"] = statistics.median(s[0] for s in samples) * 1000
        out[f"{name}_ms"] = statistics.median(s[1] for s in samples) * 1000
    out["cold_view_ms"] = cold["view"][1] * 1000
    if browser is not None:
        out["browser_timeline_ms"] = shown * 1000
        out["browser_view_ms"] = view * 1000
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the measurements and print one line of figures per session length."""
    parser = argparse.ArgumentParser(prog="python -m sessionledger.tools.web.measure")
    parser.add_argument("--messages", type=int, nargs="+", default=[10_000])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--port", type=int, default=8799)
    parser.add_argument(
        "--keep", type=Path, help="write the sessions here once and reuse them on later runs"
    )
    parser.add_argument(
        "--browser", metavar="CHROMIUM", help="also time a real browser opening the page"
    )
    args = parser.parse_args(argv)
    for n in args.messages:
        figures = measure(n, args.rounds, args.port, args.keep, args.browser)
        print("  ".join(f"{k}={v:,.1f}" for k, v in figures.items()), flush=True)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

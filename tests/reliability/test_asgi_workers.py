"""A real ASGI server with two worker processes (uvicorn), one store per worker, serving
interleaved turns of one conversation and of many: 0 errors, 0 lost."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from logcheck import whole_log

from sessionledger.eventlog import FileStore, MessageAppended, decode_log

pytest.importorskip("uvicorn")

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(port: int, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request("POST", path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_two_uvicorn_workers_serve_interleaved_turns(tmp_path: Path) -> None:
    root = tmp_path / "store"
    FileStore(root).close()
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT), SESSIONLEDGER_ASGI_ROOT=str(root))
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "asgi_turns:app",
            "--app-dir",
            str(HERE),
            "--workers",
            "2",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if get(port, "/health")[0] == 200:
                    break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.1)
        answers: list[tuple[str, str, dict[str, int]]] = []
        errors: list[str] = []

        def client(n: int) -> None:
            for turn in range(12):
                # Half the clients share one conversation; the others each have their own.
                key = "chat:shared" if n % 2 == 0 else f"chat:{n}"
                eid = f"c{n}.t{turn}"
                try:
                    status, body = get(port, f"/turn?key={key}&id={eid}")
                except OSError as exc:
                    errors.append(f"{eid}: {exc}")
                    continue
                if status != 200:
                    errors.append(f"{eid}: HTTP {status}: {body[:200]!r}")
                    continue
                answers.append((key, eid, json.loads(body)))

        threads = [threading.Thread(target=client, args=(n,)) for n in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert len(answers) == 16 * 12
        assert len({a[2]["pid"] for a in answers}) == 2, "both workers should have served"
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:  # pragma: no cover - a stuck server
            server.kill()
            server.wait()
        assert server.stderr is not None
        err = server.stderr.read()
        server.stderr.close()
    assert "Traceback" not in err, err
    store = FileStore(root)
    seqs: dict[tuple[str, str], int] = {}
    for key in store.keys():
        for event in whole_log(store.read_bytes(key)):
            assert isinstance(event, MessageAppended)
            assert (key, event.id) not in seqs
            seqs[(key, event.id)] = event.seq
    assert len(seqs) == 2 * len(answers)  # nothing lost, nothing extra
    for key, eid, answer in answers:
        assert seqs[(key, f"{eid}.u")] == answer["user"]
        assert seqs[(key, f"{eid}.a")] == answer["assistant"]
    shared = decode_log(store.read_bytes("chat:shared")).events
    assert len(shared) == 8 * 12 * 2
    store.close()

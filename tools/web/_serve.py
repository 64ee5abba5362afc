"""Run the viewer: uvicorn on 127.0.0.1 unless told otherwise, read-only whatever the host."""

from __future__ import annotations

import socket
import sys

from sessionledger.eventlog import BaseStore
from sessionledger.replay import NO_REDACTION, Redaction

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def serve(
    store: BaseStore,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    redaction: Redaction = NO_REDACTION,
    quiet: bool = False,
) -> None:
    """Serve the viewer over ``store`` until interrupted (Ctrl-C).

    Raises:
        OSError: the address cannot be listened on (in use, not this machine's); raised before
            anything is announced or served.
    """
    import uvicorn

    from ._app import create_app

    # Listen first: a taken port is an error here, not a log line after the URL was announced.
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family)
    app = create_app(store, redaction=redaction)
    shown = f"[{host}]" if ":" in host else host
    if not quiet:
        sys.stderr.write(f"sessionledger viewer (read-only) on http://{shown}:{port}/\n")
        if host not in ("127.0.0.1", "localhost", "::1"):
            sys.stderr.write(
                f"warning: listening on {host}: anyone who can reach it can read these sessions\n"
            )
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=1,
        lifespan="on",
    )
    try:
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()

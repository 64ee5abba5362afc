"""Graceful shutdown of an async agent on SIGTERM: stop the work, then close the store.

Run: ``python docs/examples/async_sigterm.py STORE_DIR [asyncio|trio]``; send it SIGTERM (or
Ctrl-C). It prints ``ready``, then at exit one JSON line: per session, how many appends were
acknowledged. Every acknowledged append is durable; closing the store syncs anything pending.
"""

from __future__ import annotations

import json
import signal
import sys

import anyio

from sessionledger.eventlog import AsyncFileStore


async def agent(store: AsyncFileStore, key: str, acked: dict[str, int]) -> None:
    """A stand-in for an agent loop: append messages as fast as it can."""
    writer = await store.session(key)
    while True:
        seq = await writer.append_message("user", f"message {acked.get(key, 0) + 1}")
        acked[key] = seq  # the append returned: its line is durable ("batch" group commit)


async def main(root: str) -> None:
    acked: dict[str, int] = {}
    # ``async with`` closes the store at the end: every writer syncs what is pending.
    async with AsyncFileStore(root, durability="batch") as store:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with anyio.create_task_group() as tg:
                for n in range(4):
                    tg.start_soon(agent, store, f"chat:{n}", acked)
                print("ready", flush=True)
                async for _signum in signals:
                    # Appends already written finish their fsync (they are shielded);
                    # appends not yet written are cancelled and write nothing.
                    tg.cancel_scope.cancel()
                    break
    print(json.dumps(acked), flush=True)


if __name__ == "__main__":
    backend = sys.argv[2] if len(sys.argv) > 2 else "asyncio"
    anyio.run(main, sys.argv[1], backend=backend)

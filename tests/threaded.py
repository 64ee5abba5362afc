"""Run test work on several threads at once and report what failed on any of them."""

from __future__ import annotations

import threading
from collections.abc import Callable


def run_threads(*calls: Callable[[], object], timeout: float | None = None) -> None:
    """Run each of ``calls`` on a thread of its own, all at once, and wait for them.

    Raises the first exception a call raised (an assertion on a thread fails the test), or
    TimeoutError when a thread is still running after ``timeout`` seconds.
    """
    errors: list[BaseException] = []

    def run(call: Callable[[], object]) -> None:
        try:
            call()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(call,)) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    if errors:
        raise errors[0]
    if any(thread.is_alive() for thread in threads):
        raise TimeoutError(f"a thread still runs after {timeout} s")

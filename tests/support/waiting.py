"""Waiting for background work (an upload thread, a mixer, a subprocess) without a fixed sleep.

reached = eventually(lambda: client.stats(), lambda s: s["pending"] == 0, what="an empty outbox")
assert reached["accepted"] == 3     # the value that met the condition, not a second read

A background thread may change the value again between a wait and a fresh read, so the
assertions go on the value the wait returns. The deadline is generous (a loaded 2-core CI
machine runs three times slower than usual); a wait that runs out fails, naming what it waited
for and the last value seen, instead of letting the test go on as if it had not.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: Seconds a test waits for background work at most: generous, not a timing claim.
DEADLINE = 60.0


def eventually(
    probe: Callable[[], T],
    accept: Callable[[T], bool],
    *,
    what: str,
    timeout: float = DEADLINE,
    interval: float = 0.01,
) -> T:
    """Call ``probe`` every ``interval`` seconds until ``accept`` takes its value; returns that
    value. Raises AssertionError after ``timeout`` seconds, with ``what`` and the last value."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if accept(value):
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout:g} s for {what}; last seen: {value!r}")
        time.sleep(interval)

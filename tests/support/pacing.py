"""A recording stand-in for a background thread's stop event.

The service's periodic threads (retention's sweep, the mixer) pace themselves only through
``stop.wait(seconds)``: their waits are their whole schedule. Recording them shows the schedule
without timing a test.
"""

from __future__ import annotations


class RecordingStop:
    """Stands in for the thread's stop event: records each wait and ends the loop after
    ``waits`` of them."""

    def __init__(self, waits: int) -> None:
        self.waits: list[float] = []
        self._limit = waits

    def wait(self, timeout: float) -> bool:
        self.waits.append(timeout)
        return len(self.waits) > self._limit

    def set(self) -> None:
        self._limit = 0

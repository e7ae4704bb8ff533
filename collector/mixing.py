"""The service's mixer: staged reports move into the report table in random order, in batches.

Why (docs/COLLECTOR.md "Unlinkable storage"): rows stored as each upload commits keep the
upload's traces, PostgreSQL's ``xmin`` (one per transaction, increasing) and heap position,
SQLite's WAL frames in commit order, so whoever holds the database could group one device's
reports to several campaigns. With staging on, an upload only stages its reports (durable,
tallied, counted); :meth:`Storage.mix` moves everything staged into ``reports`` in one
transaction per batch (SQLite: in slices of that batch, one write transaction each, so uploads
take the write lock in between), in an order drawn from cryptographic randomness. Reports mixed
together are unlinkable by storage order: the batch is the crowd each hides in.

When: a daemon thread per worker process polls every ``POLL_SECONDS``, and at once again
after a mix that moved a full batch (a mixer that fell behind under load catches up). Each
poll, one caller across workers and replicas (``claim_run`` lease ``mix-poll``) counts the
staged reports and mixes when there are at least ``batch``; independently, once per
``interval`` (lease ``mix``) whatever is staged is mixed, so no report stays staged longer
than ``interval`` plus a poll. A mix already running elsewhere makes a tick a no-op
(``mix(wait=False)``): the thread never holds a connection waiting for another mixer. Two
mixes running at once would be safe anyway (each staged row moves exactly once).
"""

from __future__ import annotations

import logging
import os
import threading

from collector.storage import MixResult, Storage

log = logging.getLogger(__name__)

#: Seconds between polls of each worker's mixer thread.
POLL_SECONDS = 1.0
#: Lease of the timed mix (once per interval) and of the batch-size check (once per poll).
LEASE = "mix"
POLL_LEASE = "mix-poll"


class Mixer:
    """Runs :meth:`Storage.mix` at ``batch`` staged reports or every ``interval`` seconds."""

    def __init__(
        self, storage: Storage, batch: int, interval: float, poll_seconds: float = POLL_SECONDS
    ) -> None:
        self.storage = storage
        self.batch = batch
        self.interval = interval
        self.poll_seconds = poll_seconds
        self._stop = threading.Event()
        self._pid = 0
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        """Staging is on (``LDP_MIX_BATCH`` > 0)."""
        return self.batch > 0

    def ensure_started(self) -> None:
        """Start the thread in this process if not yet (gunicorn forks after ``create_app``)."""
        if not self.enabled or self._pid == os.getpid():
            return
        with self._lock:
            if self._pid == os.getpid():
                return
            self._pid = os.getpid()
            threading.Thread(target=self._run, name="ldp-mixer", daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def tick(self) -> MixResult | None:
        """Mix if this caller wins a due lease and the batch or the interval is reached."""
        due = self.interval > 0 and self.storage.claim_run(LEASE, self.interval)
        if not due and self.storage.claim_run(POLL_LEASE, self.poll_seconds * 0.9):
            due = self.storage.staged_count() >= self.batch
        if not due:
            return None
        done = self.storage.mix(wait=False)  # a mix running elsewhere: nothing to wait for
        if done.moved:
            log.info("mixed %d staged reports in %.3f s", done.moved, done.seconds)
        return done

    def _run(self) -> None:
        pause = self.poll_seconds
        while not self._stop.wait(pause):
            pause = self.poll_seconds
            try:
                done = self.tick()
            except Exception as exc:  # the thread must never take the worker down
                log.warning("mix failed (retried at the next poll): %s", exc)
                continue
            if done is not None and done.moved >= self.batch:
                # A full batch staged while it ran, likely: poll again at once (the lease
                # still limits mixes to one per poll interval across workers).
                pause = 0.0

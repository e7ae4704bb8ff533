"""PostgreSQL lease rows after the database's clock stepped back (fifth sweep).

``claim_run`` made a lease due when ``last_run <= now() - interval``: a ``last_run`` in the
future (the clock stepped back after a run: an NTP correction, a VM restored) kept every caller
out until the clock caught up, so no retention sweep and no timed mix ran. A future
``last_run`` is due now, once; the SQLite backend does the same
(``tests/test_sweep5_sqlite_leases.py``).
"""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from collector.retention import LEASE
from collector.storage.postgres import PostgresStorage
from tests.support.postgres import fresh_database


@pytest.fixture
def url() -> Iterator[str]:
    with fresh_database() as made:
        yield made


def test_a_lease_run_in_the_future_is_due_once_per_interval(url: str) -> None:
    store = PostgresStorage(url)
    try:
        store.migrate()
        assert store.claim_run(LEASE, 600) is True
        assert store.claim_run(LEASE, 600) is False
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(
                "UPDATE leases SET last_run = now() + interval '1 hour' WHERE name = %s", (LEASE,)
            )
        assert store.claim_run(LEASE, 600) is True  # before: False for the next hour
        assert store.claim_run(LEASE, 600) is False  # one winner per interval again
    finally:
        store.close()

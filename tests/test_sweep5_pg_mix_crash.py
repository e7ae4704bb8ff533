"""PostgreSQL mix killed inside each step of the slot cycle (fifth sweep: no defect found; kept
as a regression test).

A mixer process is held inside one step (the seal waiting for an upload still writing the
slot; the move's transaction waiting in its tally fold; the clean waiting for a reader of the
slot), then killed with SIGKILL and its server session ended. Uploads continue meanwhile
where they can. The next mix (another process) resumes from the phase recorded in
``mix_slots``: every report is stored once, the tallies equal a recount of the stored reports
(``tally verify``) and the counters are exact.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from collector.campaigns import Campaign, campaign_from_request
from collector.ingest import ingest_batch
from collector.tallycheck import verify_tallies
from tests.support.postgres import end_sessions, fresh_database
from tests.support.reports import campaign_body, reports

psycopg = pytest.importorskip("psycopg")

from collector.storage.postgres import PostgresStorage  # noqa: E402

MIXER = (
    "import sys\n"
    "from collector.storage.postgres import PostgresStorage\n"
    "PostgresStorage(sys.argv[1], staging=True, busy_timeout_ms=600_000).mix()\n"
)

#: Per step: what holds the mixer there (on the slot ``{w}`` being mixed), and the start of
#: the statement it then waits in.
STEPS = {
    "seal": (
        "LOCK TABLE staged_reports_{w} IN ROW EXCLUSIVE MODE",
        "LOCK TABLE staged_reports_{w} IN SHARE",
    ),
    "move": ("SELECT 1 FROM tally_shards WHERE shard = 0 FOR UPDATE", "INSERT INTO tally_shards"),
    "clean": (
        "LOCK TABLE staged_counters_{w} IN ACCESS SHARE MODE",
        "LOCK TABLE staged_reports_{w}, ",
    ),
}


@pytest.fixture
def url() -> Iterator[str]:
    with fresh_database() as made:
        yield made


def upload(store: PostgresStorage, campaign: Campaign, items: list[dict[str, Any]]) -> Any:
    body = {"digest": campaign.digest, "reports": items}
    return ingest_batch(store, campaign, body, max_reports=1000)


def waiting_in(url: str, start: str) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        return bool(
            conn.execute(
                "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND starts_with(query, %s))",
                (start,),
            ).fetchone()[0]
        )


@pytest.mark.parametrize("step", sorted(STEPS))
def test_a_mixer_killed_inside_a_step_is_resumed_exactly(url: str, step: str) -> None:
    store = PostgresStorage(url, staging=True)
    store.migrate()
    campaign = campaign_from_request(campaign_body("x"))
    store.create_campaign(campaign)
    items = reports(campaign.to_record(), 30, seed=1)
    try:
        assert upload(store, campaign, items[:10]).accepted == 10
        assert store.mix().moved == 10  # the settled shard-0 row exists
        assert upload(store, campaign, items[10:20]).accepted == 10
        assert upload(store, campaign, items[:5]).duplicate == 5
        with psycopg.connect(url, autocommit=True) as conn:
            writing = conn.execute("SELECT writing FROM mix_slots").fetchone()[0]
        hold, start = (s.format(w=writing) for s in STEPS[step])
        blocker = psycopg.connect(url)
        try:
            blocker.execute(hold)
            mixer = subprocess.Popen([sys.executable, "-c", MIXER, url])
            while not waiting_in(url, start):
                assert mixer.poll() is None, "the mixer ended before reaching the step"
            if step != "seal":  # (uploads wait for the upload the blocker stands for)
                assert upload(store, campaign, items[20:25]).accepted == 5
            os.kill(mixer.pid, signal.SIGKILL)
            mixer.wait()
            end_sessions(url)  # the mixer's session too (and the blocker's)
        finally:
            blocker.close()
        store.close()
        store = PostgresStorage(url, staging=True)
        if step == "seal":
            assert upload(store, campaign, items[20:25]).accepted == 5
        result = upload(store, campaign, items[25:30] + items[20:22])
        assert (result.accepted, result.duplicate) == (5, 2)
        store.mix()
        store.mix()
        assert store.staged_count() == 0
        assert store.count_reports(campaign) == 30
        assert sum(t.n for t in store.tallies(campaign).values()) == 30
        checks = verify_tallies(store)
        assert checks and all(c.ok for c in checks)
        [counters] = store.report_counters()
        assert (counters.accepted, counters.duplicate) == (30, 7)
    finally:
        store.close()

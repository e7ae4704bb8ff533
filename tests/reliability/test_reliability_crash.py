"""Crash safety: SDK clients stream reports while the collector is SIGKILLed and restarted.

The devices talk to a stable loopback address (a pass-through proxy) while the collector behind
it is killed (master and workers, no graceful shutdown) and started again on a new port. At the
end every generated report is stored exactly once, the tallies equal recomputation and
``PRAGMA integrity_check`` is ok. The PostgreSQL variant also loses its database sessions
under load, and ``ldp tally verify`` stands in for the integrity check.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.checks import Device, assert_exactly_once, create_campaign
from tests.support.faulty_proxy import FaultyProxy
from tests.support.postgres import ADMIN_URL, end_sessions, fresh_database
from tests.support.server import running_collector

pytestmark = pytest.mark.slow

KILLS = 4
DEVICES = 4
REPORTS_PER_DEVICE = 240


def test_sigkill_under_load_loses_nothing_and_counts_nothing_twice(
    tmp_path: Path, figures: dict[str, Any]
) -> None:
    (tmp_path / "srv").mkdir()
    with (
        running_collector(tmp_path / "srv", workers=2) as srv,
        FaultyProxy(upstream=srv.url) as proxy,
    ):
        campaigns = {c["id"]: c for c in (create_campaign(srv, "oue"), create_campaign(srv, "olh"))}
        devices = [
            Device(
                proxy.url,
                srv.ingest_token,
                tmp_path / f"device{i}",
                list(campaigns),
                REPORTS_PER_DEVICE,
                pause=0.01,
                seed=i,
            )
            for i in range(DEVICES)
        ]
        for d in devices:
            d.start()
        kills = 0
        accepted_before_kill = []
        for _ in range(KILLS):
            time.sleep(0.6)
            accepted_before_kill.append(sum(d.client.stats()["accepted"] for d in devices))  # type: ignore[union-attr]
            srv.kill()  # SIGKILL master and workers mid-stream
            kills += 1
            time.sleep(0.2)  # the devices meet a dead address meanwhile
            srv.start()
            proxy.upstream = srv.url
        for d in devices:
            d.join()
        stats = [d.drain() for d in devices]
        db = srv.db_path
        assert all(s["rejected"] == 0 and s["pending"] == 0 for s in stats)
        assert not any(k.startswith("dropped") and v for s in stats for k, v in s.items())
    # Reports were in flight at each kill (the uploads had started before the first one).
    assert accepted_before_kill[-1] > 0
    result = assert_exactly_once(db, campaigns, devices)
    assert result["generated"] == DEVICES * REPORTS_PER_DEVICE
    figures["crash_sigkill_sqlite"] = {
        "kills": kills,
        "devices": DEVICES,
        **result,
        "retried_duplicates": sum(s["duplicate"] for s in stats),
        "integrity_check": "ok",
    }


#: Set to 1 to also restart the machine's PostgreSQL server mid-stream (shared by other
#: tests: bench/reliability.py does it, serialised, and waits until the server answers again).
PG_RESTART = os.environ.get("RELIABILITY_PG_RESTART") == "1"


def restart_postgres() -> None:
    """Restart the local cluster and wait until it answers (restores the shared server)."""
    import psycopg

    version = sorted(os.listdir("/etc/postgresql"))[-1]
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"],
        check=True,
        capture_output=True,
        timeout=120,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            psycopg.connect(ADMIN_URL, connect_timeout=2).close()
            return
        except psycopg.OperationalError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@pytest.mark.postgres
def test_postgres_sigkill_and_lost_sessions_under_load(
    tmp_path: Path, figures: dict[str, Any]
) -> None:
    """The same on PostgreSQL: the collector is SIGKILLed, and every server session of its
    database is ended under load (a server restart as the collector sees it; with
    RELIABILITY_PG_RESTART=1 the real server is restarted too)."""
    (tmp_path / "srv").mkdir()
    with fresh_database() as url:
        with (
            running_collector(tmp_path / "srv", workers=2, db_url=url) as srv,
            FaultyProxy(upstream=srv.url) as proxy,
        ):
            campaigns = {
                c["id"]: c for c in (create_campaign(srv, "oue"), create_campaign(srv, "hr"))
            }
            devices = [
                Device(
                    proxy.url,
                    srv.ingest_token,
                    tmp_path / f"device{i}",
                    list(campaigns),
                    REPORTS_PER_DEVICE,
                    pause=0.01,
                    seed=10 + i,
                )
                for i in range(DEVICES)
            ]
            for d in devices:
                d.start()
            kills = session_losses = restarts = 0
            for round_ in range(KILLS):
                time.sleep(0.6)
                if round_ % 2 == 0:
                    srv.kill()
                    kills += 1
                    time.sleep(0.2)
                    srv.start()
                    proxy.upstream = srv.url
                elif PG_RESTART and round_ == 1:
                    restart_postgres()
                    restarts += 1
                else:
                    session_losses += end_sessions(url)
            for d in devices:
                d.join()
            stats = [d.drain() for d in devices]
            assert all(s["rejected"] == 0 and s["pending"] == 0 for s in stats)
            assert not any(k.startswith("dropped") and v for s in stats for k, v in s.items())
        result = assert_exactly_once(url, campaigns, devices)
    figures["crash_postgres"] = {
        "collector_sigkills": kills,
        "server_sessions_ended": session_losses,
        "server_restarts": restarts,
        "devices": DEVICES,
        **result,
        "retried_duplicates": sum(s["duplicate"] for s in stats),
        "tally_verify": "ok",
    }

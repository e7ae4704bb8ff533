"""Crash safety: SDK clients stream reports while the collector is SIGKILLed and restarted.

The devices talk to a stable loopback address (a pass-through proxy) while the collector behind
it is killed (master and workers, no graceful shutdown) and started again on a new port. At the
end every generated report is stored exactly once, the tallies equal recomputation and
``PRAGMA integrity_check`` is ok.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from tests.reliability.checks import Device, assert_exactly_once, create_campaign
from tests.support.faulty_proxy import FaultyProxy
from tests.support.server import running_collector

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

"""Network faults between SDK and collector: several devices upload through a fault-injecting
proxy that drops connections, half-sends requests, loses answers, delays and answers 503
bursts. No report is lost and none is counted twice.

(tests/test_sdk_reliability.py proves each fault once for one client; this runs a seeded random
schedule of many faults against concurrent clients and checks the stored data itself.)
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.checks import Device, assert_exactly_once, create_campaign
from tests.support.faulty_proxy import DROP, HALF, LOST_RESPONSE, PASS, Fault, FaultyProxy
from tests.support.server import CollectorProcess

pytestmark = pytest.mark.slow

DEVICES = 4
REPORTS_PER_DEVICE = 150
FAULTS = 160


def fault_schedule(n: int, seed: int) -> list[Fault]:
    """``n`` faults: single faults mixed with bursts of 503 and a few clean passes."""
    rng = random.Random(seed)
    single = [
        DROP,
        HALF,
        LOST_RESPONSE,
        Fault.delay(0.05),
        Fault.delay(0.05, after=True),
        Fault.status(500),
        Fault.status(502),
        Fault.status(429, retry_after=0),
        PASS,
    ]
    out: list[Fault] = []
    while len(out) < n:
        if rng.random() < 0.15:
            out += [Fault.status(503, retry_after=0)] * rng.randint(3, 8)  # a 503 burst
        else:
            out.append(rng.choice(single))
    return out[:n]


def test_fault_storm_loses_nothing_and_counts_nothing_twice(
    collector: CollectorProcess, tmp_path: Path, figures: dict[str, Any]
) -> None:
    campaigns = {
        c["id"]: c for c in (create_campaign(collector, "oue"), create_campaign(collector, "hr"))
    }
    schedule = fault_schedule(FAULTS, seed=8)
    with FaultyProxy(upstream=collector.url) as proxy:
        devices = [
            Device(
                proxy.url,
                collector.ingest_token,
                tmp_path / f"device{i}",
                list(campaigns),
                REPORTS_PER_DEVICE,
                seed=i,
                options={"batch_size": 10},
            )
            for i in range(DEVICES)
        ]
        for d in devices:
            d.open()  # configs fetched before the storm
        proxy.plan(*schedule, path="/reports")
        for d in devices:
            d.start_thread()
        for d in devices:
            d.join()
        # Keep uploading until every planned fault has hit a request and the outboxes drain.
        stats = [d.drain(timeout=120) for d in devices]
        used = FAULTS - proxy.planned()
        faults_seen = Counter(
            r.fault.kind if r.fault.kind != "status" else f"status {r.fault.code}"
            for r in proxy.requests_to("/reports")
            if r.fault is not PASS
        )
    assert used == FAULTS, "the devices finished before the fault schedule was used up"
    assert all(s["rejected"] == 0 for s in stats)
    assert not any(k.startswith("dropped") and v for s in stats for k, v in s.items())
    result = assert_exactly_once(collector.db_path, campaigns, devices)
    figures["network_faults"] = {
        "faults_injected": sum(faults_seen.values()),
        "by_kind": dict(sorted(faults_seen.items())),
        "devices": DEVICES,
        **result,
        "retried_duplicates": sum(s["duplicate"] for s in stats),
    }

"""A bounded load test: concurrent uploaders at a steady request rate against ``ldp serve``.

Used by tests/reliability/test_reliability_load.py (10 s) and bench/reliability.py (60 s).
Reports are perturbed before the clock starts, so the figures measure the collector. Each
uploader thread sends its batches on a fixed schedule (open loop: a slow answer does not lower
the offered rate); latency is measured per request from its scheduled start.
"""

from __future__ import annotations

import secrets
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import requests

from client_sdk.mechanisms import from_config
from tests.support.server import CollectorProcess

#: Seconds of load before the measurement starts (not counted in the figures).
WARMUP_SECONDS = 2.0
#: Seconds between RSS samples, and how many samples make the start and end medians.
RSS_EVERY = 0.5
RSS_EDGE = 5


def rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and its children (gunicorn master + workers), from /proc."""
    total = 0
    for p in [pid, *_children(pid)]:
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            pass
    return total


def _children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


@dataclass
class LoadResult:
    seconds: float
    uploaders: int
    batch: int
    requests: int
    reports_sent: int
    reports_accepted: int
    errors: int
    requests_per_s: float
    reports_per_s: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    rss_start_mb: float
    rss_end_mb: float
    rss_max_mb: float
    warmup_reports: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {k: round(v, 2) if isinstance(v, float) else v for k, v in asdict(self).items()}


def run_load(
    srv: CollectorProcess,
    campaign: dict[str, Any],
    *,
    seconds: float,
    rate: float,
    uploaders: int = 4,
    batch: int = 50,
    seed: int = 0,
) -> LoadResult:
    """Offer ``rate`` upload requests per second (``batch`` reports each) for ``seconds``."""
    mech = from_config(campaign["mechanism"])
    day = time.strftime("%Y-%m-%d", time.gmtime())
    rng = np.random.default_rng(seed)
    url = f"{srv.url}/v1/campaigns/{campaign['id']}/reports"
    headers = srv.headers("ingest")

    def make_bodies(per_uploader: int) -> list[list[dict[str, Any]]]:
        out = []
        for _ in range(uploaders):
            values = rng.integers(0, mech.k, per_uploader * batch)
            payloads = mech.encode_many(mech.perturb_many(values, rng=rng))
            out.append([{"id": secrets.token_hex(16), "day": day, "payload": p} for p in payloads])
        return out

    latencies: list[float] = []
    errors = [0]
    accepted = [0]
    lock = threading.Lock()
    interval = uploaders / rate

    def phase(duration: float, bodies: list[list[dict[str, Any]]]) -> float:
        start = time.monotonic() + 0.1

        def upload(u: int) -> None:
            with requests.Session() as session:
                for i in range(len(bodies[u]) // batch):
                    due = start + (i + u / uploaders) * interval
                    if due - start >= duration:
                        break
                    delay = due - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                    items = bodies[u][i * batch : (i + 1) * batch]
                    try:
                        r = session.post(
                            url,
                            json={"digest": campaign["digest"], "reports": items},
                            headers=headers,
                            timeout=30,
                        )
                        ok = r.status_code == 200
                        got = r.json()["accepted"] if ok else 0
                    except (requests.RequestException, ValueError):
                        ok, got = False, 0
                    took = time.monotonic() - due
                    with lock:
                        latencies.append(took)
                        accepted[0] += got
                        if not ok:
                            errors[0] += 1

        threads = [threading.Thread(target=upload, args=(u,)) for u in range(uploaders)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return start

    # Warm-up at the same rate (imports, both workers' allocators, SQLite pages), not measured.
    phase(min(WARMUP_SECONDS, seconds), make_bodies(int(WARMUP_SECONDS * rate / uploaders) + 1))
    warm_accepted = accepted[0]
    latencies.clear()
    errors[0] = accepted[0] = 0
    bodies = make_bodies(int(seconds * rate / uploaders) + 1)
    assert srv.process is not None
    pid = srv.process.pid
    # RSS sampled every RSS_EVERY seconds: a worker's RSS swings by several MiB between
    # requests (allocator arenas), so start and end are medians of the first and last samples.
    samples = [rss_bytes(pid)]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(RSS_EVERY):
            samples.append(rss_bytes(pid))

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = phase(seconds, bodies)
    elapsed = max(time.monotonic() - start, 1e-9)
    done.set()
    sampler.join()
    samples.append(rss_bytes(pid))
    edge = max(1, min(RSS_EDGE, len(samples) // 3))
    rss_start = float(np.median(samples[:edge]))
    rss_end = float(np.median(samples[-edge:]))
    lat = np.asarray(latencies) * 1000
    n = len(latencies)
    return LoadResult(
        seconds=elapsed,
        uploaders=uploaders,
        batch=batch,
        requests=n,
        reports_sent=n * batch,
        reports_accepted=accepted[0],
        errors=errors[0],
        requests_per_s=n / elapsed,
        reports_per_s=accepted[0] / elapsed,
        p50_ms=float(np.percentile(lat, 50)) if n else 0.0,
        p99_ms=float(np.percentile(lat, 99)) if n else 0.0,
        max_ms=float(lat.max()) if n else 0.0,
        rss_start_mb=rss_start / 2**20,
        rss_end_mb=rss_end / 2**20,
        rss_max_mb=max(samples) / 2**20,
        warmup_reports=warm_accepted,
    )

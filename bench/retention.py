"""Retention over a simulated 90 days: stored size per day stays flat once days age out.

Each simulated day (advanced by this benchmark, not the wall clock) ingests ``--per-day``
reports of one campaign (horizon 1 day, ``--retention`` days) in batches, then runs the
retention sweep (``collector.retention.sweep``, what ``ldp retention run`` and the service do)
while another thread keeps ingesting into a second campaign; it prints per day the stored
reports and bytes (report id + payload), the database's used size, the reports deleted, the
sweep's time and longest chunk, the longest 500-report batch of the day's ingest, and the longest
50-report upload of the other campaign without a sweep (``base_ms``, 5 uploads) and while the
sweep runs (``stall_ms``).

Run: .venv/bin/python bench/retention.py [--days 90 --per-day 2000 --retention 30]
     [--backends sqlite,postgresql] [--url postgresql://postgres@127.0.0.1/postgres]

``--scale`` runs instead the measurements at scale of ``bench/retention_scale.py``: PostgreSQL
ingest rate unpartitioned vs partitioned, each without and with a sweep running (interleaved
repeats), the time to drop one day's partition of ``--drop-reports`` reports, and SQLite's
chunked delete of one day of ``--delete-reports`` reports, each with the longest ingest stall:
     nice -n 10 .venv/bin/python bench/retention.py --scale [--repeats 2 --seconds 8
     --processes 2 --drop-reports 1000000 --delete-reports 1000000 --delete-chunk 500]
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.ingest_scaling import DEFAULT_PG, drop_postgres, fresh_postgres  # noqa: E402
from collector.campaigns import Campaign, campaign_from_request  # noqa: E402
from collector.ingest import ingest_batch  # noqa: E402
from collector.retention import sweep  # noqa: E402
from collector.storage import Storage, open_storage  # noqa: E402

DAY0 = dt.date(2026, 1, 1)
BATCH = 500


def used_bytes(store: Storage) -> int:
    """Bytes the database uses for data: SQLite pages in use (file pages minus free ones);
    PostgreSQL ``pg_total_relation_size`` of ``reports`` (heap, indexes, TOAST)."""
    if hasattr(store, "url"):
        with store._conn() as conn:  # noqa: SLF001 - a benchmark reads the server's own figure
            return int(conn.execute(
                "SELECT pg_total_relation_size('reports') + coalesce((SELECT "
                "sum(pg_total_relation_size(relid)) FROM pg_partition_tree('reports') "
                "WHERE relid <> 'reports'::regclass), 0)"
            ).fetchone()[0])
    with store._read() as conn:  # type: ignore[attr-defined]  # noqa: SLF001
        page = conn.execute("PRAGMA page_size").fetchone()[0]
        count = conn.execute("PRAGMA page_count").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    return int((count - free) * page)


def _upload(
    store: Storage, camp: Campaign, day: dt.date, texts: list[Any], tag: str, *, new: bool = True
) -> float:
    """Ingest ``texts`` as reports of ``day`` in batches; the longest batch's seconds.
    ``new=False``: the ids may be stored already (a retry: a write transaction that adds
    nothing)."""
    longest = 0.0
    for start in range(0, len(texts), BATCH):
        reports = [
            {
                "id": f"{tag}-{day.isoformat()}-{start + i:010d}",
                "day": day.isoformat(),
                "payload": p,
            }
            for i, p in enumerate(texts[start : start + BATCH])
        ]
        began = time.perf_counter()
        result = ingest_batch(
            store,
            camp,
            {"digest": camp.digest, "reports": reports},
            max_reports=BATCH,
            today=day,
        )
        longest = max(longest, time.perf_counter() - began)
        assert result.accepted + result.duplicate == len(reports), result.errors[:2]
        assert result.accepted == len(reports) or not new
    return longest


def run(database: str, label: str, days: int, per_day: int, retention: int) -> None:
    store = open_storage(database)
    store.migrate()
    camp = campaign_from_request(
        {
            "id": "bench",
            "domain": [f"v{i}" for i in range(16)],
            "mechanism": "oue",
            "epsilon": 1.0,
            "horizon_days": 1,
            "retention_days": retention,
        },
        today=DAY0,
    )
    side = campaign_from_request(
        {
            "id": "side",
            "domain": ["a", "b"],
            "epsilon": 1.0,
            "horizon_days": 1,
            "retention_days": 3660,
        },
        today=DAY0,
    )
    store.create_campaign(camp)
    store.create_campaign(side)
    mech = camp.mechanism
    texts = mech.encode_many(mech.perturb_many(np.arange(per_day) % 16, rng=1))
    side_texts = side.mechanism.encode_many(side.mechanism.perturb_many(np.zeros(50, int), rng=2))
    print(f"\n{label}: {per_day} reports/day, retention {retention} days, {days} days")
    print(
        "day  stored_reports  stored_bytes  used_bytes  deleted  sweep_ms  chunk_ms"
        "  ingest_max_ms  base_ms  stall_ms"
    )
    worst_stall = worst_base = 0.0
    all_base: list[float] = []
    all_stall: list[float] = []
    for d in range(days):
        day = DAY0 + dt.timedelta(days=d)
        ingest_max = _upload(store, camp, day, texts, "r")
        # The same small uploads without a sweep: the day's baseline for the stall column.
        base_calls = [_upload(store, side, DAY0, side_texts, "s", new=False) for _ in range(5)]
        base = max(base_calls)
        stop = threading.Event()
        stalls: list[float] = []

        def side_ingest(stop: threading.Event = stop, stalls: list[float] = stalls) -> None:
            while not stop.is_set():
                stalls.append(_upload(store, side, DAY0, side_texts, "s", new=False))

        worker = threading.Thread(target=side_ingest)
        worker.start()
        began = time.perf_counter()
        done = sweep(store, today=day)
        took = time.perf_counter() - began
        stop.set()
        worker.join()
        assert done is not None
        mine = next(c for c in done if c.campaign == "bench")
        usage = next(u for u in store.usage() if u.campaign == "bench")
        stall = max(stalls, default=0.0)
        if mine.deleted:
            worst_stall = max(worst_stall, stall)
            worst_base = max(worst_base, base)
            all_base += base_calls
            all_stall += stalls
        print(
            f"{d + 1:3d}  {usage.reports:14d}  {usage.bytes:12d}  {used_bytes(store):10d}  "
            f"{mine.deleted:7d}  {took * 1000:8.1f}  {mine.longest_chunk_ms:8.2f}  "
            f"{ingest_max * 1000:13.2f}  {base * 1000:7.2f}  {stall * 1000:8.2f}",
            flush=True,
        )
    ms = {k: np.percentile(v, [50, 99]) * 1000 for k, v in (("b", all_base), ("s", all_stall))}
    print(
        f"{label}: 50-report uploads on the days a sweep deleted: median {ms['b'][0]:.2f} ms, "
        f"p99 {ms['b'][1]:.2f} ms without a sweep ({len(all_base)} calls); median "
        f"{ms['s'][0]:.2f} ms, p99 {ms['s'][1]:.2f} ms while it ran ({len(all_stall)} calls)"
    )
    print(
        f"{label}: longest ingest call (50 reports) while a sweep deleted: "
        f"{worst_stall * 1000:.2f} ms"
    )
    store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=90)
    parser.add_argument("--per-day", type=int, default=2000)
    parser.add_argument("--retention", type=int, default=30)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--url", default=DEFAULT_PG, help="server where databases may be created")
    parser.add_argument("--scale", action="store_true", help="run bench/retention_scale.py")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--drop-reports", type=int, default=1_000_000)
    parser.add_argument("--delete-reports", type=int, default=1_000_000)
    parser.add_argument("--delete-chunk", type=int, default=500, help="SQLite: reports per chunk")
    parser.add_argument("--parts", default="rate,drop,sqlite", help="--scale parts to run")
    args = parser.parse_args()
    if args.scale:
        from bench import retention_scale

        parts = args.parts.split(",")
        if "rate" in parts:
            retention_scale.ingest_rates(args.url, args.repeats, args.processes, args.seconds)
        if "drop" in parts:
            retention_scale.partition_drop(args.url, args.drop_reports)
        if "sqlite" in parts:
            retention_scale.sqlite_delete(args.delete_reports, args.repeats, args.delete_chunk)
        return
    for backend in args.backends.split(","):
        if backend == "sqlite":
            with tempfile.TemporaryDirectory() as tmp:
                run(str(Path(tmp) / "bench.db"), "SQLite", args.days, args.per_day, args.retention)
        else:
            url = fresh_postgres(args.url)
            try:
                run(url, "PostgreSQL", args.days, args.per_day, args.retention)
            finally:
                drop_postgres(args.url, url)


if __name__ == "__main__":
    main()

"""Retention at scale (issue 19): what ``bench/retention.py --scale`` runs.

1. PostgreSQL ingest rate, interleaved in one run: the unpartitioned schema (4) and the
   partitioned one (5), each without and with a retention sweep running in another process
   (the sweep deletes 250,000 aged reports: on the partitioned schema one aged day is dropped
   whole and one, kept by another campaign, is deleted in chunks; unpartitioned, all in
   chunks). ``--processes`` ingesting processes send 500-report uploads for ``--seconds``.
2. PostgreSQL: the time to drop one day's partition of ``--drop-reports`` reports (count,
   then ``DETACH ... CONCURRENTLY`` + ``DROP``) and the longest 50-report ingest meanwhile.
3. SQLite: deleting one day of ``--delete-reports`` reports in chunks of ``--delete-chunk``,
   and the 50-report ingests meanwhile (another process, as a second worker would be), with
   the chunked delete as it was (``BackToBackSQLite``: chunks back to back, each commit
   fsynced) and as it is (pauses, unsynced chunks, own checkpoints), ``--repeats`` times
   each, alternating, on copies of one file.

Aged reports are written by SQL (``generate_series``: same payload, random 32-character ids),
not through ingest, to keep the run short; the ingest measured is the collector's own path.
"""

from __future__ import annotations

import datetime as dt
import multiprocessing as mp
import os
import shutil
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.ingest_scaling import drop_postgres, fresh_postgres
from collector.campaigns import Campaign, campaign_from_request
from collector.ingest import ingest_batch
from collector.retention import sweep
from collector.storage import PartitionDrop, PurgeResult, Storage, open_storage
from collector.storage.postgres import PostgresStorage
from collector.storage.postgres_schema import MIGRATIONS, version_table_sql
from collector.storage.sqlite import SQLiteStorage

TODAY = dt.date(2026, 3, 1)
OLD_DROP = TODAY - dt.timedelta(days=10)  # only campaign "gone": dropped whole
OLD_SHARED = TODAY - dt.timedelta(days=4)  # "gone" and "bench": chunked delete of "gone"


class Unpartitioned(PostgresStorage):
    """The schema before migration 5 (one ``reports`` table, key ``(campaign, report_id)``),
    for comparison only."""

    insert_reports_sql = PostgresStorage.insert_reports_sql.replace(
        "(campaign, window_start, report_id)", "(campaign, report_id)"
    )

    def migrate(self) -> int:
        with self._conn() as conn, conn.transaction():
            conn.execute(version_table_sql())
            for number in range(1, 5):
                for statement in MIGRATIONS[number - 1]:
                    conn.execute(statement)
                conn.execute("INSERT INTO schema_version (version) VALUES (%s)", (number,))
            # What a staging-off upload of today's code reads besides (it skips ids staged by
            # workers staging, PostgresStorage._lock_slots): empty stand-ins, never written.
            conn.execute(
                "CREATE TABLE mix_slots (writing smallint NOT NULL, other text NOT NULL); "
                "INSERT INTO mix_slots VALUES (0, 'clean'); "
                "CREATE TABLE staged_reports_0 (slot smallint, campaign integer, report_id text); "
                "CREATE TABLE staged_reports_1 (slot smallint, campaign integer, report_id text)"
            )
        return 4

    def ensure_partitions(self, days: Any) -> list[str]:
        self._ranges = [(dt.date.min, dt.date.max)]
        return []

    def drop_aged_partitions(self, marks: Any) -> PartitionDrop:
        return PartitionDrop((), {}, 0.0)

    def purge_reports(self, campaign: Campaign, before: str, *, chunk: int = 500) -> PurgeResult:
        """The chunked delete of schema 4, as main had it (ctid chunks through the
        ``reports_window`` index, then ``VACUUM reports``)."""
        with self._conn() as conn:
            pk = self._pk(conn, campaign)
            conn.execute(
                "INSERT INTO retention (campaign, purged_before) VALUES (%s, %s::date) "
                "ON CONFLICT (campaign) DO UPDATE SET purged_before = "
                "greatest(retention.purged_before, excluded.purged_before)",
                (pk, before),
            )
        deleted = chunks = 0
        longest = 0.0
        while True:
            began = time.perf_counter()
            with self._conn() as conn:
                count = conn.execute(
                    "DELETE FROM reports WHERE ctid = ANY (ARRAY(SELECT ctid FROM reports "
                    "WHERE campaign = %s AND window_start < %s::date LIMIT %s))",
                    (pk, before, chunk),
                ).rowcount
            if count <= 0:
                break
            longest = max(longest, time.perf_counter() - began)
            deleted += count
            chunks += 1
        if deleted:
            with self._conn() as conn:
                conn.execute("VACUUM reports")
        return PurgeResult(deleted=deleted, chunks=chunks, longest_chunk=longest)


class BackToBackSQLite(SQLiteStorage):
    """SQLite's chunked delete as it was before the pauses (chunks back to back, each commit
    fsynced, checkpoints left to the automatic one), for comparison only."""

    def purge_reports(self, campaign: Campaign, before: str, *, chunk: int = 500) -> PurgeResult:
        """Chunked delete (before): each chunk's ids found by a read outside any write lock,
        then deleted by primary key in one ``BEGIN IMMEDIATE`` transaction, the next at once."""
        with self._write() as conn:
            pk = self._pk(conn, campaign)
            conn.execute(
                "INSERT INTO retention (campaign, purged_before) VALUES (?, ?) "
                "ON CONFLICT (campaign) DO UPDATE SET purged_before = "
                "max(coalesce(purged_before, ''), excluded.purged_before)",
                (pk, before),
            )
        deleted = chunks = 0
        longest = 0.0
        after = ""
        while True:
            with self._read() as conn:
                ids = [
                    r[0]
                    for r in conn.execute(
                        "SELECT report_id FROM reports WHERE campaign = ? AND report_id > ? "
                        "AND window_start < ? ORDER BY report_id LIMIT ?",
                        (pk, after, before, chunk),
                    )
                ]
            if not ids:
                break
            after = ids[-1]
            with self._write() as conn:
                began = time.perf_counter()  # lock held from here (waiting for it excluded)
                cur = conn.execute(
                    "DELETE FROM reports WHERE campaign = ? AND window_start < ? AND report_id "
                    f"IN ({','.join('?' * len(ids))})",
                    (pk, before, *ids),
                )
                deleted += cur.rowcount
            longest = max(longest, time.perf_counter() - began)
            chunks += 1
        with self._write() as conn:  # staged reports of those windows (a few, if any)
            began = time.perf_counter()
            deleted += conn.execute(
                "DELETE FROM staged_reports WHERE campaign = ? AND window_start < ?", (pk, before)
            ).rowcount
            longest = max(longest, time.perf_counter() - began)
        return PurgeResult(deleted=deleted, chunks=chunks, longest_chunk=longest)


def _open(url: str, partitioned: bool) -> PostgresStorage:
    return PostgresStorage(url) if partitioned else Unpartitioned(url)


def _campaign(cid: str, retention: int, k: int = 16) -> Campaign:
    body = {
        "id": cid,
        "domain": [f"v{i}" for i in range(k)],
        "mechanism": "oue",
        "epsilon": 1.0,
        "horizon_days": 1,
        "retention_days": retention,
    }
    return campaign_from_request(body, today=TODAY)


def _payload(camp: Campaign) -> str:
    mech = camp.mechanism
    import json

    return json.dumps(mech.encode_many(mech.perturb_many(np.zeros(1, int), rng=1))[0])


def _fill_pg(url: str, campaign: str, day: dt.date, count: int, payload: str) -> float:
    """Insert ``count`` reports of ``day`` by SQL, 1 M per statement; seconds taken."""
    import psycopg

    began = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as conn:
        pk = conn.execute("SELECT pk FROM campaigns WHERE id = %s", (campaign,)).fetchone()[0]
        for start in range(0, count, 1_000_000):
            stop = min(count, start + 1_000_000)
            conn.execute(
                "INSERT INTO reports (campaign, report_id, window_start, payload) "
                "SELECT %s, md5(%s || i::text), %s::date, %s "
                "FROM generate_series(%s::bigint, %s::bigint) i",
                (pk, campaign + day.isoformat(), day.isoformat(), payload, start, stop - 1),
            )
        # The running tally of the same reports (its n is what a partition drop reports).
        conn.execute(
            "INSERT INTO tally_shards AS t (campaign, window_start, shard, n, support) "
            "VALUES (%s, %s::date, 0, %s, array_fill(0::bigint, ARRAY[16])) "
            "ON CONFLICT (campaign, window_start, shard) DO UPDATE SET n = t.n + excluded.n",
            (pk, day.isoformat(), count),
        )
        conn.execute("VACUUM ANALYZE reports")
    return time.perf_counter() - began


def _uploader(
    database: str,
    partitioned: bool,
    tag: str,
    size: int,
    seconds: float,
    out: Any,
    sweeping: Any = None,
) -> None:
    """Ingest ``size``-report uploads into campaign "bench" for ``seconds`` (and as long as
    ``sweeping`` is set); sends (reports accepted, elapsed seconds, per-upload seconds, server
    CPU ticks) to ``out``."""
    store: Storage = _open(database, partitioned) if "://" in database else open_storage(database)
    camp = store.get_campaign("bench")
    assert camp is not None
    mech = camp.mechanism
    texts = mech.encode_many(mech.perturb_many(np.arange(size) % mech.k, rng=7))
    lat: list[float] = []
    accepted = 0
    began = time.perf_counter()
    n = 0
    while time.perf_counter() - began < seconds or (sweeping is not None and sweeping.is_set()):
        reports = [
            {"id": f"{tag}-{n:08d}-{i:06d}", "day": TODAY.isoformat(), "payload": p}
            for i, p in enumerate(texts)
        ]
        t0 = time.perf_counter()
        result = ingest_batch(
            store,
            camp,
            {"digest": camp.digest, "reports": reports},
            max_reports=size,
            today=TODAY,
        )
        lat.append(time.perf_counter() - t0)
        accepted += result.accepted
        n += 1
    elapsed = time.perf_counter() - began
    out.put((accepted, elapsed, lat, _backend_ticks(database)))
    store.close()


def _backend_ticks(database: str) -> dict[int, int]:
    """CPU ticks (user + system) used so far by each server process of this database."""
    if "://" not in database:
        return {}
    import psycopg

    with psycopg.connect(database) as conn:
        pids = [
            r[0]
            for r in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            )
        ]
    out = {}
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[pid] = int(fields[11]) + int(fields[12])
    return out


def _wal_lsn(url: str) -> int:
    import psycopg

    with psycopg.connect(url) as conn:
        return int(conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0])


def _sweeper(database: str, partitioned: bool, out: Any, sweeping: Any) -> None:
    store: Storage = _open(database, partitioned) if "://" in database else open_storage(database)
    began = time.perf_counter()
    done = sweep(store, today=TODAY)
    took = time.perf_counter() - began
    assert done is not None
    sweeping.clear()
    out.put((took, sum(c.deleted for c in done), sum(c.dropped for c in done)))
    store.close()


def _run_uploaders(
    database: str,
    partitioned: bool,
    procs: int,
    size: int,
    seconds: float,
    tag: str,
    with_sweep: bool = False,
) -> tuple[float, list[float], tuple[float, int, int] | None, dict[str, float]]:
    """Reports/s, per-upload seconds, the sweep's (seconds, deleted, dropped), and costs:
    ``pg_cpu_s`` (this database's server processes), ``client_cpu_s`` (the ingesting
    processes: the collector's validation and storage calls), ``wal_bytes``, ``reports``."""
    ctx = mp.get_context("fork")
    wal0 = _wal_lsn(database) if "://" in database else 0
    import os
    import resource

    own0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    out: Any = ctx.Queue()
    sweep_out: Any = ctx.Queue()
    sweeping = ctx.Event()
    if with_sweep:
        sweeping.set()  # the uploaders go on until the sweep is over
    workers = [
        ctx.Process(
            target=_uploader,
            args=(database, partitioned, f"{tag}{p}", size, seconds, out, sweeping),
        )
        for p in range(procs)
    ]
    for w in workers:
        w.start()
    sweeper = None
    if with_sweep:
        time.sleep(0.3)  # the uploaders are under way
        sweeper = ctx.Process(target=_sweeper, args=(database, partitioned, sweep_out, sweeping))
        sweeper.start()
    results = [out.get() for _ in workers]
    for w in workers:
        w.join()
    swept = None
    if sweeper is not None:
        swept = sweep_out.get()
        sweeper.join()
    rate = sum(r[0] for r in results) / max(r[1] for r in results)
    lat = [x for r in results for x in r[2]]
    ticks: dict[int, int] = {}
    for r in results:
        for pid, t in r[3].items():
            ticks[pid] = max(ticks.get(pid, 0), t)
    own1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cost = {
        "reports": float(sum(r[0] for r in results)),
        "pg_cpu_s": sum(ticks.values()) / os.sysconf("SC_CLK_TCK"),
        "client_cpu_s": (own1.ru_utime + own1.ru_stime) - (own0.ru_utime + own0.ru_stime),
        "wal_bytes": float(_wal_lsn(database) - wal0) if "://" in database else 0.0,
    }
    return rate, lat, swept, cost


def _prepare_pg(url: str, partitioned: bool, aged: bool) -> None:
    store = _open(url, partitioned)
    store.migrate()
    bench, gone = _campaign("bench", 5), _campaign("gone", 1)
    store.create_campaign(bench)
    store.create_campaign(gone)
    store.ensure_partitions([OLD_DROP, OLD_SHARED, TODAY])
    store.close()
    if aged:
        _fill_pg(url, "gone", OLD_DROP, 150_000, _payload(gone))
        _fill_pg(url, "gone", OLD_SHARED, 100_000, _payload(gone))
        _fill_pg(url, "bench", OLD_SHARED, 20_000, _payload(bench))


def ingest_rates(server: str, repeats: int, procs: int, seconds: float) -> None:
    print(
        f"\nPostgreSQL ingest rate: {procs} processes x 500-report uploads for {seconds:.0f} s, "
        f"{repeats} interleaved repeats"
    )
    configs = [
        ("unpartitioned", False, False),
        ("partitioned", True, False),
        ("unpartitioned + sweep", False, True),
        ("partitioned + sweep", True, True),
    ]
    rates: dict[str, list[float]] = {c[0]: [] for c in configs}
    print(
        "run  schema                  reports/s  p50_ms  p99_ms  max_ms  sweep_s  deleted  "
        "dropped  pg_cpu_us/r  client_cpu_us/r  wal_B/r  disk_B/r"
    )
    for r in range(repeats):
        for label, partitioned, with_sweep in configs:
            url = fresh_postgres(server)
            try:
                _prepare_pg(url, partitioned, with_sweep)
                rate, lat, swept, cost = _run_uploaders(
                    url, partitioned, procs, 500, seconds, f"r{r}", with_sweep
                )
                size = _reports_bytes(url)
            finally:
                drop_postgres(server, url)
            rates[label].append(rate)
            p50, p99 = np.percentile(lat, [50, 99]) * 1000
            extra = (
                f"{swept[0]:7.2f}  {swept[1]:7d}  {swept[2]:7d}"
                if swept
                else "      -        -        -"
            )
            n = cost["reports"]
            per = (
                f"{cost['pg_cpu_s'] / n * 1e6:11.1f}  {cost['client_cpu_s'] / n * 1e6:15.1f}  "
                f"{cost['wal_bytes'] / n:7.0f}  {size / n:8.0f}"
                if not with_sweep
                else "          -                -        -         -"
            )
            print(
                f"{r + 1:3d}  {label:22s}  {rate:10,.0f}  {p50:6.1f}  {p99:6.1f}  "
                f"{max(lat) * 1000:6.1f}  {extra}  {per}",
                flush=True,
            )
    for label, values in rates.items():
        spread = (max(values) - min(values)) / statistics.median(values) * 100
        print(
            f"{label:22s}: median {statistics.median(values):,.0f} reports/s, runs "
            f"{' / '.join(f'{v:,.0f}' for v in values)} (spread {spread:.0f} %)"
        )


def _reports_bytes(url: str) -> int:
    import psycopg

    with psycopg.connect(url) as conn:
        return int(
            conn.execute(
                "SELECT pg_total_relation_size('reports') + coalesce((SELECT "
                "sum(pg_total_relation_size(relid)) FROM pg_partition_tree('reports') "
                "WHERE relid <> 'reports'::regclass), 0)"
            ).fetchone()[0]
        )


def partition_drop(server: str, count: int) -> None:
    url = fresh_postgres(server)
    try:
        _prepare_pg(url, True, False)
        gone = _campaign("gone", 1)
        took = _fill_pg(url, "gone", OLD_DROP, count, _payload(gone))
        import psycopg

        with psycopg.connect(url) as conn:
            size = conn.execute(
                "SELECT pg_total_relation_size(%s)", (f"reports_p{OLD_DROP:%Y%m%d}",)
            ).fetchone()[0]
        print(
            f"\nPostgreSQL: one day's partition of {count:,} reports ({size / 1e6:,.0f} MB, "
            f"written by SQL in {took:.0f} s)"
        )
        _, base, _, _ = _run_uploaders(url, True, 1, 50, 3.0, "base")
        ctx = mp.get_context("fork")
        out: Any = ctx.Queue()
        stop: Any = ctx.Queue()
        worker = ctx.Process(target=_uploader_until, args=(url, True, out, stop))
        worker.start()
        time.sleep(0.5)
        store = PostgresStorage(url)
        began = time.perf_counter()
        marks = [(_campaign("bench", 5), "2026-02-24"), (gone, "2026-02-28")]
        dropped = store.drop_aged_partitions(marks)
        whole = time.perf_counter() - began
        store.close()
        stop.put(True)
        _, _, lat = out.get()
        worker.join()
        print(
            f"dropped {dropped.partitions} holding {sum(dropped.deleted.values()):,} reports: "
            f"{whole:.2f} s in all (marks and counts from the tallies "
            f"{whole - dropped.longest:.2f} s, DETACH CONCURRENTLY + DROP "
            f"{dropped.longest * 1000:.1f} ms)"
        )
        print(
            "50-report uploads: without the drop median "
            f"{np.median(base) * 1000:.2f} ms, max {max(base) * 1000:.2f} ms ({len(base)} calls); "
            f"during it median {np.median(lat) * 1000:.2f} ms, max {max(lat) * 1000:.2f} ms "
            f"({len(lat)} calls)"
        )
    finally:
        drop_postgres(server, url)


def sqlite_delete(count: int, repeats: int = 1, chunk: int = 500) -> None:
    """One file of ``count`` aged reports, copied per run; the chunked delete as it was
    (``BackToBackSQLite``) and as it is, alternating ``repeats`` times in one run."""
    with tempfile.TemporaryDirectory() as tmp:
        template = str(Path(tmp) / "template.db")
        store = open_storage(template)
        store.migrate()
        bench, gone = _campaign("bench", 5), _campaign("gone", 1)
        store.create_campaign(bench)
        store.create_campaign(gone)
        store.close()
        began = time.perf_counter()
        conn = sqlite3.connect(template)
        pk = conn.execute("SELECT pk FROM campaigns WHERE id = 'gone'").fetchone()[0]
        payload = _payload(gone)
        rng = np.random.default_rng(3)
        for start in range(0, count, 100_000):
            ids = [f"{x:032x}" for x in rng.integers(0, 2**63, min(100_000, count - start))]
            conn.executemany(
                "INSERT OR IGNORE INTO reports VALUES (?, ?, ?, ?)",
                [(pk, i, OLD_DROP.isoformat(), payload) for i in ids],
            )
            conn.commit()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
        print(
            f"\nSQLite: one day of {count:,} reports (written by SQL in "
            f"{time.perf_counter() - began:.0f} s), deleted in chunks of {chunk} by the sweep; "
            "'before': chunks back to back, 'after': paused chunks (collector/storage/sqlite.py)"
        )
        for run in range(repeats):
            for label, kind in (("before", BackToBackSQLite), ("after", SQLiteStorage)):
                path = str(Path(tmp) / f"{label}.db")
                shutil.copyfile(template, path)
                _sqlite_delete_once(path, kind, f"{label} #{run + 1}", chunk)
                os.unlink(path)


def _sqlite_delete_once(path: str, kind: type[SQLiteStorage], label: str, chunk: int) -> None:
    load0 = os.getloadavg()
    _, base, _, _ = _run_uploaders(path, False, 1, 50, 3.0, "base")
    ctx = mp.get_context("fork")
    out: Any = ctx.Queue()
    sweep_out: Any = ctx.Queue()
    # The uploader runs as long as the sweep: it is stopped after the sweep returns.
    worker = ctx.Process(target=_uploader_until, args=(path, False, out, sweep_out))
    worker.start()
    time.sleep(0.5)
    store = kind(path)
    began = time.perf_counter()
    done = sweep(store, today=TODAY, chunk=chunk)
    took = time.perf_counter() - began
    store.close()
    sweep_out.put(True)
    _, _, lat = out.get()
    worker.join()
    load1 = os.getloadavg()
    assert done is not None
    mine = next(c for c in done if c.campaign == "gone")
    ms = np.percentile(lat, [50, 99]) * 1000
    print(
        f"{label}: deleted {mine.deleted:,} reports in {mine.chunks:,} chunks: {took:.1f} s "
        f"({mine.deleted / took:,.0f} reports/s), longest chunk {mine.longest_chunk_ms:.1f} ms; "
        f"load average {load0[0]:.2f} -> {load1[0]:.2f}"
    )
    print(
        f"{label}: 50-report uploads without the sweep median {np.median(base) * 1000:.2f} ms, "
        f"p99 {np.percentile(base, 99) * 1000:.2f} ms, max {max(base) * 1000:.2f} ms "
        f"({len(base)} calls); during it median {ms[0]:.2f} ms, p99 {ms[1]:.2f} ms, "
        f"max {max(lat) * 1000:.2f} ms ({len(lat)} calls)",
        flush=True,
    )


def _uploader_until(database: str, partitioned: bool, out: Any, stop: Any) -> None:
    """50-report uploads into campaign "bench" until ``stop`` gets an item."""
    import queue

    store: Storage = _open(database, partitioned) if "://" in database else open_storage(database)
    camp = store.get_campaign("bench")
    assert camp is not None
    mech = camp.mechanism
    texts = mech.encode_many(mech.perturb_many(np.arange(50) % mech.k, rng=7))
    lat: list[float] = []
    n = 0
    began = time.perf_counter()
    while True:
        try:
            stop.get_nowait()
            break
        except queue.Empty:
            pass
        reports = [
            {"id": f"until-{n:08d}-{i:06d}", "day": TODAY.isoformat(), "payload": p}
            for i, p in enumerate(texts)
        ]
        t0 = time.perf_counter()
        ingest_batch(
            store, camp, {"digest": camp.digest, "reports": reports}, max_reports=50, today=TODAY
        )
        lat.append(time.perf_counter() - t0)
        n += 1
    out.put((n * 50, time.perf_counter() - began, lat))
    store.close()

"""Does one hot tally row cap PostgreSQL ingest? Storage-level ingest rate by tally shard count.

Run: .venv/bin/python bench/tally_shards.py [--url postgresql://postgres@127.0.0.1/postgres]
                       [--shards 1,16] [--procs 1,2,4,8] [--seconds 5] [--batch 1000]

No HTTP: ``procs`` processes (each one ``PostgresStorage``, like gunicorn workers) call
``ingest`` in a loop with pre-built batches of ``--batch`` new oue reports into the same campaign
and window, on a fresh database per run. A shard count of 1 is the classic single running
tally row per window, which every ingest must lock until it commits; with S shards an
ingest locks one of S rows picked at random. Prints ingests/s, reports/s and the p99 time of
one ``ingest`` call, and checks the tallies against their recomputation.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.ingest_scaling import DEFAULT_PG, drop_postgres, fresh_postgres  # noqa: E402
from client_sdk.mechanisms import Tally, create  # noqa: E402
from collector.campaigns import Campaign  # noqa: E402
from collector.ingest import payload_json  # noqa: E402
from collector.storage.base import WindowBatch  # noqa: E402
from collector.storage.postgres import PostgresStorage  # noqa: E402
from collector.tallycheck import verify_tallies  # noqa: E402

BATCH = 1000
DAY = "2026-11-22"


def campaign() -> Campaign:
    mech = create("oue", epsilon=1.0, domain=[f"v{i}" for i in range(14)])
    return Campaign(
        id="shards",
        description="",
        mechanism_config=mech.config(),
        window="day",
        horizon_days=30,
        min_reports=1,
        created=DAY,
    )


def worker(
    url: str, shards: int, seconds: float, start_at: float, batch: int, out: mp.Queue
) -> None:
    camp = campaign()
    mech = camp.mechanism
    rng = np.random.default_rng(os.getpid())
    payloads = mech.encode_many(mech.perturb_many(rng.integers(0, mech.k, batch), rng=rng))
    decoded = mech.decode_many(payloads)
    texts = [payload_json(p) for p in payloads]
    full = Tally(batch, mech.support_counts(decoded))

    def tally(positions: object) -> Tally:
        if positions is None:
            return full
        sel = decoded[np.asarray(positions, dtype=np.int64)]
        return Tally(len(sel), mech.support_counts(sel))

    store = PostgresStorage(url, tally_shards=shards)
    store.get_campaign(camp.id)
    times: list[float] = []
    n = 0
    while time.time() < start_at:
        time.sleep(0.001)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        rows = [(f"{os.getpid()}-{n}-{i:06d}", texts[i]) for i in range(batch)]
        n += 1
        t0 = time.perf_counter()
        store.ingest(camp, {DAY: WindowBatch(rows, tally)})
        times.append(time.perf_counter() - t0)
    store.close()
    out.put(times)


def run(
    admin: str, shards: int, procs: int, seconds: float, batch: int
) -> tuple[float, float, bool]:
    url = fresh_postgres(admin)
    try:
        setup = PostgresStorage(url)
        setup.migrate()
        setup.create_campaign(campaign())
        setup.close()
        ctx = mp.get_context("spawn")
        out: mp.Queue = ctx.Queue()
        start_at = time.time() + 2.0
        ps = [
            ctx.Process(target=worker, args=(url, shards, seconds, start_at, batch, out))
            for _ in range(procs)
        ]
        for p in ps:
            p.start()
        times = [t for _ in ps for t in out.get()]
        for p in ps:
            p.join()
        check = PostgresStorage(url)
        ok = all(c.ok for c in verify_tallies(check, "shards"))
        check.close()
    finally:
        drop_postgres(admin, url)
    times.sort()
    return len(times) / seconds, times[int(0.99 * (len(times) - 1))] * 1000, ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=DEFAULT_PG, help="server where databases may be created")
    parser.add_argument("--shards", default="1,16")
    parser.add_argument("--procs", default="1,2,4,8")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--batch", type=int, default=BATCH, help="reports per ingest")
    args = parser.parse_args()
    print(f"storage-level PostgreSQL ingest, batches of {args.batch} new oue reports, one window")
    print(f"  {'shards':>6} {'procs':>5} {'ingests/s':>10} {'reports/s':>10} {'p99 ms':>8}  tally")
    failed = False
    for shards in (int(s) for s in args.shards.split(",")):
        for procs in (int(p) for p in args.procs.split(",")):
            rate, p99, ok = run(args.url, shards, procs, args.seconds, args.batch)
            failed = failed or not ok
            print(
                f"  {shards:>6} {procs:>5} {rate:>10,.1f} {rate * args.batch:>10,.0f} {p99:>8.1f}  "
                f"{'ok' if ok else 'DIFFERS'}",
                flush=True,
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

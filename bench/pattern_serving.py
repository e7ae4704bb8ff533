"""What ``postprocess=pattern`` costs an estimate query, on SQLite and PostgreSQL.

Run: python bench/pattern_serving.py [--windows 3] [--backends sqlite,postgresql]
     [--pg postgresql://postgres@127.0.0.1:5432/postgres] [--upsert] [--tally-cost]

Per backend and mechanism (OUE and SS at epsilon 2 on Adult occupation, k = 14): ``--windows``
daily windows of the 30,718 Adult values perturbed afresh, ingested through the collector's own
``ingest_batch`` (500 reports per call; the ingest path is the same for every post-processing,
except for ``ss+patterns``, SS whose tally also counts each reported subset, as ``auto``
creates it at epsilon 2: the ingest rate shows what keeping them costs). Then
:func:`collector.answers.campaign_answer` over the last window and over all of them,
``postprocess`` ``mle``, ``auto`` (the default) and ``pattern`` (median of ``--repeats`` calls,
ms), and the part of ``pattern`` spent reading and decoding the stored reports
(:func:`collector.answers.window_patterns`; none for ``ss+patterns``, served from its tally).

The alternative (a per-window pattern histogram kept beside the tally, updated in every ingest
transaction) is priced by a prototype on SQLite (``--upsert``): per 500-report upload, the
batch's histogram (from the decoded batch the collector already holds) upserted into a
``(campaign, window, code) -> count`` table in one transaction, against the collector's own
ingest call for the same 500 reports.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.ingest_scaling import DEFAULT_PG, drop_postgres, fresh_postgres  # noqa: E402
from bench.retention import _upload  # noqa: E402
from collector.answers import campaign_answer, window_patterns  # noqa: E402
from collector.campaigns import campaign_from_request  # noqa: E402
from collector.storage import open_storage  # noqa: E402
from simulator.adult import load_adult  # noqa: E402

DAY0 = dt.date(2026, 1, 1)
#: (shown as, mechanism, params): OUE; SS d = 2 without pattern counts (the explicit ``ss``
#: default); SS d = 2 keeping them in its tally (what ``auto`` creates at epsilon 2, k = 14).
CAMPAIGNS: tuple[tuple[str, str, dict[str, object]], ...] = (
    ("oue", "oue", {}),
    ("ss", "ss", {"d": 2}),
    ("ss+patterns", "ss", {"d": 2, "patterns": True}),
)


def _median_ms(fn: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def run(database: str, label: str, windows: int, repeats: int) -> None:
    labels, indices = load_adult("train").column("occupation")
    store = open_storage(database)
    store.migrate()
    try:
        for shown, mechanism, params in CAMPAIGNS:
            camp = campaign_from_request(
                {
                    "id": f"pat-{shown.replace('+', '-')}",
                    "domain": list(labels),
                    "mechanism": mechanism,
                    "epsilon": 2.0,
                    "horizon_days": windows + 1,
                    "params": params,
                },
                today=DAY0,
            )
            store.create_campaign(camp)
            mech = camp.mechanism
            rng = np.random.default_rng(7)
            days = [DAY0 + dt.timedelta(days=d) for d in range(windows)]
            began = time.perf_counter()
            for day in days:
                texts = mech.encode_many(mech.perturb_many(indices, rng=rng))
                _upload(store, camp, day, texts, mechanism)
            rate = windows * indices.size / (time.perf_counter() - began)
            for span, start in (("1 window", days[-1]), (f"{windows} windows", days[0])):
                times = {
                    post: _median_ms(
                        partial(
                            campaign_answer,
                            store,
                            camp,
                            start=start,
                            end=days[-1],
                            postprocess=post,
                        ),
                        repeats,
                    )
                    for post in ("mle", "auto", "pattern")
                }
                keys = [d.isoformat() for d in days if d >= start]
                read = "-"  # a tally that keeps its patterns is not read from the reports
                if not getattr(mech, "patterns", False):
                    ms = _median_ms(
                        partial(window_patterns, store, camp, keys, purged_before=None), repeats
                    )
                    read = f"{ms:.1f}"
                n = len(keys) * indices.size
                print(
                    f"{label:>10} {shown:>11} {span:>10} {n:>8,} {times['mle']:>8.1f} "
                    f"{times['auto']:>8.1f} {times['pattern']:>11.1f} {read:>9} {rate:>12,.0f}",
                    flush=True,
                )
    finally:
        store.close()


def tally_cost(calls: int = 2_000) -> None:
    """us per 500-report upload of SS d = 2 (k = 14, epsilon 2) with and without pattern counts:
    the batch's tally, and the SQLite backend's read-modify-write of the window's stored state
    (``tally_from`` of the JSON vector, ``+``, JSON of the sum)."""
    import json

    from client_sdk.mechanisms import create

    labels = [f"v{i}" for i in range(14)]
    batch = create("ss", epsilon=2.0, domain=labels, d=2).perturb_many(
        np.arange(500) % 14, rng=np.random.default_rng(1)
    )
    print(f"per 500-report upload, best of 3 x {calls:,} calls (us):")
    print(f"{'tally':>26} {'tally us':>9} {'stored-state update us':>23} {'numbers':>8}")
    for shown, _, params in CAMPAIGNS[1:]:
        mech = create("ss", epsilon=2.0, domain=labels, **params)
        tally = mech.tally(batch)
        text = json.dumps(tally.vector())

        def update(mech: object = mech, tally: object = tally, text: str = text) -> None:
            stored = mech.tally_from(500, json.loads(text))  # type: ignore[attr-defined]
            json.dumps((stored + tally).vector(), separators=(",", ":"))

        costs = []
        for fn in (partial(mech.tally, batch), update):
            best = math.inf
            for _ in range(3):
                began = time.perf_counter()
                for _ in range(calls):
                    fn()
                best = min(best, (time.perf_counter() - began) / calls * 1e6)
            costs.append(best)
        print(f"{shown:>26} {costs[0]:>9.1f} {costs[1]:>23.1f} {len(tally.vector()):>8}")


def upsert_cost(batches: int = 60) -> None:
    """ms per 500-report upload: the collector's ingest vs the histogram upsert of option (b)."""
    import sqlite3

    from aggregator.pattern import pattern_histogram

    labels, indices = load_adult("train").column("occupation")
    with tempfile.TemporaryDirectory() as tmp:
        store = open_storage(str(Path(tmp) / "ingest.db"))
        store.migrate()
        for eps in (0.5, 2.0):
            camp = campaign_from_request(
                {
                    "id": f"u{eps:g}".replace(".", "-"),
                    "domain": list(labels),
                    "mechanism": "oue",
                    "epsilon": eps,
                    "horizon_days": 1,
                },
                today=DAY0,
            )
            store.create_campaign(camp)
            mech = camp.mechanism
            rng = np.random.default_rng(3)
            values = rng.choice(indices, size=500 * batches)
            batch = mech.perturb_many(values, rng=rng)
            texts = mech.encode_many(batch)
            ingest = []
            for b in range(batches):
                ingest.append(_upload(store, camp, DAY0, texts[b * 500 : (b + 1) * 500], f"u{b}"))
            conn = sqlite3.connect(str(Path(tmp) / f"upsert-{eps:g}.db"), isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute(
                "CREATE TABLE pattern_counts (campaign INTEGER, window_start TEXT, code INTEGER,"
                " n INTEGER NOT NULL, PRIMARY KEY (campaign, window_start, code)) WITHOUT ROWID"
            )
            upsert, cells = [], []
            for b in range(batches):
                t = time.perf_counter()
                hist = pattern_histogram(mech, batch[b * 500 : (b + 1) * 500])
                codes = hist.patterns.astype(np.int64) @ (1 << np.arange(mech.k, dtype=np.int64))
                rows = [
                    (1, "2026-01-01", int(c), int(n))
                    for c, n in zip(codes, hist.counts, strict=True)
                ]
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany(
                    "INSERT INTO pattern_counts VALUES (?, ?, ?, ?) ON CONFLICT DO UPDATE "
                    "SET n = n + excluded.n",
                    rows,
                )
                conn.execute("COMMIT")
                upsert.append(time.perf_counter() - t)
                cells.append(len(rows))
            total = conn.execute("SELECT count(*) FROM pattern_counts").fetchone()[0]
            conn.close()
            print(
                f"OUE eps {eps:g}, k 14: ingest {statistics.median(ingest) * 1000:.1f} ms per "
                f"500 reports (collector, longest-batch median); histogram upsert "
                f"{statistics.median(upsert) * 1000:.1f} ms ({np.mean(cells):.0f} cells per "
                f"batch, {total} cells after {batches * 500} reports)",
                flush=True,
            )
        store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--windows", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--backends", default="sqlite,postgresql")
    parser.add_argument("--pg", default=DEFAULT_PG)
    parser.add_argument("--upsert", action="store_true", help="also price option (b)")
    parser.add_argument(
        "--tally-cost", action="store_true", help="also time SS tallies with/without patterns"
    )
    args = parser.parse_args()
    if args.upsert:
        upsert_cost()
    if args.tally_cost:
        tally_cost()
    backends = [b for b in args.backends.split(",") if b]  # --backends "": none
    if backends:
        print(
            f"{'backend':>10} {'mechanism':>11} {'range':>10} {'reports':>8} {'mle ms':>8} "
            f"{'auto ms':>8} {'pattern ms':>11} {'read ms':>9} {'ingest/s':>12}"
        )
    for backend in backends:
        if backend == "sqlite":
            with tempfile.TemporaryDirectory() as tmp:
                run(str(Path(tmp) / "pattern.db"), "sqlite", args.windows, args.repeats)
        else:
            url = fresh_postgres(args.pg)
            try:
                run(url, "postgresql", args.windows, args.repeats)
            finally:
                drop_postgres(args.pg, url)
    return 0


if __name__ == "__main__":
    sys.exit(main())

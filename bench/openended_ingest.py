"""Open-domain campaigns in the collector: upload and estimate time against the sketch's size.

Run: .venv/bin/python bench/openended_ingest.py [--backend sqlite|postgresql|both]
     [--reports 1000] [--uploads 4]

Every upload of an open-domain campaign reads and rewrites its window's sketch (SQLite: one JSON
array; PostgreSQL: a ``bigint[]`` shard summed element-wise), so its cost grows with the sketch
(``width``, ``depth`` and, for ``pem``, ``max_length``), not with the reports. For each backend
it starts ``ldp serve`` (one worker) on a fresh database, creates the campaigns below, posts
``--uploads`` batches of ``--reports`` real perturbed reports to each (random ids) and then asks
the estimate endpoint once (two candidates; for ``pem`` also the discovery), printing

  counts      the sketch's integers per window (``tally_size``)
  upload      min - max seconds of one POST, client side
  estimate    seconds of one GET /estimates (pem: discovery + candidates)

Figures depend on the machine's load: print ``uptime`` beside them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import secrets
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from client_sdk.mechanisms import from_config  # noqa: E402
from tests.support.server import collector_on  # noqa: E402

SPECS: dict[str, dict[str, Any]] = {
    "cms-256x8": {"mechanism": "cms", "epsilon": 4.0, "max_length": 16,
                  "params": {"width": 256, "depth": 8}},
    "pem-16-1024x16": {"mechanism": "pem", "epsilon": 4.0, "max_length": 16,
                       "params": {"width": 1024, "depth": 16}},
    "hcms-default": {"mechanism": "hcms", "epsilon": 4.0, "max_length": 16},
}  # fmt: skip


def run(backend: str, reports: int, uploads: int) -> None:
    with tempfile.TemporaryDirectory() as tmp, collector_on(backend, Path(tmp)) as srv:
        for name, spec in SPECS.items():
            r = srv.post_campaign({"id": name, **spec})
            r.raise_for_status()
            camp = r.json()
            mech = from_config(camp["mechanism"])
            values = [f"site-{i % 50}.example" for i in range(reports)]
            payloads = mech.encode_many(mech.perturb_many(values, rng=1))  # type: ignore[arg-type]
            day = dt.datetime.now(dt.UTC).date().isoformat()
            times = []
            for _ in range(uploads):
                body = {
                    "digest": camp["digest"],
                    "reports": [
                        {"id": secrets.token_hex(16), "day": day, "payload": p} for p in payloads
                    ],
                }
                start = time.perf_counter()
                up = requests.post(
                    f"{srv.url}/v1/campaigns/{name}/reports",
                    json=body,
                    headers=srv.headers("ingest"),
                    timeout=600,
                )
                times.append(time.perf_counter() - start)
                if up.status_code != 200 or up.json()["accepted"] != reports:
                    raise SystemExit(f"{name}: upload failed: {up.status_code} {up.text[:200]}")
            start = time.perf_counter()
            est = requests.get(
                f"{srv.url}/v1/campaigns/{name}/estimates",
                params={"candidate": ["site-1.example", "nobody"]},
                headers=srv.headers("analyst"),
                timeout=600,
            )
            took = time.perf_counter() - start
            if est.status_code != 200:
                raise SystemExit(f"{name}: estimate failed: {est.status_code} {est.text[:200]}")
            print(
                f"{backend:10s} {name:15s} counts {mech.tally_size:>9,}  upload of {reports:,} "
                f"reports {min(times):.2f}-{max(times):.2f} s  estimate ({uploads * reports:,} "
                f"reports) {took:.2f} s",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--backend", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--reports", type=int, default=1000)
    parser.add_argument("--uploads", type=int, default=4)
    args = parser.parse_args()
    backends = ["sqlite", "postgresql"] if args.backend == "both" else [args.backend]
    for backend in backends:
        run(backend, args.reports, args.uploads)


if __name__ == "__main__":
    main()

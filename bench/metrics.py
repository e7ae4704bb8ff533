"""Cost of counting one request in the collector's metrics (collector/metrics.py).

Run: .venv/bin/python bench/metrics.py [--requests 20000] [--dir PATH]

Observes --requests requests over five route templates with a metrics directory (multiprocess
mode, as under `ldp serve`) on the same file system as --dir (default: the current directory),
then renders the exposition once, and prints the cost per observed request and of the render.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from collector.metrics import Metrics  # noqa: E402
from collector.storage import open_storage  # noqa: E402

ROUTES = ["/healthz", "/v1/campaigns/<campaign_id>/reports", "/v1/campaigns", "/readyz", "/metrics"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--dir", default=".")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ldp-bench-metrics-", dir=args.dir))
    try:
        metrics = Metrics(str(work / "metrics"))
        start = time.perf_counter()
        for i in range(args.requests):
            metrics.observe_request(ROUTES[i % len(ROUTES)], "GET", 200, 0.003)
        per_request = (time.perf_counter() - start) / args.requests
        store = open_storage(str(work / "x.db"))
        store.migrate()
        start = time.perf_counter()
        text = metrics.render(store)
        render = time.perf_counter() - start
        store.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"observe   {per_request * 1e6:8.1f} us per request ({args.requests} requests)")
    print(f"render    {render * 1e3:8.1f} ms ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

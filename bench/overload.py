"""Collector overload: more concurrent uploaders than `ldp serve` can serve, then recovery.

Run: .venv/bin/python bench/overload.py [--uploaders 64] [--batch 500] [--seconds 10]
                                         [--workers 2] [--client-timeout 3]

It starts `ldp serve` on a free loopback port (fresh SQLite file, the default settings:
LDP_THREADS=4, LDP_MAX_INFLIGHT=8 per worker), creates an oue campaign and has --uploaders
threads post batches of --batch perturbed reports as fast as they are answered for --seconds,
each with a --client-timeout (a client that times out gives up on the request, like a device).
A 503 is honoured: the uploader sleeps for its Retry-After. It prints

  accepted       2xx answers per second and reports stored per second
  shed           503 'overloaded' answers per second (and how fast they came: p99)
  timeouts       requests the client gave up on
  p99 accepted   client-side latency of the 2xx answers (p50 and p99)
  recovery       seconds from the end of the load until /healthz and one upload succeed

and then checks from the database file that the stored reports equal the reports the 2xx
answers acknowledged, plus any stored for requests whose client timed out (never more than
were sent). Exit code 1 if a check fails.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from collector.storage import open_storage  # noqa: E402
from tests.support.reports import batch, campaign_body, reports  # noqa: E402
from tests.support.server import CollectorProcess, running_collector  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class Uploader(threading.Thread):
    def __init__(
        self, srv: CollectorProcess, campaign: dict, size: int, seed: int, args: argparse.Namespace
    ) -> None:
        super().__init__(daemon=True)
        self.url = f"{srv.url}/v1/campaigns/{campaign['id']}/reports"
        self.headers = {**srv.headers("ingest"), "Content-Type": "application/json"}
        self.bodies = [
            json.dumps(batch(campaign, reports(campaign, size, seed=seed * 1000 + i))).encode()
            for i in range(args.bodies)
        ]
        self.timeout = args.client_timeout
        self.deadline = 0.0
        self.accepted: list[float] = []
        self.shed: list[float] = []
        self.stored = 0
        self.timeouts = 0
        self.other: dict[int, int] = {}
        self.sent_after_first_cycle = 0

    def run(self) -> None:
        session = requests.Session()
        i = 0
        while time.monotonic() < self.deadline:
            body = self.bodies[i % len(self.bodies)]
            i += 1
            started = time.monotonic()
            try:
                r = session.post(self.url, data=body, headers=self.headers, timeout=self.timeout)
            except requests.RequestException:
                self.timeouts += 1
                session = requests.Session()
                continue
            took = time.monotonic() - started
            if r.status_code == 200:
                self.accepted.append(took)
                self.stored += r.json()["accepted"]
            elif r.status_code == 503:
                self.shed.append(took)
                time.sleep(float(r.headers.get("Retry-After", "1")))
            else:
                self.other[r.status_code] = self.other.get(r.status_code, 0) + 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--uploaders", type=int, default=64)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--client-timeout", type=float, default=3.0)
    parser.add_argument("--bodies", type=int, default=8, help="distinct batches per uploader")
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as tmp,
        running_collector(Path(tmp), workers=args.workers) as srv,
    ):
        r = requests.post(
            srv.url + "/v1/campaigns",
            json=campaign_body("overload"),
            headers=srv.headers("admin"),
            timeout=10,
        )
        campaign = r.json()
        uploaders = [Uploader(srv, campaign, args.batch, n, args) for n in range(args.uploaders)]
        start = time.monotonic()
        for u in uploaders:
            u.deadline = start + args.seconds
            u.start()
        for u in uploaders:
            u.join()
        ended = time.monotonic()
        elapsed = ended - start
        # Recovery: a probe and one fresh upload answered, once the load has stopped. The same
        # 10 reports each attempt, so a timed-out attempt that was stored anyway counts once.
        probe = batch(campaign, reports(campaign, 10, seed=10**9))
        while True:
            try:
                ok = requests.get(srv.url + "/healthz", timeout=1).status_code == 200
                up = requests.post(
                    srv.url + "/v1/campaigns/overload/reports",
                    json=probe,
                    headers=srv.headers("ingest"),
                    timeout=1,
                )
                if ok and up.status_code == 200:
                    break
            except requests.RequestException:
                pass
            time.sleep(0.05)
        recovery = time.monotonic() - ended
        srv.stop()
        store = open_storage(str(srv.db_path))
        (campaign_obj,) = [c for c, _ in store.list_campaigns()]
        stored = store.count_reports(campaign_obj) - 10
        store.close()
    accepted = [t for u in uploaders for t in u.accepted]
    shed = [t for u in uploaders for t in u.shed]
    timeouts = sum(u.timeouts for u in uploaders)
    acked = sum(u.stored for u in uploaders)
    other: dict[int, int] = {}
    for u in uploaders:
        for k, v in u.other.items():
            other[k] = other.get(k, 0) + v
    print(
        f"load            {args.uploaders} uploaders x batches of {args.batch}, "
        f"{args.seconds:.0f} s, {args.workers} workers, client timeout {args.client_timeout} s"
    )
    print(
        f"accepted        {len(accepted) / elapsed:8.1f} requests/s  "
        f"{acked / elapsed:10.0f} reports/s stored"
    )
    print(
        f"shed (503)      {len(shed) / elapsed:8.1f} requests/s  "
        f"answered in p99 {percentile(shed, 0.99) * 1000:.0f} ms"
    )
    print(f"timeouts        {timeouts} requests the client gave up on; other statuses {other}")
    print(
        f"accepted p50    {percentile(accepted, 0.5) * 1000:8.0f} ms   "
        f"p99 {percentile(accepted, 0.99) * 1000:.0f} ms"
    )
    print(f"recovery        {recovery:8.2f} s until /healthz and an upload succeed")
    # Every acknowledged report is stored; more only for requests whose client gave up.
    extra = stored - acked
    sent_on_timeout = timeouts * args.batch
    ok = 0 <= extra <= sent_on_timeout
    print(
        f"check           stored {stored} = acknowledged {acked} + {extra} from timed-out "
        f"requests (at most {sent_on_timeout}): {'ok' if ok else 'FAILED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

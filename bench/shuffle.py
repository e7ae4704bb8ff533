"""Ingest through the shuffler beside direct ingest, in one run; and amplified_epsilon's cost.

Run: .venv/bin/python bench/shuffle.py [--reports 4000] [--threads 4] [--batch-size 1000]

It starts `ldp serve` (SQLite, LDP_SEALED_KEY_FILE set) and `ldp shuffle` (-b --batch-size) on
free loopback ports and creates two identical oue campaigns over k = 14 values, one naming the
shuffler. The same perturbed reports then go

  direct      POSTed to /v1/campaigns/{id}/reports in batches of 500 by --threads threads;
              timed until the last answer (every report accepted)
  shuffled    sealed one by one (the device's cost, timed apart), then POSTed one message per
              request to the shuffler by --threads threads; timed from the first request until
              the collector's estimate counts them all (staging, permuting, forwarding, opening)

and it checks that both campaigns' estimates are equal. Last, the time of one
`aggregator.amplified_epsilon` call over n in 10^3..10^8, eps0 in {0.1, 1, 4, 8},
delta = 1e-10 (the issue's bound: <= 1 s). Exit code 1 if a check fails.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from aggregator import amplified_epsilon  # noqa: E402
from client_sdk.sealed import seal  # noqa: E402
from tests.support.reports import campaign_body, reports  # noqa: E402
from tests.support.server import running_collector  # noqa: E402
from tests.test_shuffle import ShufflerProcess  # noqa: E402

LABELS14 = [f"occupation-{i}" for i in range(14)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reports", type=int, default=4000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--wait", type=float, default=300.0, help="seconds to wait for counts")
    args = parser.parse_args()
    n = args.reports - args.reports % args.batch_size  # whole batches: the shuffler waits for B
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        env = {"LDP_SEALED_KEY_FILE": str(tmp_path / "sealed.key")}
        with running_collector(tmp_path, env=env) as srv:
            shuffler = ShufflerProcess(tmp_path, srv, args.batch_size).start()
            try:
                admin = srv.headers("admin")
                made = {}
                for cid, extra in (("direct", {}), ("shuffled", {"shuffler": shuffler.url})):
                    body = campaign_body(cid, domain=LABELS14, **extra)
                    resp = requests.post(srv.url + "/v1/campaigns", json=body, headers=admin)
                    resp.raise_for_status()
                    made[cid] = resp.json()
                items = reports(made["direct"], n, seed=7)

                # -- direct ------------------------------------------------------------------
                ingest = srv.headers("ingest")
                chunks = [items[i : i + 500] for i in range(0, n, 500)]
                digest = made["direct"]["digest"]

                def post(chunk: list[dict[str, object]]) -> int:
                    with requests.Session() as s:
                        r = s.post(
                            srv.url + "/v1/campaigns/direct/reports",
                            json={"digest": digest, "reports": chunk},
                            headers=ingest,
                            timeout=60,
                        )
                    return int(r.json()["accepted"])

                t0 = time.perf_counter()
                with ThreadPoolExecutor(args.threads) as pool:
                    accepted = sum(pool.map(post, chunks))
                direct_s = time.perf_counter() - t0
                ok &= accepted == n

                # -- shuffled ----------------------------------------------------------------
                key = requests.get(srv.url + "/v1/sealed/key", timeout=10).json()["public_key"]
                sh = made["shuffled"]
                t0 = time.perf_counter()
                messages = [seal(key, sh["id"], sh["digest"], r) for r in items]
                seal_s = time.perf_counter() - t0
                local = threading.local()
                sessions: list[requests.Session] = []

                def submit(message: str) -> int:
                    s = getattr(local, "session", None)
                    if s is None:  # one session per thread (a Session is not thread-safe)
                        s = local.session = requests.Session()
                        sessions.append(s)
                    r = s.post(shuffler.url + "/v1/submit", json={"message": message}, timeout=60)
                    return r.status_code

                t0 = time.perf_counter()
                with ThreadPoolExecutor(args.threads) as pool:
                    codes = list(pool.map(submit, messages))
                submit_s = time.perf_counter() - t0
                ok &= codes.count(202) == n
                analyst = srv.headers("analyst")
                deadline = time.monotonic() + args.wait
                while True:
                    est = requests.get(
                        srv.url + "/v1/campaigns/shuffled/estimates", headers=analyst, timeout=30
                    )
                    if est.status_code == 200 and est.json()["n"] >= n:
                        break
                    if time.monotonic() > deadline:
                        ok = False
                        break
                    time.sleep(0.05)
                shuffled_s = time.perf_counter() - t0
                for s in sessions:
                    s.close()
                via = est.json()
                plain = requests.get(
                    srv.url + "/v1/campaigns/direct/estimates", headers=analyst, timeout=30
                ).json()
                same = [a["raw_count"] for a in via["values"]] == [
                    b["raw_count"] for b in plain["values"]
                ]
                ok &= same and via["n"] == plain["n"] == n
                if not ok:
                    print(shuffler.stderr_path.read_text()[-3000:], file=sys.stderr)
            finally:
                shuffler.stop()

    print(f"reports: {n}, threads: {args.threads}, shuffler batch B = {args.batch_size}")
    print(f"direct ingest        {n / direct_s:10.0f} reports/s   ({direct_s:.2f} s)")
    print(f"sealing (device)     {n / seal_s:10.0f} reports/s   ({seal_s:.2f} s, one thread)")
    print(
        f"submit to shuffler   {n / submit_s:10.0f} reports/s   ({submit_s:.2f} s, "
        f"{codes.count(202)} answered 202)"
    )
    rate = n / shuffled_s
    print(f"through the shuffler {rate:10.0f} reports/s   ({shuffled_s:.2f} s, until counted)")
    print(
        f"estimates equal: {same}; central epsilon {via.get('central_epsilon'):.4f} "
        f"at delta {via.get('central_delta'):.3g} (eps0 {sh['realised_epsilon']})"
    )

    print("amplified_epsilon, seconds per call (delta = 1e-10):")
    worst = 0.0
    for eps0 in (0.1, 1.0, 4.0, 8.0):
        cells = []
        for exp in range(3, 9):
            t0 = time.perf_counter()
            eps = amplified_epsilon(eps0, 10**exp, 1e-10)
            dt = time.perf_counter() - t0
            worst = max(worst, dt)
            cells.append(f"n=1e{exp}: {eps:.4g} in {dt:.3f}s")
        print(f"  eps0 = {eps0:<4} " + "; ".join(cells))
    print(f"slowest call: {worst:.3f} s (bound: 1 s)")
    print("checks:", "ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

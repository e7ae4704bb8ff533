"""Clients that keep their end open after a ``Connection: close`` answer, against one worker.

Run: .venv/bin/python bench/lingering.py [--clients 20] [--probes 20]

It starts `ldp serve` with one worker on a free loopback port, opens --clients connections that
each send a whole ``GET /healthz`` with ``Connection: close`` and then neither read nor close,
and times --probes ordinary ``GET /healthz`` requests made after them (a new connection each,
client timeout 60 s). It prints the probes' p50 and slowest latency in milliseconds, how many
failed, and whether the worker was restarted (gunicorn's "WORKER TIMEOUT" in the server's log).

Before the worker parked these closes in its event loop, gunicorn's graceful close waited up
to 2 s per such client on the event loop's thread, so the probes waited for all of them.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import tempfile
import time
from pathlib import Path

import requests

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.server import running_collector  # noqa: E402

REQUEST = b"GET /healthz HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--probes", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, running_collector(Path(tmp), workers=1) as srv:
        host, port = srv.url.removeprefix("http://").rsplit(":", 1)
        held = []
        try:
            for _ in range(args.clients):
                s = socket.create_connection((host.strip("[]"), int(port)), timeout=60)
                s.sendall(REQUEST)
                held.append(s)
            times: list[float] = []
            failed = 0
            for _ in range(args.probes):
                began = time.perf_counter()
                try:
                    ok = requests.get(srv.url + "/healthz", timeout=60).status_code == 200
                except requests.RequestException:
                    ok = False
                times.append((time.perf_counter() - began) * 1000)
                failed += not ok
        finally:
            for s in held:
                s.close()
        restarted = "WORKER TIMEOUT" in srv.stderr()
    times.sort()
    figures = {
        "lingering_clients": args.clients,
        "probes": args.probes,
        "failed": failed,
        "p50_ms": round(times[len(times) // 2], 2),
        "max_ms": round(times[-1], 2),
        "worker_restarted": restarted,
    }
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

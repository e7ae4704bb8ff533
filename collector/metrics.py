"""Prometheus text-format metrics that stay right across gunicorn worker processes.

Two sources, merged at scrape time:

* report outcomes per campaign (accepted / duplicate / rejected) are read from storage, where
  they are updated in the ingest transaction: exact across workers and restarts;
* request counts, the request latency histogram and the batch size histogram are kept per
  process; with a metrics directory each process rewrites ``<dir>/<pid>.json`` after each
  request and ``GET /metrics`` sums every file (the approach of prometheus_client's
  multiprocess mode, without its dependency). Without a directory only this process counts.

Labels are route templates and status codes, never a client address, token or value.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from collector.storage import Storage

log = logging.getLogger(__name__)

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 10, 100, 500, 1000, 2000, 5000, 10000)


def _empty() -> dict[str, Any]:
    return {
        "requests": {},
        "latency": {},
        "batch": {"buckets": [0] * len(BATCH_BUCKETS), "count": 0, "sum": 0},
    }


class Metrics:
    """Per-process request metrics, optionally shared through a directory of files."""

    def __init__(self, directory: str | None = None) -> None:
        self.directory = Path(directory) if directory else None
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._state = _empty()
        self._pid = os.getpid()
        self._warned = False

    def _own(self) -> dict[str, Any]:
        if os.getpid() != self._pid:
            # A forked worker starts its own count (the parent's file stays the parent's).
            self._pid, self._state = os.getpid(), _empty()
        return self._state

    def observe_request(self, endpoint: str, method: str, status: int, seconds: float) -> None:
        with self._lock:
            state = self._own()
            key = f"{endpoint}\t{method}\t{status}"
            state["requests"][key] = state["requests"].get(key, 0) + 1
            lat = state["latency"].setdefault(
                endpoint, {"buckets": [0] * len(LATENCY_BUCKETS), "count": 0, "sum": 0.0}
            )
            for i, bound in enumerate(LATENCY_BUCKETS):
                if seconds <= bound:
                    lat["buckets"][i] += 1
            lat["count"] += 1
            lat["sum"] += seconds
            self._flush(state)

    def observe_batch(self, size: int) -> None:
        with self._lock:
            batch = self._own()["batch"]
            for i, bound in enumerate(BATCH_BUCKETS):
                if size <= bound:
                    batch["buckets"][i] += 1
            batch["count"] += 1
            batch["sum"] += size

    def _flush(self, state: dict[str, Any]) -> None:
        if self.directory is None:
            return
        path = self.directory / f"{self._pid}.json"
        tmp = path.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(state))
            os.replace(tmp, path)
        except OSError as exc:
            # Metrics must never fail a request (e.g. the directory was cleaned away).
            if not self._warned:
                log.warning("cannot write metrics to %s: %s", self.directory, exc)
                self._warned = True

    def _states(self) -> Iterable[dict[str, Any]]:
        with self._lock:
            own = json.loads(json.dumps(self._own()))
        yield own
        if self.directory is None:
            return
        for path in self.directory.glob("*.json"):
            if path.stem == str(self._pid):
                continue
            try:
                yield json.loads(path.read_text())
            except (OSError, ValueError):
                continue  # a file being replaced right now; its numbers come next scrape

    def render(self, storage: Storage) -> str:
        """The Prometheus text exposition (version 0.0.4) of every metric."""
        merged = _empty()
        for state in self._states():
            for key, value in state["requests"].items():
                merged["requests"][key] = merged["requests"].get(key, 0) + value
            for endpoint, lat in state["latency"].items():
                into = merged["latency"].setdefault(
                    endpoint, {"buckets": [0] * len(LATENCY_BUCKETS), "count": 0, "sum": 0.0}
                )
                into["buckets"] = [
                    a + b for a, b in zip(into["buckets"], lat["buckets"], strict=True)
                ]
                into["count"] += lat["count"]
                into["sum"] += lat["sum"]
            b = state["batch"]
            mb = merged["batch"]
            mb["buckets"] = [x + y for x, y in zip(mb["buckets"], b["buckets"], strict=True)]
            mb["count"] += b["count"]
            mb["sum"] += b["sum"]
        lines: list[str] = []
        out = lines.append
        out("# HELP ldp_reports_total Reports received, by campaign and outcome.")
        out("# TYPE ldp_reports_total counter")
        for c in storage.report_counters():
            for outcome in ("accepted", "duplicate", "rejected"):
                out(
                    f'ldp_reports_total{{campaign="{_esc(c.campaign)}",outcome="{outcome}"}} '
                    f"{getattr(c, outcome)}"
                )
        out("# HELP ldp_http_requests_total HTTP requests, by route, method and status.")
        out("# TYPE ldp_http_requests_total counter")
        for key in sorted(merged["requests"]):
            endpoint, method, status = key.split("\t")
            out(
                f'ldp_http_requests_total{{endpoint="{_esc(endpoint)}",method="{method}",'
                f'status="{status}"}} {merged["requests"][key]}'
            )
        out("# HELP ldp_request_duration_seconds Time to answer a request, by route.")
        out("# TYPE ldp_request_duration_seconds histogram")
        for endpoint in sorted(merged["latency"]):
            lat = merged["latency"][endpoint]
            label = f'endpoint="{_esc(endpoint)}"'
            for bound, count in zip(LATENCY_BUCKETS, lat["buckets"], strict=True):
                out(f'ldp_request_duration_seconds_bucket{{{label},le="{bound}"}} {count}')
            out(f'ldp_request_duration_seconds_bucket{{{label},le="+Inf"}} {lat["count"]}')
            out(f"ldp_request_duration_seconds_sum{{{label}}} {lat['sum']:.6f}")
            out(f"ldp_request_duration_seconds_count{{{label}}} {lat['count']}")
        out("# HELP ldp_batch_size_reports Reports per upload that passed the batch checks.")
        out("# TYPE ldp_batch_size_reports histogram")
        mb = merged["batch"]
        for bound, count in zip(BATCH_BUCKETS, mb["buckets"], strict=True):
            out(f'ldp_batch_size_reports_bucket{{le="{bound}"}} {count}')
        out(f'ldp_batch_size_reports_bucket{{le="+Inf"}} {mb["count"]}')
        out(f"ldp_batch_size_reports_sum {mb['sum']}")
        out(f"ldp_batch_size_reports_count {mb['count']}")
        return "\n".join(lines) + "\n"


def _esc(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

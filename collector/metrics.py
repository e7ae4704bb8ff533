"""Prometheus metrics that stay right across gunicorn worker processes.

Two sources, merged at scrape time:

* report outcomes per campaign (accepted / duplicate / rejected) are read from storage, where
  they are updated in the ingest transaction: exact across workers and restarts;
* request counts, the request latency histogram and the batch size histogram are
  prometheus_client metrics. With a metrics directory (``ldp serve`` always has one) they run
  in prometheus_client's multiprocess mode: each process adds to memory-mapped files
  ``<dir>/<kind>_<pid>.db`` (a few microseconds, no file rewrite per request) and a scrape,
  answered by any worker, sums every process's files. Counters of a replaced worker stay in its
  files, so they never go backwards. Without a directory only this process counts.

Labels are route templates and status codes, never a client address, token or value.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from collector.errors import ConfigError
from collector.storage import Storage

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
BATCH_BUCKETS = (1, 10, 100, 500, 1000, 2000, 5000, 10000)
#: prometheus_client reads the directory of multiprocess mode from this variable.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

_mode_lock = threading.Lock()


def _use_multiprocess(directory: Path) -> None:
    """Switch this process's prometheus_client values to memory-mapped files in ``directory``.

    prometheus_client picks its value class once, from the environment, when it is first
    imported; ``ldp serve`` imports it before it knows the directory, so the choice is made
    here, before any metric of this app exists.
    """
    from prometheus_client import values

    with _mode_lock:
        os.environ[MULTIPROC_ENV] = str(directory)
        if values.ValueClass is values.MutexValue:
            values.ValueClass = values.MultiProcessValue()


def metrics_directory(directory: str | None) -> Path | None:
    """``LDP_METRICS_DIR`` made if missing, or :class:`ConfigError` saying why it cannot be
    used (``ldp serve`` checks it before it starts its workers)."""
    if not directory:
        return None
    path = Path(directory)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file in its place, no permission, ...
        raise ConfigError(
            f"LDP_METRICS_DIR {str(path)!r} cannot be used as a directory: {exc.strerror}"
        ) from None
    return path


class Metrics:
    """The collector's request metrics (see the module docstring)."""

    def __init__(self, directory: str | None = None) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.directory = metrics_directory(directory)
        if self.directory is not None:
            _use_multiprocess(self.directory)
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "ldp_http_requests",
            "HTTP requests, by route, method and status.",
            ["endpoint", "method", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "ldp_request_duration_seconds",
            "Time to answer a request, by route.",
            ["endpoint"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.batch = Histogram(
            "ldp_batch_size_reports",
            "Reports per upload that passed the batch checks.",
            buckets=BATCH_BUCKETS,
            registry=self.registry,
        )

    def observe_request(self, endpoint: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(endpoint, method, str(status)).inc()
        self.latency.labels(endpoint).observe(seconds)

    def observe_batch(self, size: int) -> None:
        self.batch.observe(size)

    def render(self, storage: Storage) -> str:
        """The Prometheus text exposition (version 0.0.4) of every metric."""
        from prometheus_client import CollectorRegistry, generate_latest
        from prometheus_client.multiprocess import MultiProcessCollector

        lines = [
            "# HELP ldp_reports_total Reports received, by campaign and outcome.",
            "# TYPE ldp_reports_total counter",
        ]
        for c in storage.report_counters():
            for outcome in ("accepted", "duplicate", "rejected"):
                lines.append(
                    f'ldp_reports_total{{campaign="{_esc(c.campaign)}",outcome="{outcome}"}} '
                    f"{getattr(c, outcome)}"
                )
        usage = storage.usage()
        lines += [
            "# HELP ldp_stored_reports Reports stored per campaign (as of the last retention "
            "sweep).",
            "# TYPE ldp_stored_reports gauge",
        ]
        lines += [f'ldp_stored_reports{{campaign="{_esc(u.campaign)}"}} {u.reports}' for u in usage]
        lines += [
            "# HELP ldp_stored_bytes Bytes of stored reports (id + payload) per campaign (as of "
            "the last retention sweep).",
            "# TYPE ldp_stored_bytes gauge",
        ]
        lines += [f'ldp_stored_bytes{{campaign="{_esc(u.campaign)}"}} {u.bytes}' for u in usage]
        if self.directory is not None:
            merged = CollectorRegistry()
            MultiProcessCollector(merged, path=str(self.directory))
            text = generate_latest(merged).decode()
        else:
            text = generate_latest(self.registry).decode()
        return "\n".join(lines) + "\n" + text


def _esc(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

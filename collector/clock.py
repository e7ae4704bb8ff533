"""The collector's UTC date, with a test-only override (one definition of "today").

``LDP_TODAY=2026-11-21`` fixes the date; ``LDP_TODAY_FILE=/path`` names a file holding the
ISO date, read again at every call, so an end-to-end test (or ``bench/retention.py``) advances
the days of a running ``ldp serve`` by rewriting the file. Both are for tests and benchmarks
only (docs/COLLECTOR.md, "Test clock"); unset, the date is the wall clock's UTC date.
"""

from __future__ import annotations

import datetime as dt
import os

from collector.errors import ConfigError


def today() -> dt.date:
    """Today's UTC date, or the test override (``LDP_TODAY`` / ``LDP_TODAY_FILE``)."""
    fixed = os.environ.get("LDP_TODAY")
    path = os.environ.get("LDP_TODAY_FILE")
    text = None
    if fixed:
        text, origin = fixed, "LDP_TODAY"
    elif path:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read().strip()
        except OSError as exc:
            raise ConfigError(f"LDP_TODAY_FILE: cannot read {path}: {exc.strerror}") from None
        origin = f"LDP_TODAY_FILE ({path})"
    if text is None:
        return dt.datetime.now(dt.UTC).date()
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise ConfigError(f"{origin} must be an ISO date like 2026-11-21, got {text!r}") from None

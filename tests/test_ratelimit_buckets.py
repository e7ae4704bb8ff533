"""The token buckets behind ``LDP_RATE_LIMIT`` and the dashboard's sign-in limit
(``collector.ratelimit.TokenBuckets``), without a server.

A bucket holds at most ``burst`` units and refills at ``rate`` units per second; ``take`` answers
0 when a unit was there, else the seconds until one is back. With a directory, the buckets live
in one file that every worker process opens for itself, so two instances on one directory are
one limit. The end-to-end checks (429, ``Retry-After``, two workers) are in
``tests/reliability/test_reliability_security.py`` and ``tests/test_collector_hardening.py``.
"""

from __future__ import annotations

import stat
import struct
import time
from pathlib import Path

import pytest

from collector.ratelimit import BUCKETS, STATE_FILE, TokenBuckets

#: A rate so slow that no unit comes back during a test (one per 1000 s).
SLOW = 0.001


@pytest.mark.parametrize("shared", [False, True], ids=["memory", "file"])
def test_a_bucket_gives_its_burst_then_says_how_long_to_wait(tmp_path: Path, shared: bool) -> None:
    buckets = TokenBuckets(SLOW, 3, tmp_path if shared else None)
    assert [buckets.take("ingest") for _ in range(3)] == [0.0, 0.0, 0.0]
    wait = buckets.take("ingest")
    # One unit at 0.001 per second is 1000 s away, less what trickled in meanwhile.
    assert 990 < wait <= 1000
    # Each role has its own bucket.
    assert buckets.take("analyst") == 0.0


@pytest.mark.parametrize("shared", [False, True], ids=["memory", "file"])
def test_an_empty_bucket_refills_at_the_rate(tmp_path: Path, shared: bool) -> None:
    """100 units per second: 50 ms after the only unit went, one is back (the refill is
    elapsed x rate; with elapsed % rate, mutation testing's survivor, it would be 0.05 units).
    A slower machine only sleeps longer, which refills more: no timing can fail this."""
    buckets = TokenBuckets(100.0, 1, tmp_path if shared else None)
    assert buckets.take("admin") == 0.0
    time.sleep(0.05)
    assert buckets.take("admin") == 0.0


def test_a_refill_never_passes_the_burst(tmp_path: Path) -> None:
    """A bucket idle for a million seconds at 0.001 per second would hold 1000 units without
    the cap: it holds the burst. The idle time is written into the shared file (its format:
    per bucket, in BUCKETS order, units left and the monotonic time of the last update, two
    little-endian doubles), so no test has to wait for it."""
    buckets = TokenBuckets(SLOW, 2, tmp_path)
    assert buckets.take("invalid") == 0.0  # creates the file
    slot = BUCKETS.index("invalid") * 16
    with open(tmp_path / STATE_FILE, "r+b") as state:
        state.seek(slot)
        state.write(struct.pack("<dd", 0.0, time.monotonic() - 1e6))
    assert [buckets.take("invalid") for _ in range(2)] == [0.0, 0.0]
    assert buckets.take("invalid") > 990


def test_a_slot_never_written_is_a_full_bucket_however_short_the_uptime(tmp_path: Path) -> None:
    """The first take writes its own slot, so the file holds zeros for the buckets before it.
    A zero slot is a full bucket, not 0 units last updated at boot: at 1e-9 units per second
    the old reading would grant less than one unit on any machine up for under 31 years (it
    failed on a machine booted 8 minutes earlier, at the test's own rate of 0.001)."""
    buckets = TokenBuckets(1e-9, 2, tmp_path)
    assert buckets.take("ingest") == 0.0  # creates the file; admin's and analyst's slots are 0
    with open(tmp_path / STATE_FILE, "rb") as state:
        assert state.read(16 * 2) == bytes(32)
    assert [buckets.take("analyst") for _ in range(2)] == [0.0, 0.0]
    assert buckets.take("analyst") > 1e8


def test_a_slot_stamped_before_the_machine_booted_is_a_full_bucket(tmp_path: Path) -> None:
    """A metrics directory the operator keeps outlives a reboot, and the monotonic clock
    restarts: a stamp later than now is from an earlier boot. Its bucket is full again, and
    the next take refills from the new stamp, not from the stale one."""
    buckets = TokenBuckets(SLOW, 2, tmp_path)
    assert buckets.take("admin") == 0.0
    slot = BUCKETS.index("admin") * 16
    with open(tmp_path / STATE_FILE, "r+b") as state:
        state.seek(slot)
        state.write(struct.pack("<dd", 0.0, time.monotonic() + 1e6))
    assert [buckets.take("admin") for _ in range(2)] == [0.0, 0.0]
    assert 990 < buckets.take("admin") <= 1000


def test_two_processes_on_one_directory_share_one_limit(tmp_path: Path) -> None:
    """Each gunicorn worker builds its own TokenBuckets on the metrics directory: what one
    takes, the other no longer has."""
    worker_a = TokenBuckets(SLOW, 4, tmp_path)
    worker_b = TokenBuckets(SLOW, 4, tmp_path)
    assert [worker_a.take("ingest") for _ in range(3)] == [0.0] * 3
    assert worker_b.take("ingest") == 0.0
    assert worker_b.take("ingest") > 0 and worker_a.take("ingest") > 0
    state = tmp_path / STATE_FILE
    # Owner-only, and only role names' slots: 16 bytes per bucket, no token in it.
    assert stat.S_IMODE(state.stat().st_mode) == 0o600
    assert state.stat().st_size <= 16 * len(BUCKETS)


@pytest.mark.parametrize(("rate", "burst"), [(0, 1), (-1.0, 1), (1.0, 0)])
def test_a_limit_that_admits_nothing_is_refused(rate: float, burst: int) -> None:
    with pytest.raises(ValueError, match="rate must be > 0 and burst >= 1"):
        TokenBuckets(rate, burst, None)


def test_the_refill_counts_the_whole_time_since_the_stamp(tmp_path: Path) -> None:
    """Idle for three quarters of the uptime at 4/uptime units per second refills 3 units,
    capped at the burst of 2. The idle time is longer than the stamp itself, so a refill read
    as ``now % stamp`` (mutation testing's survivor) would be a few milliseconds' worth."""
    now = time.monotonic()
    buckets = TokenBuckets(4.0 / now, 2, tmp_path)
    assert buckets.take("ingest") == 0.0  # creates the file
    with open(tmp_path / STATE_FILE, "r+b") as state:
        state.seek(BUCKETS.index("ingest") * 16)
        state.write(struct.pack("<dd", 0.0, now / 4))
    assert [buckets.take("ingest") for _ in range(2)] == [0.0, 0.0]


def test_every_method_with_a_token_is_limited_but_a_preflight(tmp_path: Path) -> None:
    """In the app: a GET spends its token's bucket like a POST, the answer past the burst is
    429 ``rate_limited`` with ``Retry-After``; a CORS preflight (OPTIONS) is never limited,
    whatever it carries."""
    from collector.app import create_app
    from tests.support.server import ANALYST_TOKEN, TOKENS

    settings = {"database": str(tmp_path / "x.db"), "rate_limit": 1, "rate_limit_burst": 2}
    app = create_app({**settings, **TOKENS})
    client = app.test_client()
    analyst = {"Authorization": f"Bearer {ANALYST_TOKEN}"}
    codes = [client.get("/v1/campaigns", headers=analyst).status_code for _ in range(3)]
    assert codes == [200, 200, 429]
    refused = client.get("/v1/campaigns", headers=analyst)
    assert refused.status_code == 429
    assert refused.get_json()["error"]["code"] == "rate_limited"
    assert int(refused.headers["Retry-After"]) >= 1
    preflight = {
        **analyst,
        "Origin": "https://app.example",
        "Access-Control-Request-Method": "POST",
    }
    for _ in range(3):
        assert client.options("/v1/campaigns/x/reports", headers=preflight).status_code != 429

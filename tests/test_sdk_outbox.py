"""The outbox, the budget ledger and the device secret on a real SQLite file (no network)."""

from __future__ import annotations

import datetime as dt
import math
import os
import stat
from pathlib import Path

import pytest

from client_sdk.errors import InvalidParameter, PrivacyBudgetExceeded, StateUnusable
from client_sdk.ledger import Ledger, PrivacyBudget, Release, advanced_composition, window_of
from client_sdk.memo import SECRET_FILE, delete_secret, load_or_create_secret
from client_sdk.outbox import Outbox, Report
from client_sdk.state import STATE_FILE, ClientClosed, StateDB


def reports(n: int, campaign: str = "c", digest: str = "d1", start: int = 0) -> list[Report]:
    return [Report(campaign, f"{i:032x}", "2026-11-22", i % 3, digest) for i in range(start, n)]


def test_outbox_is_durable_and_fifo_per_campaign(tmp_path: Path) -> None:
    db = StateDB(tmp_path)
    box = Outbox(db)
    box.add_many(reports(5) + reports(8, campaign="other", start=5))
    with db.transaction() as conn:
        box.add(conn, Report("c", "f" * 32, "2026-11-22", [1, 2], "d1"))
    db.close()
    db = StateDB(tmp_path)
    box = Outbox(db)
    assert box.pending == 9
    batch = box.next_batch(4)
    assert batch is not None and batch.campaign == "c" and len(batch) == 4
    assert [r.id for r in batch.reports] == [f"{i:032x}" for i in range(4)]
    box.settle(batch, accepted=3, duplicate=0, rejected={1: "report #1: bad"})
    assert box.pending == 5
    rest = box.next_batch(10)
    assert rest is not None and rest.campaign == "c" and rest.reports[-1].payload == [1, 2]
    sent = box.sent_reports()
    assert [s["outcome"] for s in sent] == [
        "acknowledged",
        "rejected: report #1: bad",
        "acknowledged",
        "acknowledged",
    ]
    assert box.counters()["accepted"] == 3 and box.counters()["rejected"] == 1
    db.close()


def test_outbox_cap_drops_the_oldest_and_counts(tmp_path: Path) -> None:
    db = StateDB(tmp_path)
    box = Outbox(db, max_pending=10, keep_sent=3)
    box.add_many(reports(8))
    box.add_many(reports(14, start=8))
    assert box.pending == 10
    assert box.counters()["dropped_overflow"] == 4
    batch = box.next_batch(100)
    assert batch is not None and batch.reports[0].id == f"{4:032x}"
    box.settle(batch, accepted=10, duplicate=0, rejected={})
    assert len(box.sent_reports()) == 3  # the sent log is trimmed to keep_sent
    db.close()


def test_a_report_past_the_cap_drops_exactly_the_oldest(tmp_path: Path) -> None:
    """``report``'s path (``add``, one report per transaction) keeps the newest
    ``max_pending`` and counts the others, on disk as in memory."""
    db = StateDB(tmp_path)
    box = Outbox(db, max_pending=3)
    for report in reports(5):
        with db.transaction() as conn:
            box.add(conn, report)
    assert box.pending == 3 and box.counters()["dropped_overflow"] == 2
    batch = box.next_batch(10)
    assert batch is not None and [r.id for r in batch.reports] == [f"{i:032x}" for i in (2, 3, 4)]
    db.close()
    db = StateDB(tmp_path)
    assert Outbox(db).pending == 3
    db.close()


def test_add_many_without_dropping_fills_only_the_room_left(tmp_path: Path) -> None:
    """``report_many``'s path: ``room`` is the cap less what is pending, and ``add_many(...,
    drop_oldest=False)`` adds only that many, dropping nothing."""
    db = StateDB(tmp_path)
    box = Outbox(db, max_pending=10)
    box.add_many(reports(7))
    assert box.room == 3
    assert box.add_many(reports(12, start=7), drop_oldest=False) == 3
    assert (box.pending, box.room, box.counters()["dropped_overflow"]) == (10, 0, 0)
    batch = box.next_batch(100)
    assert batch is not None and [r.id for r in batch.reports] == [f"{i:032x}" for i in range(10)]
    db.close()


def test_the_caps_are_positive_integers_and_documented(tmp_path: Path) -> None:
    from client_sdk.outbox import DEFAULT_KEEP_SENT, DEFAULT_MAX_PENDING

    db = StateDB(tmp_path)
    for name in ("max_pending", "keep_sent"):
        for bad in (0, -5, 1.5, True, None):
            with pytest.raises(InvalidParameter, match=f"{name} must be an integer >= 1"):
                Outbox(db, **{name: bad})  # type: ignore[arg-type]
    box = Outbox(db, max_pending=1, keep_sent=1)
    box.add_many(reports(1))
    assert box.pending == 1
    db.close()
    doc = (Path(__file__).resolve().parents[1] / "docs" / "SDK.md").read_text()
    assert f"| `max_pending` | {DEFAULT_MAX_PENDING:,} |" in doc
    assert f"| `keep_sent` | {DEFAULT_KEEP_SENT:,} |" in doc


def test_a_collectors_rejection_reason_is_kept_short(tmp_path: Path) -> None:
    """The sent log keeps the collector's reason for a rejection, at most 200 characters: a
    collector's reason of a megabyte does not fill the device's disk."""
    db = StateDB(tmp_path)
    box = Outbox(db)
    box.add_many(reports(1))
    batch = box.next_batch(1)
    assert batch is not None
    box.settle(batch, accepted=0, duplicate=0, rejected={0: "x" * 1_000_000})
    assert box.sent_reports()[0]["outcome"] == "rejected: " + "x" * 200
    db.close()


def test_counts_the_file_refuses_are_kept_in_memory(tmp_path: Path) -> None:
    """A counter the state file cannot take (disk full: a temporary trigger stands for it) is
    kept in this process's memory and shown by ``counters``, exactly."""
    db = StateDB(tmp_path)
    box = Outbox(db)
    db.conn.execute(
        "CREATE TEMP TRIGGER full BEFORE INSERT ON counters "
        "BEGIN SELECT RAISE(ABORT, 'database or disk is full'); END"
    )
    box.bump("refused_storage")
    box.bump("refused_storage", 2)
    assert box.counters()["refused_storage"] == 3
    db.close()


def test_outbox_drops_by_digest_and_counts(tmp_path: Path) -> None:
    db = StateDB(tmp_path)
    box = Outbox(db)
    box.add_many(reports(3, digest="old") + reports(5, digest="new", start=3))
    assert box.drop("c", digest="old", reason="dropped_stale") == 3
    assert box.pending == 2 and box.counters()["dropped_stale"] == 3
    with pytest.raises(InvalidParameter, match="unknown drop reason"):
        box.drop("c", reason="lost")
    db.close()
    with pytest.raises(ClientClosed):
        box.next_batch(1)


def test_ledger_refuses_when_spent_and_records_nothing(tmp_path: Path) -> None:
    db = StateDB(tmp_path)
    ledger = Ledger(db)
    for _ in range(2):
        with db.transaction() as conn:
            ledger.charge(conn, campaign="c", window="2026-11-22", epsilon=0.5, limit=2)
    with pytest.raises(PrivacyBudgetExceeded, match="2 of 2 report"):
        with db.transaction() as conn:
            ledger.charge(conn, campaign="c", window="2026-11-22", epsilon=0.5, limit=2)
    assert ledger.used("c", "2026-11-22") == 2
    with db.transaction() as conn:
        ledger.charge(conn, campaign="c", window="2026-11-23", epsilon=0.5, limit=2)
    spent = ledger.spent("c")
    assert (spent.reports, spent.windows, spent.sequential) == (3, 2, 1.5)
    assert spent.advanced is None and spent.memoised is None and spent.best == 1.5
    assert ledger.spent("unused").reports == 0
    db.close()


def test_ledger_memoised_bound(tmp_path: Path) -> None:
    db = StateDB(tmp_path)
    ledger = Ledger(db)
    first = dt.date(2026, 11, 22) - dt.timedelta(days=49)
    release = Release("r1", 4.0, Release.digests(["a", "b", "c"]))
    for i in range(50):
        day = first + dt.timedelta(days=i)
        with db.transaction() as conn:
            ledger.charge(
                conn,
                campaign="m",
                window=day.isoformat(),
                day=day,
                epsilon=1.0,
                limit=1,
                budget=PrivacyBudget.unlimited(),
                release=release,
            )
    spent = ledger.spent("m", today=dt.date(2026, 11, 22))
    assert spent.sequential == 50 and spent.memoised == 12.0  # 3 distinct values at most
    assert spent.best == 12.0
    db.close()


def test_advanced_composition_formula() -> None:
    k, eps, delta = 100, 0.1, 1e-5
    expected = math.sqrt(2 * k * math.log(1 / delta)) * eps + k * eps * (math.exp(eps) - 1)
    assert advanced_composition(k, eps, delta) == pytest.approx(expected)
    assert advanced_composition(0, eps, delta) == 0
    with pytest.raises(InvalidParameter, match="delta"):
        advanced_composition(3, eps, 0)


def test_windows() -> None:
    day = dt.date(2026, 11, 22)  # a Sunday
    assert window_of(day, "day") == "2026-11-22"
    assert window_of(day, "week") == "2026-11-16"
    assert window_of(dt.date(2026, 11, 16), "week") == "2026-11-16"
    with pytest.raises(InvalidParameter, match="window"):
        window_of(day, "month")


def test_device_secret_is_private_and_stable(tmp_path: Path) -> None:
    first = load_or_create_secret(tmp_path)
    assert len(first) == 32 and load_or_create_secret(tmp_path) == first
    mode = stat.S_IMODE(os.stat(tmp_path / SECRET_FILE).st_mode)
    assert mode == 0o600
    (tmp_path / SECRET_FILE).write_text(first.hex() + "\n")  # a newline added by hand is fine
    assert load_or_create_secret(tmp_path) == first
    # Text, binary garbage (it was a UnicodeDecodeError), a directory (IsADirectoryError), a
    # secret one byte short or one byte long: each is the same clear error.
    for damage in ("garbage", b"\xff\xfe" * 32, None, first.hex()[:-2], first.hex() + "00"):
        path = tmp_path / SECRET_FILE
        if path.is_dir():
            path.rmdir()
        else:
            path.unlink()
        if damage is None:
            path.mkdir()
        elif isinstance(damage, bytes):
            path.write_bytes(damage)
        else:
            path.write_text(damage)
        # Damaged state (StateUnusable, as for the state file), not a programming error.
        with pytest.raises(StateUnusable, match="corrupted"):
            load_or_create_secret(tmp_path)
    assert not list(tmp_path.glob("*.tmp"))


def test_deleting_the_device_secret_makes_a_new_one(tmp_path: Path) -> None:
    first = load_or_create_secret(tmp_path)
    delete_secret(tmp_path)
    assert not (tmp_path / SECRET_FILE).exists()
    delete_secret(tmp_path)  # nothing to delete: not an error
    second = load_or_create_secret(tmp_path)
    assert len(second) == 32 and second != first


def test_state_file_location_and_durability_option(tmp_path: Path) -> None:
    with pytest.raises(InvalidParameter, match="durability"):
        StateDB(tmp_path, durability="sometimes")
    db = StateDB(tmp_path / "nested" / "dir", durability="full")
    assert db.path == tmp_path / "nested" / "dir" / STATE_FILE and db.path.exists()
    db.close()
    db.close()


def test_state_file_columns_hold_no_value(tmp_path: Path) -> None:
    """The outbox holds only (campaign, report id, day, payload, digest, attempts); the ledger
    only counts and epsilons. Pinned so a value column cannot slip in unnoticed."""
    db = StateDB(tmp_path)
    with db.reading() as conn:
        columns = {
            table: [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
            for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if table != "sqlite_sequence"
        }
    db.close()
    assert columns == {
        "outbox": ["seq", "campaign", "report_id", "day", "payload", "digest", "attempts"],
        "sent": ["seq", "campaign", "report_id", "day", "payload", "outcome"],
        "counters": ["name", "value"],
        "ledger": [
            "campaign",
            "window",
            "reports",
            "epsilon_sum",
            "epsilon_max",
            "permanent_epsilon",
        ],
        "charges": ["campaign", "day", "epsilon", "release", "permanent_epsilon", "reports"],
        "release_domain": ["campaign", "release", "label_digest"],
        "settings": ["name", "value"],
        "device_day": ["report_id"],
    }

"""``TelemetryClient``'s options against docs/SDK.md ("Options"), and the checks that need no
collector: a client pointed at a closed port (nothing listens on 127.0.0.1:9).

The table is the contract app developers read: every option with a literal default is in it
with that default, so a default changed in the code alone fails here.
"""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

from client_sdk import ClientClosed, InvalidParameter, TelemetryClient

REPO = Path(__file__).resolve().parents[1]
#: Rows whose default cell is not a literal: an environment variable, or an object made at call.
NOT_LITERAL = {"url", "ingest_token", "state_dir", "campaigns", "budget", "clock"}


def _documented_options() -> dict[str, str]:
    """Option name -> default cell, from the table under "## Options" of docs/SDK.md."""
    doc = (REPO / "docs" / "SDK.md").read_text()
    section = doc.split("## Options", 1)[1].split("\n## ", 1)[0]
    out: dict[str, str] = {}
    for names, cell in re.findall(r"^\| ((?:`\w+`(?:, )?)+) \| ([^|]+?) \|", section, re.MULTILINE):
        keys = re.findall(r"`(\w+)`", names)
        parts = re.split(r",\s(?![^()]*\))", cell) if len(keys) > 1 else [cell]
        assert len(parts) == len(keys), (names, cell)
        out.update(zip(keys, parts, strict=True))
    return out


def _literal(cell: str) -> Any:
    """``2 s`` -> 2, ``100,000`` -> 100000, ``(3, 10) s`` -> (3, 10), ``"normal"`` -> 'normal'."""
    text = cell.strip().strip("`").removesuffix(" s")
    if re.fullmatch(r"\d{1,3}(,\d{3})+", text):
        text = text.replace(",", "")
    return ast.literal_eval(text)


def test_every_literal_default_is_the_documented_one() -> None:
    documented = _documented_options()
    parameters = inspect.signature(TelemetryClient.__init__).parameters
    options = {name for name in parameters if name not in ("self", "url")} | {"url"}
    assert set(documented) == options
    for name in sorted(options - NOT_LITERAL):
        default = parameters[name].default
        assert _literal(documented[name]) == default, (name, documented[name], default)


def _client(tmp_path: Path, **options: Any) -> TelemetryClient:
    return TelemetryClient(
        "http://127.0.0.1:9",
        ingest_token="t" * 20,
        state_dir=tmp_path,
        flush_interval=3600.0,
        **options,
    )


@pytest.mark.parametrize("limit", [0, -1, True, 1.5, "1"])
def test_a_rate_limit_below_one_report_is_refused(tmp_path: Path, limit: Any) -> None:
    with pytest.raises(InvalidParameter, match=r"reports_per_window must be an integer >= 1"):
        _client(tmp_path, reports_per_window=limit)
    with pytest.raises(InvalidParameter, match=r"reports_per_window must be an integer >= 1"):
        _client(tmp_path, reports_per_window={"c": limit})


@pytest.mark.parametrize("flag", [False, 1, "yes", None])
def test_only_simulate_devices_true_opens_the_simulation_path(tmp_path: Path, flag: Any) -> None:
    """``simulate_devices`` must be ``True`` itself: 1 or "yes" are not a decision to bypass
    the device's budget."""
    with _client(tmp_path) as client:
        with pytest.raises(InvalidParameter, match="simulate_devices=True"):
            client.report_many("c", ["x"], simulate_devices=flag)


def test_a_closed_client_refuses_every_call_that_would_use_it(tmp_path: Path) -> None:
    client = _client(tmp_path, close_timeout=0)
    client.close()
    client.close()  # idempotent
    for call in (
        lambda: client.flush(timeout=0.1),
        lambda: client.report("c", "x"),
        lambda: client.report_many("c", ["x"], simulate_devices=True),
        lambda: client.set_upload_enabled(False),
    ):
        with pytest.raises(ClientClosed, match="closed"):
            call()


def test_a_refused_day_is_restamped_within_one_day_once_the_config_is_gone(
    tmp_path: Path,
) -> None:
    """A device clock 2 days ahead: a report it stamped with the collector's today plus 1 day
    moves to yesterday by the collector's clock, inside a 1-day horizon; one stamped with the
    collector's today would move 2 days back, past it. Without the campaign's config on the
    device (dropped since the report was made) the horizon is 1 day, the cautious one."""
    import datetime as dt

    server = dt.datetime.now(dt.UTC).date()
    client = _client(tmp_path, clock=lambda: server + dt.timedelta(days=2))
    try:
        client._transport.server_skew = 0.0  # the collector's Date header agreed with UTC
        if client._transport.server_today() != server:  # midnight passed in between
            pytest.skip("the UTC day changed during the test")
        reason = "day 2026-01-01 is in the future"
        assert client.configs.peek("gone") is None
        ahead = (server + dt.timedelta(days=1)).isoformat()
        yesterday = (server - dt.timedelta(days=1)).isoformat()
        assert client._restamp("gone", ahead, reason) == yesterday
        assert client._restamp("gone", server.isoformat(), reason) is None  # 2 days back
        assert client._restamp("gone", ahead, "some other refusal") is None
    finally:
        client.close()


@pytest.mark.parametrize("timeout", [-1, 0, (5,), "5", (1, float("inf")), (1, None), True, None])
def test_a_bad_timeout_is_refused_when_the_client_is_made(tmp_path: Path, timeout: Any) -> None:
    """``timeout`` was handed to ``requests`` unchecked: the constructor accepted -1 or "5",
    then ``prefetch`` raised a bare ValueError and the upload thread stopped for good."""
    with pytest.raises(InvalidParameter, match=r"timeout must be a number of seconds > 0"):
        _client(tmp_path, timeout=timeout)


def test_one_number_is_the_connect_and_the_read_timeout(tmp_path: Path) -> None:
    with _client(tmp_path, timeout=5, close_timeout=0) as client:
        assert client._transport.timeout == (5.0, 5.0)
    with _client(tmp_path, timeout=[1, 2.5], close_timeout=0) as client:
        assert client._transport.timeout == (1.0, 2.5)


def test_a_date_at_the_end_of_the_calendar_neither_raises_nor_restamps(tmp_path: Path) -> None:
    """A collector whose ``Date`` header said 9999-12-31: shifting a report stamped with that
    day by the device's skew overflowed the calendar in ``_restamp``, which stopped the upload
    thread for good; a Date header past the calendar (the clock moving on from it) broke the
    day stamp of every report."""
    import datetime as dt

    client = _client(tmp_path, close_timeout=0)
    try:
        far = dt.datetime(9999, 12, 31, 23, 0, tzinfo=dt.UTC).timestamp()
        client._transport._note_date("Fri, 31 Dec 9999 23:00:00 GMT")
        assert client._transport.server_skew is not None
        assert client._transport.server_today() == dt.date(9999, 12, 31)
        reason = "report #0: day 9999-12-31 is older than 30 days"
        assert client._restamp("c", "9999-12-31", reason) is None
        client._transport.server_skew = far - 1.0 + 2 * 86400  # past the calendar's last day
        assert client._transport.server_today() is None
        assert client._wire_day(dt.date(2026, 1, 2)) == dt.date(2026, 1, 2)
    finally:
        client.close()


@pytest.mark.parametrize("state_dir", ["", "  "])
def test_an_empty_state_dir_is_refused(tmp_path: Path, state_dir: str, monkeypatch: Any) -> None:
    """An empty ``state_dir`` put the state file and its lock in the working directory."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidParameter, match="state_dir must not be empty"):
        TelemetryClient("http://127.0.0.1:9", ingest_token="t" * 20, state_dir=state_dir)
    assert list(tmp_path.iterdir()) == []


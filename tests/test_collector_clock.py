"""The collector's test clock (collector/clock.py): an unreadable or malformed override is a
``ConfigError`` naming the setting, never a traceback from deep in a request."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from collector import clock
from collector.errors import ConfigError


def test_the_overrides_fix_the_date(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LDP_TODAY", raising=False)
    monkeypatch.delenv("LDP_TODAY_FILE", raising=False)
    assert clock.today() == dt.datetime.now(dt.UTC).date()
    day = tmp_path / "today"
    day.write_text("2026-03-04\n")
    monkeypatch.setenv("LDP_TODAY_FILE", str(day))
    assert clock.today() == dt.date(2026, 3, 4)
    monkeypatch.setenv("LDP_TODAY", "2026-11-21")  # the fixed date wins over the file
    assert clock.today() == dt.date(2026, 11, 21)


def test_an_unreadable_clock_file_names_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LDP_TODAY", raising=False)
    monkeypatch.setenv("LDP_TODAY_FILE", str(tmp_path / "missing"))
    with pytest.raises(ConfigError, match="LDP_TODAY_FILE: cannot read .*missing"):
        clock.today()


@pytest.mark.parametrize("text", ["", "tomorrow", "2026-13-01", "2026-11-21T00:00"])
def test_a_malformed_date_names_the_setting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str
) -> None:
    monkeypatch.delenv("LDP_TODAY", raising=False)
    day = tmp_path / "today"
    day.write_text(text)
    monkeypatch.setenv("LDP_TODAY_FILE", str(day))
    with pytest.raises(ConfigError, match="LDP_TODAY_FILE .* must be an ISO date"):
        clock.today()
    if text:
        monkeypatch.setenv("LDP_TODAY", text)
        with pytest.raises(ConfigError, match="^LDP_TODAY must be an ISO date"):
            clock.today()

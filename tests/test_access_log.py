"""The access log's lines, field by field: what it writes, and that nothing from the client
but a sanitised method gets in (``collector/accesslog.py``; the served log end to end is
``test_access_log_is_one_json_line_per_request_without_address_or_token``)."""

from __future__ import annotations

import json
import logging
import re
import sys
from collections.abc import Iterator

import pytest

from collector import accesslog, create_app
from tests.support.server import TOKENS

TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


class Recorder(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def clean_logger() -> Iterator[logging.Logger]:
    """The ``ldp.access`` logger without handlers; everything put back afterwards."""
    log = logging.getLogger(accesslog.LOGGER)
    saved = (list(log.handlers), log.disabled, log.propagate, log.level, accesslog._format)
    log.handlers.clear()
    yield log
    log.handlers[:] = saved[0]
    log.disabled, log.propagate, log.level, accesslog._format = saved[1:]


@pytest.fixture
def recorded(clean_logger: logging.Logger) -> Recorder:
    recorder = Recorder()
    clean_logger.addHandler(recorder)
    return recorder


def test_configure_adds_one_stderr_handler_and_stops_propagation(
    clean_logger: logging.Logger,
) -> None:
    accesslog.configure("text")
    accesslog.configure("json")
    assert len(clean_logger.handlers) == 1
    handler = clean_logger.handlers[0]
    assert isinstance(handler, logging.StreamHandler) and handler.stream is sys.stderr
    assert handler.formatter is not None and handler.formatter._fmt == "%(message)s"
    assert clean_logger.propagate is False and clean_logger.level == logging.INFO
    assert clean_logger.disabled is False


def test_an_unknown_format_is_refused_with_the_choices(clean_logger: logging.Logger) -> None:
    with pytest.raises(ValueError, match=r"expected one of \('text', 'json', 'off'\), got 'xml'"):
        accesslog.configure("xml")


def test_a_text_line_holds_exactly_the_six_fields(recorded: Recorder) -> None:
    accesslog.configure("text")
    accesslog.log_request("POST", "/v1/campaigns/<campaign_id>/reports", 200, 0.0123456, 57)
    (line,) = recorded.lines
    head, *fields = line.split(" ")
    assert head == "access"
    pairs = dict(f.split("=", 1) for f in fields)
    assert list(pairs) == ["time", "method", "path", "status", "duration_ms", "bytes"]
    assert TIME.match(pairs["time"])
    assert pairs["method"] == "POST" and pairs["path"] == "/v1/campaigns/<campaign_id>/reports"
    assert (pairs["status"], pairs["duration_ms"], pairs["bytes"]) == ("200", "12.35", "57")


def test_a_json_line_is_compact_and_typed(recorded: Recorder) -> None:
    accesslog.configure("json")
    accesslog.log_request("GET", "unmatched", 404, 0.5, 0)
    (line,) = recorded.lines
    assert ", " not in line and ": " not in line  # compact separators
    body = json.loads(line)
    assert list(body) == ["time", "method", "path", "status", "duration_ms", "bytes"]
    assert TIME.match(body["time"])
    assert body["method"] == "GET" and body["path"] == "unmatched"
    assert (body["status"], body["duration_ms"], body["bytes"]) == (404, 500.0, 0)


def test_off_writes_nothing_and_a_new_format_writes_again(recorded: Recorder) -> None:
    accesslog.configure("off")
    accesslog.log_request("GET", "/healthz", 200, 0.001, 2)
    assert recorded.lines == []
    accesslog.configure("text")
    accesslog.log_request("GET", "/healthz", 200, 0.001, 2)
    assert len(recorded.lines) == 1


def test_a_logger_above_info_writes_nothing(
    recorded: Recorder, clean_logger: logging.Logger
) -> None:
    accesslog.configure("json")
    clean_logger.setLevel(logging.WARNING)  # an operator silenced it through logging
    accesslog.log_request("GET", "/healthz", 200, 0.001, 2)
    assert recorded.lines == []


@pytest.mark.parametrize(
    ("method", "logged"),
    [
        ("GET", "GET"),
        ("A" * 16, "A" * 16),
        ("A" * 17, "-"),  # longer than any real method
        ("G3T", "-"),
        ("GET /x", "-"),
        ("", "-"),
        ("ÄÖ", "ÄÖ"),  # letters, short: harmless (str.isalpha); never an address or a token
    ],
)
def test_the_method_is_the_only_client_text_and_is_sanitised(
    recorded: Recorder, method: str, logged: str
) -> None:
    accesslog.configure("json")
    accesslog.log_request(method, "unmatched", 400, 0.0, 0)
    assert json.loads(recorded.lines[0])["method"] == logged


def test_route_template_names_the_rule_never_the_path(tmp_path: object) -> None:
    app = create_app({"database": f"{tmp_path}/a.db", **TOKENS})
    try:
        assert (
            accesslog.route_template(app, "/v1/campaigns/secret-id/reports", "POST")
            == "/v1/campaigns/<campaign_id>/reports"
        )
        assert accesslog.route_template(app, "/v1/campaigns/secret-id", "GET") == (
            "/v1/campaigns/<campaign_id>"
        )
        assert accesslog.route_template(app, "/no/such/path", "GET") == "unmatched"  # 404
        # 405: the path exists, not for this method
        assert accesslog.route_template(app, "/v1/campaigns/x/reports", "DELETE") == "unmatched"
    finally:
        app.extensions["ldp_storage"].close()

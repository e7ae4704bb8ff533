"""Property tests (hypothesis) for every parser of user or wire input that the other suites
do not already cover property-wise.

Already covered elsewhere (not repeated): the mechanisms' payload parsers and config
validation (tests/test_mechanisms_validation.py), garbage reports inside a valid batch and the
capped gunzip (tests/test_collector_ingest.py). Here: the collector's body decoder, the batch
envelope, the campaign-create parser, the estimates query, settings, bearer-token parsing and
CORS origins; the SDK's campaign-resource parser, campaign ids, Retry-After, its reading of the
collector's upload answer, its options and the Tally wire form.

The rule each property states: a parser either returns a valid value or raises the package's
own error with a message; never any other exception, never a 5xx.
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import math
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from flask import Flask
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from client_sdk import InvalidParameter, TelemetryClient
from client_sdk.config_cache import CampaignConfig, campaign_digest, check_campaign_id
from client_sdk.errors import LDPError
from client_sdk.mechanisms import Tally, create
from client_sdk.transport import RetryableError, Transport, parse_retry_after
from collector import create_app
from collector.auth import role_of
from collector.campaigns import Campaign, campaign_from_request
from collector.cors import parse_origins
from collector.errors import APIError, ConfigError
from collector.ingest import decode_body, ingest_batch
from collector.settings import SETTINGS, load_settings
from collector.storage.sqlite import SQLiteStorage
from tests.support.reports import reports
from tests.support.server import TOKENS

#: Derandomised: CI runs the same examples every time (a failure is a finding, not a flake).
FAST = settings(
    max_examples=150, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats()  # NaN and infinities included: Python's json reads and writes them
    | st.text(max_size=30)
)
#: Until the two SDK findings below are fixed, the SDK's properties use finite numbers only.
finite_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_infinity=False)
    | st.text(max_size=30)
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner),
    max_leaves=20,
)
MECHANISMS = ["rr", "grr", "sue", "oue", "olh", "hr", "ss", "rappor", "auto", "nope", "", 7]


def campaign_bodies() -> st.SearchStrategy[Any]:
    """Mostly well-formed create bodies with one field perturbed, plus pure garbage."""
    near = st.fixed_dictionaries(
        {
            "id": st.from_regex(r"[a-z0-9][a-z0-9_-]{0,10}", fullmatch=True) | st.text(max_size=70),
            "domain": st.lists(
                st.text(min_size=1, max_size=12), min_size=2, max_size=8, unique=True
            )
            | json_values,
            "mechanism": st.sampled_from(MECHANISMS),
            "epsilon": st.floats(min_value=0.05, max_value=8) | scalars,
        },
        optional={
            "description": st.text(max_size=50) | scalars,
            "params": st.dictionaries(st.sampled_from(["g", "d", "evil"]), scalars) | json_values,
            "window": st.sampled_from(["day", "week", "month"]) | scalars,
            "horizon_days": st.integers(-5, 5000) | scalars,
            "min_reports": st.integers(-5, 10**13) | scalars,
            "extra": scalars,
        },
    )
    return near | json_values


# -- collector ---------------------------------------------------------------------------------


@FAST
@given(body=campaign_bodies())
def test_campaign_parser_accepts_or_refuses_with_400(body: Any) -> None:
    try:
        campaign = campaign_from_request(body, today=dt.date(2026, 11, 22))
    except APIError as exc:
        assert exc.status == 400 and exc.code == "invalid_campaign" and exc.message
        return
    # Accepted: a resolved, self-consistent campaign whose record survives storage.
    assert isinstance(campaign, Campaign)
    again = Campaign.from_record(json.loads(json.dumps(campaign.to_record())))
    assert again.digest == campaign.digest and len(campaign.digest) == 64
    assert again.mechanism.config() == campaign.mechanism_config
    assert math.isfinite(campaign.mechanism.realised_epsilon)
    assert 0 < campaign.mechanism.realised_epsilon <= 16


headers_ct = st.sampled_from(
    ["application/json", "application/json; charset=utf-8", "APPLICATION/JSON", "text/plain",
     "", None, "application/json\x00"]
)  # fmt: skip
headers_ce = st.sampled_from(["gzip", "identity", "GZIP", " gzip ", "br", "", None, "gzip, gzip"])


@FAST
@given(raw=st.binary(max_size=300), ctype=headers_ct, cenc=headers_ce, gz=st.booleans())
def test_body_decoder_returns_json_or_a_clear_error(
    raw: bytes, ctype: str | None, cenc: str | None, gz: bool
) -> None:
    data = gzip.compress(raw) if gz else raw
    try:
        value = decode_body(data, content_type=ctype, content_encoding=cenc, max_bytes=1024)
    except APIError as exc:
        assert exc.status in (400, 413, 415) and exc.message
        return
    assert value == json.loads(raw.decode("utf-8")) or value != value  # NaN is not == itself


@FAST
@given(value=json_values, gz=st.booleans())
def test_body_decoder_round_trips_every_json_value(value: Any, gz: bool) -> None:
    raw = json.dumps(value).encode()
    assume(len(raw) <= 4096)
    data = gzip.compress(raw) if gz else raw
    got = decode_body(
        data,
        content_type="application/json",
        content_encoding="gzip" if gz else None,
        max_bytes=4096,
    )
    assert json.dumps(got) == json.dumps(value)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[SQLiteStorage, Campaign]]:
    storage = SQLiteStorage(tmp_path_factory.mktemp("prop") / "p.db")
    storage.migrate()
    campaign = campaign_from_request(
        {"id": "prop", "domain": ["a", "b", "c", "d"], "mechanism": "oue", "epsilon": 1.0}
    )
    storage.create_campaign(campaign)
    yield storage, campaign
    storage.close()


@FAST
@given(
    body=st.one_of(
        json_values,
        st.fixed_dictionaries(
            {"digest": st.text(max_size=70) | scalars, "reports": json_values},
            optional={"x": scalars},
        ),
    ),
    real_digest=st.booleans(),
)
def test_batch_envelope_is_refused_as_a_whole_or_counted(
    store: tuple[SQLiteStorage, Campaign], body: Any, real_digest: bool
) -> None:
    storage, campaign = store
    if real_digest and isinstance(body, dict) and "digest" in body:
        body["digest"] = campaign.digest
    before = storage.count_reports(campaign), storage.report_counters()
    try:
        result = ingest_batch(storage, campaign, body, max_reports=10)
    except APIError as exc:
        assert exc.status in (400, 409, 413) and exc.message
        assert (storage.count_reports(campaign), storage.report_counters()) == before
        return
    assert result.accepted + result.duplicate + result.rejected == len(body["reports"])
    assert storage.count_reports(campaign) == before[0] + result.accepted


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    app = create_app({"database": str(tmp_path_factory.mktemp("est") / "e.db"), **TOKENS})
    client = app.test_client()
    admin = {"Authorization": f"Bearer {TOKENS['admin_token']}"}
    campaign = client.post(
        "/v1/campaigns",
        json={"id": "est", "domain": ["a", "b", "c"], "mechanism": "grr", "epsilon": 1.0},
        headers=admin,
    ).json
    client.post(
        "/v1/campaigns/est/reports",
        json={"digest": campaign["digest"], "reports": reports(campaign, 30)},
        headers={"Authorization": f"Bearer {TOKENS['ingest_token']}"},
    )
    yield app
    app.extensions["ldp_storage"].close()


query_text = st.text(max_size=25) | st.sampled_from(
    ["2026-11-22", "2026-02-30", "0001-01-01", "9999-12-31", "nan", "inf", "-0", "1e-320",
     "0.5", "1", "0", "none", "clip", "mle", "norm-sub", "base-cut"]
)  # fmt: skip


@FAST
@given(
    params=st.dictionaries(st.sampled_from(["from", "to", "level", "postprocess", "x"]), query_text)
)
def test_estimates_query_never_fails_the_server(app: Flask, params: dict[str, str]) -> None:
    r = app.test_client().get(
        "/v1/campaigns/est/estimates",
        query_string=params,
        headers={"Authorization": f"Bearer {TOKENS['analyst_token']}"},
    )
    assert r.status_code in (200, 400, 422), r.get_data()[:300]
    if r.status_code != 200:
        assert set(r.json["error"]) == {"code", "message", "status"}


@FAST
@given(env=st.dictionaries(st.sampled_from([s.env for s in SETTINGS]), st.text(max_size=20)))
def test_settings_parse_or_say_which_is_wrong(env: dict[str, str]) -> None:
    try:
        out = load_settings(environ=env)
    except ConfigError as exc:
        assert "LDP_" in str(exc)
        return
    assert set(out) == {s.name for s in SETTINGS}


@FAST
@given(header=st.text(max_size=60) | st.none(), suffix=st.text(max_size=3))
def test_only_an_exact_token_gives_a_role(header: str | None, suffix: str) -> None:
    tokens = {"admin": "a" * 20, "analyst": "b" * 20, "ingest": "c" * 20}
    assert role_of(header, tokens) in (None, *tokens)
    for role, token in tokens.items():
        candidate = f"Bearer {token}{suffix}"
        expected = role if suffix.strip() == "" else None
        assert role_of(candidate, tokens) == expected


@FAST
@given(value=st.text(max_size=80) | st.none())
def test_cors_origins_parse_or_say_the_rule(value: str | None) -> None:
    try:
        origins = parse_origins(value)
    except ValueError as exc:
        assert "origin" in str(exc)
        return
    assert origins in ((), ("*",)) or all(
        o[0].isalpha() and "://" in o and not re.search(r"\s", o) and "/" not in o.split("://")[1]
        for o in origins
    )


# -- SDK -----------------------------------------------------------------------------------------


def resources() -> st.SearchStrategy[Any]:
    mech = create("oue", epsilon=1.0, domain=["a", "b", "c"]).config()
    return st.one_of(
        json_values,
        st.fixed_dictionaries(
            {
                "id": st.text(max_size=10) | scalars,
                "digest": st.text(max_size=10) | scalars,
                "mechanism": st.just(mech) | json_values,
            },
            optional={
                "window": st.sampled_from(["day", "week"]) | scalars,
                "horizon_days": st.integers(-3, 10**6) | scalars,
            },
        ),  # fmt: skip
    )


def _own_digest(body: dict[str, Any]) -> str | None:
    """The digest of ``body``'s config as the device computes it, None if it has none."""
    try:
        horizon = int(body.get("horizon_days", 30))
        return campaign_digest(body["id"], body["mechanism"], body.get("window", "day"), horizon)
    except (KeyError, TypeError, ValueError, OverflowError, RecursionError):
        return None


@FAST
@given(body=resources(), real_digest=st.booleans())
def test_sdk_campaign_resource_parser(body: Any, real_digest: bool) -> None:
    # Half the time the config's own digest, so bodies get past the digest check.
    own = _own_digest(body) if isinstance(body, dict) else None
    if real_digest and own is not None:
        body["digest"] = own
    try:
        config = CampaignConfig.from_resource(body)
    except LDPError as exc:
        assert str(exc)
        return
    assert isinstance(config.id, str) and config.digest == own


@FAST
@given(value=json_values)
def test_sdk_campaign_ids(value: Any) -> None:
    try:
        assert check_campaign_id(value) == value
    except InvalidParameter as exc:
        assert "slug" in str(exc)


@FAST
@given(value=st.text(max_size=40) | st.none() | st.sampled_from(["nan", "inf", "-1", "1e999"]))
def test_sdk_retry_after(value: str | None) -> None:
    got = parse_retry_after(value)
    assert got is None or (got >= 0 and not math.isnan(got))


@FAST
@given(data=json_values)
def test_tally_wire_form(data: Any) -> None:
    try:
        tally = Tally.from_dict(data)
    except LDPError:
        return
    assert Tally.from_dict(tally.to_dict()) == tally


@FAST
@given(
    option=st.sampled_from(
        ["batch_size", "flush_interval", "backoff_base", "backoff_cap", "close_timeout",
         "reports_per_window", "max_pending", "keep_sent", "durability"]
    ),
    value=scalars,
)  # fmt: skip
def test_sdk_options_are_checked(
    tmp_path_factory: pytest.TempPathFactory, option: str, value: Any
) -> None:
    state = tmp_path_factory.mktemp("opt")
    try:
        client = TelemetryClient(
            "http://127.0.0.1:9", ingest_token="t" * 20, state_dir=state, **{option: value}
        )
    except LDPError as exc:
        assert option in str(exc) or str(exc)
        return
    client.close(timeout=0)


class _Answer(BaseHTTPRequestHandler):
    body = b"{}"

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(type(self).body)))
        self.end_headers()
        self.wfile.write(type(self).body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def answering() -> Iterator[tuple[Transport, type[_Answer]]]:
    handler = type("Answer", (_Answer,), {})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    transport = Transport(f"http://127.0.0.1:{server.server_address[1]}", "t" * 20)
    yield transport, handler
    transport.close()
    server.shutdown()
    server.server_close()


@settings(
    max_examples=120, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck)
)
@given(
    answer=st.one_of(
        json_values,
        st.fixed_dictionaries(
            {"accepted": finite_scalars, "duplicate": finite_scalars, "rejected": finite_scalars,
             "errors": st.lists(st.fixed_dictionaries({"index": finite_scalars,
                                                       "reason": finite_scalars}),
                                max_size=3) | json_values},
        ),
    )
)  # fmt: skip
def test_sdk_reads_any_upload_answer_safely(
    answering: tuple[Transport, type[_Answer]], answer: Any
) -> None:
    """A broken or hostile collector answer is retried (RetryableError), never a crash."""
    transport, handler = answering
    handler.body = json.dumps(answer).encode()
    items = [{"id": "x" * 32, "day": "2026-11-22", "payload": "AA=="}] * 2
    try:
        result = transport.post_reports("c", "d", items)
    except RetryableError:
        return
    assert all(0 <= i < len(items) for i in result.rejected)


# -- regressions: answers and resources holding Infinity are refused cleanly by the SDK --


@pytest.mark.parametrize("field", ["accepted", "index"])
def test_sdk_upload_answer_with_infinity_is_retryable(
    answering: tuple[Transport, type[_Answer]], field: str
) -> None:
    transport, handler = answering
    answer: dict[str, Any] = {"accepted": 1, "duplicate": 0, "errors": []}
    if field == "accepted":
        answer["accepted"] = math.inf
    else:
        answer["errors"] = [{"index": math.inf, "reason": "x"}]
    handler.body = json.dumps(answer).encode()
    with pytest.raises(RetryableError):
        transport.post_reports("c", "d", [{"id": "x" * 32, "day": "2026-11-22"}])


def test_sdk_campaign_resource_with_infinite_horizon_is_refused() -> None:
    mech = create("oue", epsilon=1.0, domain=["a", "b", "c"]).config()
    with pytest.raises(InvalidParameter):
        CampaignConfig.from_resource(
            {"id": "x", "digest": "d", "mechanism": mech, "horizon_days": math.inf}
        )

"""The Flask app in-process: error envelope, settings, OpenAPI coverage, campaign validation."""

from __future__ import annotations

import gzip
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from collector import ConfigError, StorageUnavailable, create_app
from collector.metrics import MULTIPROC_ENV
from collector.openapi import openapi_document
from collector.settings import SETTINGS, load_settings
from tests.support.reports import batch, campaign_body, reports
from tests.support.server import TOKENS

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture()
def app(db_url: str) -> Iterator[Flask]:
    """The app on each backend (``db_url``: a SQLite file, then a fresh PostgreSQL database)."""
    app = create_app({"database": db_url, **TOKENS, "max_batch_reports": 50})
    yield app
    app.extensions["ldp_storage"].close()


@pytest.fixture()
def client(app: Flask) -> FlaskClient:
    return app.test_client()


def auth(role: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKENS[role + '_token']}"}


def make(client: FlaskClient, cid: str, **extra: Any) -> dict:
    r = client.post("/v1/campaigns", json=campaign_body(cid, **extra), headers=auth("admin"))
    assert r.status_code == 201, r.json
    return r.json


def error(r: Any, status: int) -> dict:
    assert r.status_code == status, r.data
    body = r.json
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "status"}
    assert body["error"]["status"] == status
    return body["error"]


# -- the error envelope, including Flask's own errors ----------------------------------------


def test_flask_404_405_413_use_the_json_envelope(client: FlaskClient) -> None:
    assert error(client.get("/nowhere"), 404)["code"] == "not_found"
    e405 = client.delete("/v1/campaigns")
    assert error(e405, 405)["code"] == "method_not_allowed"
    assert "GET" in e405.headers["Allow"]
    big = client.post(
        "/v1/campaigns",
        data=b"x" * (5 * 1024 * 1024),
        headers={**auth("admin"), "Content-Type": "application/json"},
    )
    assert error(big, 413)["code"] == "too_large"


def test_gzip_expansion_is_capped(tmp_path: Path) -> None:
    app = create_app({"database": str(tmp_path / "g.db"), **TOKENS, "max_body_bytes": 4096})
    client = app.test_client()
    campaign = make(client, "gz")
    body = gzip.compress(b'{"digest": "x", "reports": [' + b" " * 10_000 + b"]}")
    r = client.post(
        "/v1/campaigns/gz/reports",
        data=body,
        headers={**auth("ingest"), "Content-Type": "application/json", "Content-Encoding": "gzip"},
    )
    assert error(r, 413)["code"] == "too_large"
    assert campaign["id"] == "gz"


def test_batch_limit_is_configurable(client: FlaskClient) -> None:
    campaign = make(client, "small")
    r = client.post(
        "/v1/campaigns/small/reports",
        json=batch(campaign, reports(campaign, 51)),
        headers=auth("ingest"),
    )
    assert "LDP_MAX_BATCH_REPORTS" in error(r, 413)["message"]


# -- campaigns ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"id": "Bad Id"}, "slug"),
        ({"id": "x" * 65}, "slug"),
        ({"window": "month"}, "window"),
        ({"horizon_days": 0}, "horizon_days"),
        ({"min_reports": "10"}, "min_reports"),
        ({"mechanism": "nope"}, "unknown mechanism"),
        ({"epsilon": -1}, "epsilon"),
        ({"epsilon": "1"}, "epsilon"),
        ({"domain": "a,b"}, "domain"),
        ({"domain": ["a"]}, "domain"),
        ({"params": {"bogus": 1}}, "parameters"),
        ({"colour": "red"}, "unknown field"),
    ],
)
def test_bad_campaigns_are_refused_with_the_rule(
    client: FlaskClient, change: dict, needle: str
) -> None:
    body = {**campaign_body("c1"), **change}
    err = error(client.post("/v1/campaigns", json=body, headers=auth("admin")), 400)
    assert err["code"] == "invalid_campaign"
    assert needle in err["message"]


def test_campaign_resource_and_digest(client: FlaskClient) -> None:
    c = make(client, "occ", mechanism="sue-book", epsilon=None)
    assert c["mechanism"]["mechanism"] == "sue" and c["mechanism"]["params"] == {"p": 0.75}
    assert re.fullmatch(r"[0-9a-f]{64}", c["digest"])
    other = make(client, "occ2")
    assert other["digest"] != c["digest"]
    r = client.get("/v1/campaigns/occ", headers=auth("ingest"))
    assert r.json == c and r.headers["ETag"] == f'"{c["digest"]}"'
    assert error(client.get("/v1/campaigns/none", headers=auth("ingest")), 404)["code"] == (
        "unknown_campaign"
    )


def test_week_windows_and_estimate_ranges(client: FlaskClient) -> None:
    c = make(client, "weekly", window="week", horizon_days=400)
    # 2026-11-16 is a Monday: the 16th..22nd are one window, the 23rd... would be the next.
    import datetime as dt

    today = dt.datetime.now(dt.UTC).date()
    monday = today - dt.timedelta(days=today.weekday())
    days = [monday, monday + dt.timedelta(days=min(6, today.weekday())), monday - dt.timedelta(7)]
    items = [r for i, d in enumerate(days) for r in reports(c, 10, seed=i, day=d.isoformat())]
    answer = client.post(
        "/v1/campaigns/weekly/reports", json=batch(c, items), headers=auth("ingest")
    ).json
    assert answer["accepted"] == 30
    a = auth("analyst")
    everything = client.get("/v1/campaigns/weekly/estimates?postprocess=none", headers=a).json
    assert everything["n"] == 30
    this_week = client.get(
        f"/v1/campaigns/weekly/estimates?postprocess=none&from={today.isoformat()}", headers=a
    ).json
    assert this_week["n"] == 20
    bad = client.get("/v1/campaigns/weekly/estimates?from=2026-13-01", headers=a)
    assert error(bad, 400)["code"] == "invalid_parameter"
    assert error(client.get("/v1/campaigns/weekly/estimates?level=1.5", headers=a), 400)
    reversed_ = client.get(
        "/v1/campaigns/weekly/estimates?from=2026-11-20&to=2026-11-01", headers=a
    )
    assert error(reversed_, 400)


def test_not_enough_reports_is_422(client: FlaskClient) -> None:
    c = make(client, "few", min_reports=100)
    client.post("/v1/campaigns/few/reports", json=batch(c, reports(c, 10)), headers=auth("ingest"))
    err = error(client.get("/v1/campaigns/few/estimates", headers=auth("analyst")), 422)
    assert err["code"] == "not_enough_reports" and "(10 of 100)" in err["message"]


# -- settings ----------------------------------------------------------------------------------


def test_settings_precedence_defaults_env_mapping() -> None:
    env = {"LDP_MAX_BATCH_REPORTS": "77", "LDP_RETRY_AFTER": "9"}
    s = load_settings({"retry_after": 4}, environ=env)
    assert s["max_batch_reports"] == 77  # environment over default
    assert s["retry_after"] == 4  # mapping over environment
    assert s["max_body_bytes"] == 4 * 1024 * 1024  # default


def test_bad_settings_say_which_and_why() -> None:
    with pytest.raises(ConfigError, match="LDP_MAX_BATCH_REPORTS"):
        load_settings(environ={"LDP_MAX_BATCH_REPORTS": "many"})
    with pytest.raises(ConfigError, match="unknown collector setting"):
        load_settings({"max_batch": 3}, environ={})
    with pytest.raises(ConfigError, match=">= 1"):
        load_settings({"workers": 0}, environ={})


@pytest.fixture
def prometheus_mode_restored() -> Iterator[None]:
    """An app made in this process with a metrics directory switches prometheus_client to
    memory-mapped files for the whole process (``collector.metrics._use_multiprocess``): put the
    mode, the environment variable it sets and the open files back after the test, so that no
    later test (or server it starts) writes into this test's directory."""
    from prometheus_client import values

    before_class, before_env = values.ValueClass, os.environ.get(MULTIPROC_ENV)
    yield
    if values.ValueClass is not before_class:
        values.close_all_multiprocess_files()
        values.ValueClass = before_class
    if before_env is None:
        os.environ.pop(MULTIPROC_ENV, None)
    else:
        os.environ[MULTIPROC_ENV] = before_env


@pytest.mark.parametrize("setting", [s for s in SETTINGS], ids=lambda s: s.env)
@pytest.mark.usefixtures("prometheus_mode_restored")
def test_no_setting_value_is_a_traceback(
    tmp_path: Path, setting: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every setting, from the environment and from its ``_FILE``, with values an operator
    could mistype: a ConfigError naming it, or a working app. Before, a ``_FILE`` that was not
    UTF-8 raised UnicodeDecodeError, a NUL byte in a path ValueError, LDP_METRICS_DIR naming a
    file FileExistsError, and integers past the C int (LDP_PORT=99999999999) were taken and
    failed later with OverflowError."""
    # Relative paths land here, not in the checkout (LDP_SEALED_KEY_FILE=nan writes a key).
    monkeypatch.chdir(tmp_path)
    binary = tmp_path / "secret.bin"
    binary.write_bytes(b"\xff\xfe\x00 not text")
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    base = {
        "LDP_ADMIN_TOKEN": TOKENS["admin_token"],
        "LDP_ANALYST_TOKEN": TOKENS["analyst_token"],
        "LDP_INGEST_TOKEN": TOKENS["ingest_token"],
        "LDP_DATABASE": str(tmp_path / "c.db"),
    }
    values = ["many", "-1", "0", "2147483648", "99999999999", "nan", "a\x00b", str(a_file)]
    tries = [{setting.env: v} for v in values if setting.env != "LDP_DATABASE" or "\x00" in v]
    tries += [{setting.env + "_FILE": str(binary)}, {setting.env + "_FILE": "x\x00y"}]
    for extra in tries:
        environ = {**base, **extra}
        if setting.env + "_FILE" in extra and setting.env in environ:
            del environ[setting.env]
        try:
            create_app(load_settings(environ=environ))
        except ConfigError as exc:
            named = setting.env if setting.env != "LDP_DATABASE_PASSWORD" else "LDP_DATABASE"
            assert named in str(exc), (extra, exc)
        except StorageUnavailable as exc:  # LDP_CREATE_DATABASE=0 and no file: named too
            assert "does not exist" in str(exc), (extra, exc)


@pytest.mark.usefixtures("prometheus_mode_restored")
def test_a_relative_metrics_dir_survives_a_change_of_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """prometheus_client and the rate limiter open files under the metrics directory long after
    start: a relative LDP_METRICS_DIR made every request a 500 (FileNotFoundError) once the
    process's working directory moved. The setting is made absolute when it is read."""
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    app = create_app({"database": str(tmp_path / "m.db"), "metrics_dir": "metrics", **TOKENS})
    monkeypatch.chdir(tmp_path / "elsewhere")
    try:
        r = app.test_client().get("/v1/campaigns", headers={"Authorization": "Bearer nope"})
        assert r.status_code == 401
        # The rate limiter's file and prometheus_client's (this test's app is the first of
        # the process with a metrics directory: prometheus_mode_restored resets the mode).
        assert (tmp_path / "metrics" / "ratelimit.state").exists()
        assert list((tmp_path / "metrics").glob("counter_*.db"))
        assert not (tmp_path / "elsewhere" / "metrics").exists()
    finally:
        app.extensions["ldp_storage"].close()


@pytest.mark.usefixtures("prometheus_mode_restored")
def test_a_metrics_dir_is_made_with_its_missing_parents(tmp_path: Path) -> None:
    """An operator's LDP_METRICS_DIR may name a directory under folders that do not exist yet
    (a fresh volume): the collector makes them, as ``ldp serve`` makes its temporary one."""
    directory = tmp_path / "volume" / "ldp" / "metrics"
    app = create_app({"database": str(tmp_path / "p.db"), "metrics_dir": str(directory), **TOKENS})
    try:
        assert directory.is_dir()
        r = app.test_client().get("/v1/campaigns", headers={"Authorization": "Bearer nope"})
        assert r.status_code == 401
        assert list(directory.glob("counter_*.db"))
    finally:
        app.extensions["ldp_storage"].close()


def test_integer_settings_stop_at_what_the_system_takes() -> None:
    assert load_settings({"busy_timeout_ms": 2**31 - 1}, environ={})["busy_timeout_ms"]
    with pytest.raises(ConfigError, match="at most 2147483647"):
        load_settings({"busy_timeout_ms": 2**31}, environ={})
    assert load_settings(environ={"LDP_PORT": "65535"})["port"] == 65535
    with pytest.raises(ConfigError, match="LDP_PORT must be <= 65535"):
        load_settings(environ={"LDP_PORT": "65536"})


def test_tokens_are_required_distinct_and_long(tmp_path: Path) -> None:
    db = str(tmp_path / "t.db")
    with pytest.raises(ConfigError, match="LDP_ADMIN_TOKEN is not set"):
        create_app({"database": db})
    with pytest.raises(ConfigError, match="different"):
        create_app({"database": db, **TOKENS, "ingest_token": TOKENS["admin_token"]})
    with pytest.raises(ConfigError, match="at least 16"):
        create_app({"database": db, **TOKENS, "analyst_token": "short"})


def test_every_setting_is_documented() -> None:
    doc = (REPO / "docs" / "COLLECTOR.md").read_text()
    for setting in SETTINGS:
        assert f"`{setting.env}`" in doc, setting.env


def _documented_settings() -> dict[str, tuple[str, str]]:
    """docs/COLLECTOR.md's settings table: variable -> (default cell, integers-allowed cell)."""
    doc = (REPO / "docs" / "COLLECTOR.md").read_text()
    rows = re.findall(r"^\| `(LDP_[A-Z_]+)` \| ([^|]+?) \| ([^|]+?) \|", doc, flags=re.MULTILINE)
    assert len({env for env, _, _ in rows}) == len(rows), "a variable has two rows"
    return {env: (default, allowed) for env, default, allowed in rows}


def test_the_documented_defaults_are_the_defaults() -> None:
    """docs/COLLECTOR.md's table gives every variable's default: each row names a setting, each
    setting has a row, and the default cell, read by the setting's own parser, is the default
    the collector uses ((none) for none). A default changed in one place only fails here."""
    documented = _documented_settings()
    assert set(documented) == {s.env for s in SETTINGS}
    for setting in SETTINGS:
        cell = documented[setting.env][0]
        if cell == "(none)":
            assert setting.default is None, setting.env
        else:
            assert cell.startswith("`") and cell.endswith("`"), (setting.env, cell)
            assert setting.parse(cell[1:-1]) == setting.default, (setting.env, cell)


@pytest.mark.parametrize("setting", [s for s in SETTINGS], ids=lambda s: s.env)
def test_each_integer_setting_takes_exactly_its_documented_range(setting: Any) -> None:
    """The table's "integers allowed" cell (``>= m``, ``m-M`` or a dash) is the range the
    collector takes, from the environment: the bounds themselves are taken, one past either
    is refused naming the variable and the bound."""
    allowed = _documented_settings()[setting.env][1]
    bounds = re.fullmatch(r"(?:≥ (\d+)|(\d+)–(\d+)|—)", allowed)
    assert bounds is not None, (setting.env, allowed)
    low = bounds.group(1) or bounds.group(2)
    high = bounds.group(3)
    assert setting.minimum == (None if low is None else int(low))
    assert setting.maximum == (None if high is None else int(high))
    if low is not None:
        assert load_settings(environ={setting.env: low})[setting.name] == int(low)
        with pytest.raises(
            ConfigError, match=f"{setting.env} must be >= {low}, got {int(low) - 1}"
        ):
            load_settings(environ={setting.env: str(int(low) - 1)})
    if high is not None:
        assert load_settings(environ={setting.env: high})[setting.name] == int(high)
        with pytest.raises(ConfigError, match=f"{setting.env} must be <= {high}"):
            load_settings(environ={setting.env: str(int(high) + 1)})


def test_an_optional_setting_is_none_only_when_empty(tmp_path: Path) -> None:
    """Optional settings (a number, a path, a text) are none when unset or empty, from the
    environment or from the mapping; a value, including a Path or an int given to
    ``create_app``'s mapping, is kept."""
    optional = ("max_retention_days", "sealed_key_file", "database_password")
    unset = load_settings(environ={})
    assert [unset[name] for name in optional] == [None, None, None]
    empty_env = {
        "LDP_MAX_RETENTION_DAYS": "",
        "LDP_SEALED_KEY_FILE": "",
        "LDP_DATABASE_PASSWORD": "",
    }
    empty = load_settings(environ=empty_env)
    assert [empty[name] for name in optional] == [None, None, None]
    mapped = load_settings(dict.fromkeys(optional, ""), environ={})
    assert [mapped[name] for name in optional] == [None, None, None]
    assert load_settings(environ={"LDP_MAX_RETENTION_DAYS": "30"})["max_retention_days"] == 30
    given = load_settings(
        {"max_retention_days": 30, "sealed_key_file": tmp_path / "key", "metrics_dir": tmp_path},
        environ={},
    )
    assert given["max_retention_days"] == 30
    assert given["sealed_key_file"] == str(tmp_path / "key")
    assert given["metrics_dir"] == str(tmp_path)


def test_load_settings_takes_the_environment_by_keyword_only() -> None:
    """``environ`` is keyword-only (a mapping in second place would be mistaken for it),
    ``config`` either way; the table of settings is frozen."""
    assert load_settings(config={"retry_after": 4}, environ={})["retry_after"] == 4
    with pytest.raises(TypeError):
        load_settings({}, {"LDP_RETRY_AFTER": "4"})  # type: ignore[misc]
    with pytest.raises(AttributeError):
        SETTINGS[0].default = "other.db"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("database", "rule"),
    [
        ("ldp.db", "only for a postgresql://"),
        ("sqlite:///ldp.db", "only for a postgresql://"),
        ("mysql://user@host/db", "only for a postgresql://"),
        ("postgresql://127.0.0.1:5432/ldp", "must name a user and no password"),
        ("postgresql://ldp:secret@127.0.0.1/ldp", "must name a user and no password"),
    ],
)
def test_a_database_password_needs_a_postgres_url_with_a_user_and_no_password(
    database: str, rule: str
) -> None:
    environ = {"LDP_DATABASE": database, "LDP_DATABASE_PASSWORD": "p@ss/word"}
    with pytest.raises(ConfigError, match=rule):
        load_settings(environ=environ)
    url = load_settings(environ={**environ, "LDP_DATABASE": "postgres://ldp@h:5432/x"})["database"]
    assert url == "postgres://ldp:p%40ss%2Fword@h:5432/x"


# -- OpenAPI -----------------------------------------------------------------------------------


def _openapi_path(rule: str) -> str:
    return re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule)


def test_openapi_covers_every_route_and_method(app: Flask, client: FlaskClient) -> None:
    doc = client.get("/openapi.json").json
    assert doc == openapi_document(50)
    assert doc["openapi"].startswith("3.")
    served = {
        (_openapi_path(rule.rule), method.lower())
        for rule in app.url_map.iter_rules()
        # The dashboard is the HTML UI for people, not part of the JSON API.
        if rule.endpoint != "static" and not rule.rule.startswith("/dashboard")
        for method in rule.methods - {"HEAD", "OPTIONS"}
    }
    documented = {(path, m) for path, ops in doc["paths"].items() for m in ops}
    assert served == documented
    schemas = doc["components"]["schemas"]
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            assert op["responses"] and op["operationId"], (path, method)
            for response in op["responses"].values():
                for media in response.get("content", {}).values():
                    ref = media["schema"].get("$ref")
                    if ref:
                        assert ref.rsplit("/", 1)[1] in schemas
    assert schemas["ReportBatch"]["properties"]["reports"]["maxItems"] == 50


def test_openapi_matches_http_api_doc() -> None:
    text = (REPO / "docs" / "HTTP_API.md").read_text()
    for path in openapi_document()["paths"]:
        assert path.replace("{campaign_id}", "{id}") in text, path


def test_bearer_scheme_is_case_insensitive_and_tokens_exact(client: FlaskClient) -> None:
    token = TOKENS["analyst_token"]
    assert (
        client.get("/v1/campaigns", headers={"Authorization": f"bearer {token}"}).status_code == 200
    )
    # A scheme sorting after "Bearer" too (Token, Bearers): the mutation run's survivor compared
    # the scheme with < instead of !=, which let "Token <valid token>" in.
    other_schemes = (f"Basic {token}", f"Token {token}", f"Bearers {token}", f"Digest {token}")
    for header in (*other_schemes, f"Bearer {token}x", f"Bearer {token[:-1]}", "Bearer", token):
        r = client.get("/v1/campaigns", headers={"Authorization": header})
        assert error(r, 401)["code"] == "unauthorized", header


def test_campaign_expected_distribution_is_optional_and_resolved(client: FlaskClient) -> None:
    from client_sdk.mechanisms import create
    from tests.support.reports import LABELS

    weights = [10.0] + [1.0] * (len(LABELS) - 1)
    c = make(client, "skewed", mechanism="auto", epsilon=2.0, expected=weights)
    # The stored config is the concrete mechanism with its parameters: a device rebuilds it
    # without the weights, and it is what create("auto", ..., expected=...) gives.
    want = create("auto", epsilon=2.0, domain=LABELS, expected=weights).config()
    assert c["mechanism"] == want
    plain = make(client, "plain", mechanism="auto", epsilon=2.0)
    assert plain["mechanism"] == create("auto", epsilon=2.0, domain=LABELS).config()
    for bad, needle in (([1, 2], "weights but the domain has"), ("x", "list of numbers")):
        body = {**campaign_body("bad", mechanism="auto", epsilon=2.0), "expected": bad}
        err = error(client.post("/v1/campaigns", json=body, headers=auth("admin")), 400)
        assert needle in err["message"]
    body = {**campaign_body("bad2", mechanism="oue"), "expected": [1.0] * len(LABELS)}
    err = error(client.post("/v1/campaigns", json=body, headers=auth("admin")), 400)
    assert "expected applies only to 'auto'" in err["message"]

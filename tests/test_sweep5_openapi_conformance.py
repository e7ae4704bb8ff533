"""The served /openapi.json tells the truth about every endpoint of a real ``ldp serve``.

What a client generator or an API gateway relies on: every routed path is documented and every
documented one routed; every answer's status is documented for its operation, its content type
is a documented one, its JSON body fits the documented schema (no undeclared field), the
headers the document promises are sent, and the request headers the collector honours are
declared. A real collector subprocess (sealed key on) holds campaigns of every kind (categorical
frequency mechanisms, numeric mean and distribution, multi-attribute, open-domain, shuffled)
with reports perturbed by ``client_sdk``'s mechanisms (sealed with ``client_sdk.sealed`` for the
shuffled one); every operation is then called with good and bad input.

``Contract`` is also used by tests/test_sweep5_openapi_limits.py (rate limit, admission).
"""

from __future__ import annotations

import datetime as dt
import gzip
import json
import re
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema_rs
import numpy as np
import pytest
import requests

from client_sdk.mechanisms import from_config
from client_sdk.sealed import seal
from tests.support.openapi_schema import as_json_schema
from tests.support.server import TOKENS, CollectorProcess, running_collector

TIMEOUT = 60
WRONG_TOKEN = {"Authorization": "Bearer not-a-token-of-this-collector"}
#: Request headers whose meaning the collector honours: an operation that is sent one must
#: declare it as a parameter (Content-Type and Authorization are the document's own words).
HONOURED_HEADERS = ("Content-Encoding", "If-None-Match")
#: Answer headers a client acts on: when an answer carries one, its response documents it.
CONTRACT_HEADERS = ("ETag", "Location", "Retry-After", "WWW-Authenticate")
LABELS = ["a", "b", "c", "d"]
NUMERIC = [0, 100]
ATTRIBUTES: dict[str, Any] = {
    "occ": ["x", "y", "z"],
    "sex": ["F", "M"],
    "age": {"bounds": [17, 90]},
}
SKETCH = {"width": 256, "depth": 8}
#: One campaign of every kind and of each family of mechanism.
CAMPAIGNS: dict[str, dict[str, Any]] = {
    "cat-rr": {"domain": ["a", "b"], "mechanism": "rr"},
    "cat-grr": {"domain": LABELS, "mechanism": "grr"},
    "cat-oue": {"domain": LABELS, "mechanism": "oue"},
    "cat-sue": {"domain": LABELS, "mechanism": "sue"},
    "cat-olh": {"domain": LABELS, "mechanism": "olh"},
    "cat-hr": {"domain": LABELS, "mechanism": "hr"},
    "cat-ss": {"domain": LABELS, "mechanism": "ss"},
    "cat-auto": {"domain": LABELS, "mechanism": "auto", "expected": [4, 3, 2, 1]},
    "num-hybrid": {"bounds": NUMERIC, "mechanism": "hybrid"},
    "num-piecewise": {"bounds": NUMERIC, "mechanism": "piecewise"},
    "num-duchi": {"bounds": NUMERIC, "mechanism": "duchi"},
    "num-1bit": {"bounds": NUMERIC, "mechanism": "1bitmean"},
    "num-alpha": {"bounds": NUMERIC, "mechanism": "alpha_point"},
    "num-sw": {"bounds": NUMERIC, "mechanism": "square_wave"},
    "multi-smp": {"attributes": ATTRIBUTES, "mechanism": "smp", "pairs": [["occ", "sex"]]},
    "multi-spl": {"attributes": ATTRIBUTES, "mechanism": "spl", "pairs": [["occ", "sex"]]},
    "multi-rsfd": {
        "attributes": {"occ": ["x", "y", "z"], "sex": ["F", "M"]},
        "mechanism": "rsfd",
        "pairs": [["occ", "sex"]],
    },
    "open-pem": {"mechanism": "pem", "max_length": 8, "params": SKETCH},
    "open-cms": {"mechanism": "cms", "max_length": 8, "params": SKETCH},
    "open-hcms": {"mechanism": "hcms", "max_length": 8, "params": SKETCH},
    "shuffled": {"domain": LABELS, "mechanism": "grr", "shuffler": "http://127.0.0.1:9/"},
}
KINDS = {
    "cat": "frequency",
    "num": "mean",
    "multi": "multi",
    "open": "open_domain",
    "shuffled": "frequency",
}
N = 300


def today() -> str:
    return dt.datetime.now(dt.UTC).date().isoformat()


class Contract:
    """Checks real answers against the operations of an OpenAPI document."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.doc = document
        self.components = document["components"]["schemas"]
        self._patterns = [
            (re.compile("^" + re.sub(r"\{[^}]+\}", "[^/]+", template) + "$"), template)
            for template in document["paths"]
        ]

    def operation(self, method: str, path: str) -> dict[str, Any]:
        bare = path.split("?", 1)[0]
        for pattern, template in self._patterns:
            if pattern.match(bare):
                ops = self.doc["paths"][template]
                assert method.lower() in ops, f"{method} {template} is not documented"
                operation: dict[str, Any] = ops[method.lower()]
                return operation
        raise AssertionError(f"no documented path matches {bare!r}")

    def response(
        self, method: str, path: str, status: int, *, explicit: bool = False
    ) -> dict[str, Any]:
        """The documented answer of ``status`` (``explicit``: not via ``default``)."""
        responses = self.operation(method, path)["responses"]
        documented = responses.get(str(status))
        if documented is None and not explicit:
            documented = responses.get("default")
        assert documented is not None, (
            f"{method} {path[:80]} answered {status}, which its operation does not document "
            f"(documented: {sorted(responses)})"
        )
        answer: dict[str, Any] = documented
        return answer

    def check(
        self,
        method: str,
        path: str,
        r: requests.Response,
        *,
        sent_headers: dict[str, str] | None = None,
        explicit: bool = False,
    ) -> None:
        """Assert that the answer ``r`` to ``method path`` is what the document says."""
        operation = self.operation(method, path)
        declared = {
            p["name"].lower() for p in operation.get("parameters", []) if p["in"] == "header"
        }
        for name in sent_headers or {}:
            if name in HONOURED_HEADERS:
                assert name.lower() in declared, f"{method} {path}: header {name} is undeclared"
        documented = self.response(method, path, r.status_code, explicit=explicit)
        where = f"{method} {path[:80]} -> {r.status_code}"
        for header in documented.get("headers", {}):
            assert header in r.headers, f"{where}: documented header {header} is missing"
        for header in CONTRACT_HEADERS:
            if header in r.headers:
                assert header in documented.get("headers", {}), f"{where}: {header} undocumented"
        content = documented.get("content")
        if not content:
            assert r.content == b"", f"{where}: a body where none is documented"
            return
        media = r.headers.get("Content-Type", "").split(";", 1)[0].strip()
        assert media in content, f"{where}: Content-Type {media!r} is not one of {list(content)}"
        if media != "application/json":
            return
        schema = content[media]["schema"]
        body = r.json()
        root = {
            **as_json_schema(schema),
            "components": {"schemas": as_json_schema(self.components)},
        }
        errors = [str(e) for e in jsonschema_rs.validator_for(root).iter_errors(body)]
        assert errors == [], f"{where}: {errors[:3]}"
        assert self.undeclared(schema, body) == [], where

    def undeclared(self, schema: Any, value: Any, at: str = "$") -> list[str]:
        """Paths of object fields ``value`` holds that ``schema`` does not declare ($ref, allOf
        merged, oneOf by the ``kind`` discriminator, arrays, additionalProperties)."""
        schema = self._resolve(schema)
        if not isinstance(schema, dict):
            return []
        if "oneOf" in schema and isinstance(value, dict) and "kind" in value:
            for option in schema["oneOf"]:
                target = self._resolve(option)
                if value["kind"] in target.get("properties", {}).get("kind", {}).get("enum", []):
                    return self.undeclared(target, value, at)
            return [f"{at} (no oneOf member of kind {value['kind']!r})"]
        found: list[str] = []
        if isinstance(value, dict) and "properties" in schema:
            extra = schema.get("additionalProperties")
            for key, item in value.items():
                if key in schema["properties"]:
                    found += self.undeclared(schema["properties"][key], item, f"{at}.{key}")
                elif isinstance(extra, dict):
                    found += self.undeclared(extra, item, f"{at}.{key}")
                else:
                    found.append(f"{at}.{key}")
        if isinstance(value, list) and isinstance(schema.get("items"), dict):
            for i, item in enumerate(value):
                found += self.undeclared(schema["items"], item, f"{at}[{i}]")
        return found

    def _resolve(self, schema: Any) -> Any:
        while isinstance(schema, dict) and "$ref" in schema:
            schema = self.components[schema["$ref"].rsplit("/", 1)[1]]
        if isinstance(schema, dict) and "allOf" in schema:
            merged: dict[str, Any] = {"type": "object", "properties": {}}
            for part in schema["allOf"]:
                merged["properties"].update(self._resolve(part).get("properties", {}))
            return merged
        return schema


class Client:
    """``requests`` against a collector, every answer checked by a :class:`Contract`."""

    def __init__(self, srv: CollectorProcess) -> None:
        self.srv = srv
        self.contract = Contract(requests.get(srv.url + "/openapi.json", timeout=TIMEOUT).json())

    def call(
        self,
        method: str,
        path: str,
        role: str | None = None,
        *,
        headers: dict[str, str] | None = None,
        explicit: bool = False,
        check: bool = True,
        **kwargs: Any,
    ) -> requests.Response:
        """``method path`` as ``role``; the answer checked against the document unless
        ``check`` is false (the fixture's set-up: each finding fails its own test)."""
        sent = {**(self.srv.headers(role) if role else {}), **(headers or {})}
        r = requests.request(method, self.srv.url + path, headers=sent, timeout=TIMEOUT, **kwargs)
        if check:
            self.contract.check(method, path, r, sent_headers=headers, explicit=explicit)
        return r


def values_for(cid: str, gen: np.random.Generator) -> Any:
    """``N`` devices' true values for campaign ``cid``."""
    spec = CAMPAIGNS[cid]
    if "domain" in spec:
        return gen.integers(0, len(spec["domain"]), N)
    if "bounds" in spec:
        return gen.uniform(-10, 110, N)  # some outside the bounds: devices clip
    if "attributes" in spec:
        out: dict[str, Any] = {}
        for name, labels in spec["attributes"].items():
            out[name] = gen.integers(0, len(labels), N) if isinstance(labels, list) else (
                gen.uniform(17, 90, N)
            )  # fmt: skip
        return out
    return [str(v) for v in gen.choice(["firefox", "chrome", "safari", "édge"], N)]


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Client, dict[str, Any]]]:
    """A collector holding every campaign of ``CAMPAIGNS`` with ``N`` reports each."""
    tmp = tmp_path_factory.mktemp("sweep5-openapi")
    env = {"LDP_SEALED_KEY_FILE": str(tmp / "sealed.key"), "LDP_RATE_LIMIT": "0"}
    with running_collector(tmp, env=env) as srv:
        client = Client(srv)
        campaigns: dict[str, Any] = {}
        gen = np.random.default_rng(20261128)
        key = client.call("GET", "/v1/sealed/key", check=False).json()
        for cid, spec in CAMPAIGNS.items():
            body = {"id": cid, "epsilon": 2.0, "min_reports": 10, **spec}
            created = client.call("POST", "/v1/campaigns", "admin", json=body, check=False)
            assert created.status_code == 201, created.text
            campaign = campaigns[cid] = created.json()
            mech: Any = from_config(campaign["mechanism"])
            payloads = mech.encode_many(mech.perturb_many(values_for(cid, gen), rng=gen))
            reports = [
                {"id": secrets.token_hex(16), "day": today(), "payload": p} for p in payloads
            ]
            if campaign.get("shuffler"):
                messages = [seal(key["public_key"], cid, campaign["digest"], r) for r in reports]
                up = client.call(
                    "POST", "/v1/sealed", "ingest", json={"messages": messages}, check=False
                )
            else:
                batch = {"digest": campaign["digest"], "reports": reports}
                up = client.call(
                    "POST", f"/v1/campaigns/{cid}/reports", "ingest", json=batch, check=False
                )
            assert up.status_code == 200 and up.json()["accepted"] == N, up.text
        yield client, campaigns


def test_every_routed_api_path_is_documented_and_every_documented_one_is_routed(
    live: tuple[Client, dict[str, Any]], tmp_path: Path
) -> None:
    from collector.app import create_app

    client, _ = live
    app = create_app({**TOKENS, "database": str(tmp_path / "c.db"), "create_database": True})
    routed = {
        (re.sub(r"<(?:\w+:)?(\w+)>", r"{\1}", rule.rule), method.lower())
        for rule in app.url_map.iter_rules()
        # The dashboard is the HTML UI for people (docs/COLLECTOR.md), not the JSON API.
        if rule.endpoint != "static" and not rule.rule.startswith("/dashboard")
        for method in (rule.methods or set()) - {"HEAD", "OPTIONS"}
    }
    documented = {
        (path, method) for path, ops in client.contract.doc["paths"].items() for method in ops
    }
    assert routed == documented


@pytest.mark.parametrize("cid", list(CAMPAIGNS))
def test_each_kind_of_campaign_answers_as_documented(
    live: tuple[Client, dict[str, Any]], cid: str
) -> None:
    client, campaigns = live
    got = client.call("GET", f"/v1/campaigns/{cid}", "ingest")
    assert got.status_code == 200 and got.json()["digest"] == campaigns[cid]["digest"]
    tag = got.headers["ETag"]
    unchanged = client.call("GET", f"/v1/campaigns/{cid}", "ingest", headers={"If-None-Match": tag})
    assert unchanged.status_code == 304
    answer = client.call("GET", f"/v1/campaigns/{cid}/estimates", "analyst")
    assert answer.status_code == 200, answer.text
    assert answer.json()["kind"] == (
        "distribution" if cid == "num-sw" else KINDS[cid.split("-", 1)[0]]
    )
    csv = client.call(
        "GET", f"/v1/campaigns/{cid}/estimates", "analyst", headers={"Accept": "text/csv"}
    )
    assert csv.status_code == 200 and csv.headers["Content-Type"].startswith("text/csv")
    for level in ("1e-300", "0.5", "0.9999999999999999"):  # intervals of zero and huge width
        edge = client.call("GET", f"/v1/campaigns/{cid}/estimates?level={level}", "analyst")
        assert edge.status_code == 200, edge.text
    if cid.startswith("open"):
        query = "?top=3&candidate=firefox&candidate=nobody"
        asked = client.call("GET", f"/v1/campaigns/{cid}/estimates{query}", "analyst")
        assert asked.status_code == 200, asked.text


def test_creating_a_campaign_of_each_kind_answers_as_documented(
    live: tuple[Client, dict[str, Any]],
) -> None:
    """The fixture created them unchecked; the same bodies under other ids, checked."""
    client, _ = live
    for cid, spec in CAMPAIGNS.items():
        body = {"id": f"again-{cid}", "epsilon": 2.0, "min_reports": 10, **spec}
        created = client.call("POST", "/v1/campaigns", "admin", json=body)
        assert created.status_code == 201, created.text
        assert created.headers["Location"] == f"/v1/campaigns/again-{cid}"


def test_lists_and_uploads_answer_as_documented(live: tuple[Client, dict[str, Any]]) -> None:
    client, campaigns = live
    listed = client.call("GET", "/v1/campaigns", "analyst")
    assert set(CAMPAIGNS) <= {c["id"] for c in listed.json()["campaigns"]}
    oue = campaigns["cat-oue"]
    bad = [
        {"id": "short", "day": today(), "payload": "x"},
        {"id": secrets.token_hex(16), "day": "someday", "payload": None},
        "not a report",
    ]
    up = client.call(
        "POST",
        "/v1/campaigns/cat-oue/reports",
        "ingest",
        json={"digest": oue["digest"], "reports": bad},
    )
    assert up.status_code == 200 and up.json()["rejected"] == 3
    sealed = client.call("POST", "/v1/sealed", "ingest", json={"messages": ["AAAA"]})
    assert sealed.status_code == 200 and sealed.json()["rejected"] == 1
    for path in ("/healthz", "/readyz", "/openapi.json", "/v1/sealed/key"):
        assert client.call("GET", path).status_code == 200
    assert client.call("GET", "/metrics", "analyst").status_code == 200


def test_gzipped_bodies_are_taken_where_the_header_is_declared(
    live: tuple[Client, dict[str, Any]],
) -> None:
    """Every JSON upload reads ``Content-Encoding: gzip``: each declares the header."""
    client, campaigns = live
    gz = {"Content-Type": "application/json", "Content-Encoding": "gzip"}

    def packed(body: object) -> bytes:
        return gzip.compress(json.dumps(body).encode())

    spec = {"id": "gzipped", "epsilon": 1.0, "domain": ["a", "b"]}
    r = client.call("POST", "/v1/campaigns", "admin", headers=gz, data=packed(spec))
    assert r.status_code == 201, r.text
    r = client.call("POST", "/v1/sealed", "ingest", headers=gz, data=packed({"messages": []}))
    assert r.status_code == 200, r.text
    batch = {"digest": campaigns["cat-grr"]["digest"], "reports": []}
    r = client.call(
        "POST", "/v1/campaigns/cat-grr/reports", "ingest", headers=gz, data=packed(batch)
    )
    assert r.status_code == 200, r.text
    for path in ("/v1/campaigns", "/v1/sealed", "/v1/campaigns/cat-grr/reports"):
        brotli = {"Content-Type": "application/json", "Content-Encoding": "br"}
        role = "admin" if path == "/v1/campaigns" else "ingest"
        assert client.call("POST", path, role, headers=brotli, data=b"{}").status_code == 415


JSON_TYPE = {"Content-Type": "application/json"}
TEXT = {"data": "{}", "headers": {"Content-Type": "text/plain"}}
NOT_JSON = {"data": "{", "headers": JSON_TYPE}
NOT_GZIP = {"data": b"no gzip", "headers": {**JSON_TYPE, "Content-Encoding": "gzip"}}
TOO_BIG = {"data": b" " * 5_000_000, "headers": JSON_TYPE}
C = "/v1/campaigns"
OUE = "/v1/campaigns/cat-oue"
REP = "/v1/campaigns/cat-oue/reports"
EST = "/v1/campaigns/cat-oue/estimates"
PEM = "/v1/campaigns/open-pem/estimates"
BAD_INPUT: list[tuple[str, str, str | None, dict[str, Any], int]] = [
    ("GET", C, None, {}, 401),
    ("GET", C, "ingest", {}, 403),
    ("POST", C, None, {"json": {}}, 401),
    ("POST", C, "analyst", {"json": {}}, 403),
    ("POST", C, "admin", {"json": {"id": "cat-oue", "domain": LABELS, "epsilon": 1.0}}, 409),
    ("POST", C, "admin", {"json": {"id": "Bad Id", "domain": LABELS, "epsilon": 1.0}}, 400),
    ("POST", C, "admin", {"json": {"id": "one", "domain": ["a"], "epsilon": 1.0}}, 400),
    ("POST", C, "admin", {"json": [1]}, 400),
    ("POST", C, "admin", NOT_JSON, 400),
    ("POST", C, "admin", TEXT, 415),
    ("POST", C, "admin", TOO_BIG, 413),
    ("GET", "/v1/campaigns/nope", "ingest", {}, 404),
    ("GET", OUE, None, {}, 401),
    ("GET", OUE, None, {"headers": WRONG_TOKEN}, 401),
    ("POST", "/v1/campaigns/nope/archive", "admin", {}, 404),
    ("POST", OUE + "/archive", "analyst", {}, 403),
    ("POST", OUE + "/archive", None, {}, 401),
    ("POST", "/v1/campaigns/nope/reports", "ingest", {"json": {}}, 404),
    ("POST", REP, "analyst", {"json": {}}, 403),
    ("POST", REP, None, {"json": {}}, 401),
    ("POST", REP, "ingest", {"json": {"digest": "0" * 64, "reports": []}}, 409),
    ("POST", REP, "ingest", {"json": {"digest": "x", "extra": 1}}, 400),
    ("POST", REP, "ingest", NOT_JSON, 400),
    ("POST", REP, "ingest", NOT_GZIP, 400),
    ("POST", REP, "ingest", TEXT, 415),
    ("POST", REP, "ingest", {"json": {"digest": "DIGEST", "reports": [{}] * 5001}}, 413),
    ("POST", "/v1/campaigns/shuffled/reports", "ingest", {"json": {"digest": "x"}}, 409),
    ("GET", "/v1/campaigns/nope/estimates", "analyst", {}, 404),
    ("GET", EST, "ingest", {}, 403),
    ("GET", EST, None, {}, 401),
    ("GET", EST + "?form=2020-01-01", "analyst", {}, 400),
    ("GET", EST + "?from=2020-01-01&from=2020-01-02", "analyst", {}, 400),
    ("GET", EST + "?level=1", "analyst", {}, 400),
    ("GET", EST + "?level=x", "analyst", {}, 400),
    ("GET", EST + "?from=bad", "analyst", {}, 400),
    ("GET", EST + "?from=2030-01-02&to=2030-01-01", "analyst", {}, 400),
    ("GET", EST + "?postprocess=nope", "analyst", {}, 400),
    ("GET", EST + "?top=3", "analyst", {}, 400),
    ("GET", PEM + "?top=0", "analyst", {}, 400),
    ("GET", PEM + "?" + "&".join(["candidate=a"] * 300), "analyst", {}, 400),
    ("GET", EST + "?to=2000-01-01", "analyst", {}, 422),
    ("POST", "/v1/sealed", None, {"json": {"messages": []}}, 401),
    ("POST", "/v1/sealed", "analyst", {"json": {"messages": []}}, 403),
    ("POST", "/v1/sealed", "ingest", {"json": {"reports": []}}, 400),
    ("POST", "/v1/sealed", "ingest", {"json": {"messages": ["A"] * 5001}}, 413),
    ("POST", "/v1/sealed", "ingest", TEXT, 415),
    ("GET", "/metrics", None, {}, 401),
    ("GET", "/metrics", None, {"headers": WRONG_TOKEN}, 401),
]


@pytest.mark.parametrize(
    ("method", "path", "role", "kwargs", "status"),
    BAD_INPUT,
    ids=[f"{m} {p[:60]} {r} {s}" for m, p, r, _, s in BAD_INPUT],
)
def test_bad_input_answers_a_documented_error(
    live: tuple[Client, dict[str, Any]],
    method: str,
    path: str,
    role: str | None,
    kwargs: dict[str, Any],
    status: int,
) -> None:
    client, campaigns = live
    kwargs = dict(kwargs)
    headers = kwargs.pop("headers", {})
    if isinstance(kwargs.get("json"), dict) and kwargs["json"].get("digest") == "DIGEST":
        kwargs["json"] = {**kwargs["json"], "digest": campaigns["cat-oue"]["digest"]}
    r = client.call(method, path, role, headers=headers, explicit=True, **kwargs)
    assert r.status_code == status, r.text[:300]
    assert r.json()["error"]["status"] == status


def test_archiving_answers_as_documented(live: tuple[Client, dict[str, Any]]) -> None:
    client, campaigns = live
    spec = {"id": "to-archive", "epsilon": 1.0, "domain": ["a", "b"]}
    created = client.call("POST", "/v1/campaigns", "admin", json=spec).json()
    for _ in range(2):  # archiving again keeps the first date
        r = client.call("POST", "/v1/campaigns/to-archive/archive", "admin")
        assert r.status_code == 200 and r.json()["archived"] == today()
    gone = client.call(
        "POST",
        "/v1/campaigns/to-archive/reports",
        "ingest",
        json={"digest": created["digest"], "reports": []},
    )
    assert gone.status_code == 410
    assert client.call("GET", "/v1/campaigns/to-archive", "ingest").json()["archived"] == today()


def _each_operation(client: Client) -> Iterator[tuple[str, str]]:
    for template, ops in client.contract.doc["paths"].items():
        for method in ops:
            yield method.upper(), template.replace("{campaign_id}", "cat-oue")


def test_the_servers_own_errors_are_documented_on_every_operation(
    live: tuple[Client, dict[str, Any]],
) -> None:
    """A request line or headers over the server's limits are refused before any route, on
    every path (collector/worker.py): 414 and 431, each operation documents them."""
    client, _ = live
    for method, path in _each_operation(client):
        long = client.call(method, f"{path}?{'q' * 5000}", "admin", explicit=True)
        assert long.status_code == 414 and long.json()["error"]["code"] == "uri_too_long"
        big = client.call(method, path, "admin", headers={"X-Big": "h" * 20000}, explicit=True)
        assert big.status_code == 431 and big.json()["error"]["code"] == "headers_too_large"


def test_every_answer_to_every_role_is_documented(live: tuple[Client, dict[str, Any]]) -> None:
    """Each operation called with each role's token, a wrong one and none: whatever it
    answers (401 with its WWW-Authenticate, 403, 200 ...) is documented, explicitly."""
    client, campaigns = live
    bodies: dict[str, Any] = {
        "/v1/campaigns": {"json": {"id": "x", "domain": ["a"]}},  # invalid: nothing created
        REP: {"json": {"digest": campaigns["cat-oue"]["digest"], "reports": []}},
        "/v1/sealed": {"json": {"messages": []}},
    }  # fmt: skip
    seen = set()
    for method, path in _each_operation(client):
        if path.endswith("/archive"):
            path = "/v1/campaigns/nope/archive"  # the shared campaign keeps its ingest
        for role in ("admin", "analyst", "ingest", None, "wrong"):
            headers = WRONG_TOKEN if role == "wrong" else None
            token = role if role != "wrong" else None
            r = client.call(
                method, path, token, headers=headers, explicit=True, **bodies.get(path, {})
            )
            seen.add(r.status_code)
    assert {200, 401, 403, 404} <= seen

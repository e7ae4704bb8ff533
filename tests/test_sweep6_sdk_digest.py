"""The device checks the config digest it sends back with every report.

Found by an adversarial sweep of the SDK from the collector's side (2026-11-28): every upload
carries the campaign config's ``digest``, which the collector serves in ``GET
/v1/campaigns/{id}`` and which the device did not check (only its length and characters). A
collector could serve each device a digest of its own (any 64 hex digits) with an identical
config, and then link all of one device's uploads across days and campaigns through it,
whatever the per-request separation, the unlinkable storage and the shuffler hide. It could
also vary the config itself per device where the device does not look: a key inside
``mechanism`` that ``from_config`` ignores, ``1`` for ``1.0``.

Now the digest has one definition (``client_sdk.config_cache.campaign_digest``, which the
collector's ``Campaign.digest`` calls), and a config is used only if its mechanism object holds
nothing the device's mechanism does not use and its digest is its own; with ``pins`` the app
fixes the digests it accepts. The honest path is checked against a real ``ldp serve`` with a
campaign of every kind; the hostile collectors are a small fake HTTP server (the real one
cannot be made to serve them).
"""

from __future__ import annotations

import hashlib
import json
import secrets
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import requests

from client_sdk import InvalidParameter, PrivacyBudget, TelemetryClient
from client_sdk.config_cache import CampaignConfig, campaign_digest
from client_sdk.mechanisms import create
from collector.campaigns import Campaign, campaign_from_request
from tests.support.fake_http import JsonHandler, campaign_config, serving
from tests.support.server import running_collector
from tests.test_sweep5_openapi_conformance import CAMPAIGNS

OUE = create("oue", epsilon=1.0, domain=["a", "b", "c"]).config()
SS = create("ss", epsilon=1.0, domain=["a", "b", "c", "d"]).config()
SPL = create("spl", epsilon=2.0, attributes={"o": ["x", "y"], "age": {"bounds": [0, 10]}}).config()
FIXTURES = Path(__file__).parent / "data"
BUDGET = PrivacyBudget(campaign_epsilon=1e6, device_epsilon=1e6)


def canonical_digest(body: dict[str, Any]) -> str:
    """The digest as docs/HTTP_API.md defines it, written out: a known answer for both."""
    core = {k: body[k] for k in ("id", "mechanism", "window", "horizon_days")}
    blob = json.dumps(core, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


# -- one definition ---------------------------------------------------------------------------


@pytest.mark.parametrize("cid", sorted(CAMPAIGNS))
def test_the_collector_and_the_device_compute_one_digest_for_every_kind(cid: str) -> None:
    campaign = campaign_from_request({"id": cid, "epsilon": 2.0, **CAMPAIGNS[cid]})
    served = json.loads(json.dumps(campaign.resource()))  # as it travels
    assert served["digest"] == campaign.digest == canonical_digest(served)
    assert campaign.digest == campaign_digest(
        cid, campaign.mechanism_config, campaign.window, campaign.horizon_days
    )
    config = CampaignConfig.from_resource(served)
    assert config.digest == campaign.digest
    # What the collector serves is exactly the mechanism's own config: nothing to vary.
    assert json.dumps(served["mechanism"], sort_keys=True) == json.dumps(
        config.mechanism.config(), sort_keys=True
    )


def test_campaigns_stored_by_an_older_collector_keep_their_digests_and_are_used() -> None:
    """The fixtures of main at c1588c3: the digests the devices hold do not change, and the
    devices take those campaigns' resources."""
    expected = json.loads((FIXTURES / "main-c1588c3.expected.json").read_text())
    with sqlite3.connect(FIXTURES / "main-c1588c3.sqlite") as conn:
        records = [json.loads(r) for (r,) in conn.execute("SELECT record FROM campaigns")]
    assert records
    for record in records:
        campaign = Campaign.from_record(record)
        assert campaign.digest == expected["campaigns"][campaign.id]["digest"]
        served = json.loads(json.dumps(campaign.resource()))
        assert CampaignConfig.from_resource(served).digest == campaign.digest


# -- the honest path: a real collector ----------------------------------------------------------


def value_for(spec: dict[str, Any]) -> Any:
    """A true value for a campaign created from ``spec``."""
    if "domain" in spec:
        return spec["domain"][0]
    if "bounds" in spec:
        return 42.0
    if "attributes" in spec:
        return {
            name: labels[0] if isinstance(labels, list) else 40.0
            for name, labels in spec["attributes"].items()
        }
    return "firefox"


def test_a_real_collector_s_campaigns_of_every_kind_are_used_and_counted(
    tmp_path: Path,
) -> None:
    env = {"LDP_SEALED_KEY_FILE": str(tmp_path / "sealed.key"), "LDP_RATE_LIMIT": "0"}
    with running_collector(tmp_path, env=env) as srv:
        for cid, spec in CAMPAIGNS.items():
            body = {"id": cid, "epsilon": 2.0, **spec}
            created = requests.post(
                srv.url + "/v1/campaigns", json=body, headers=srv.headers("admin"), timeout=30
            )
            assert created.status_code == 201, created.text
        direct = [cid for cid in CAMPAIGNS if "shuffler" not in CAMPAIGNS[cid]]
        with TelemetryClient(
            srv.url,
            ingest_token=srv.ingest_token,
            state_dir=tmp_path / "device",
            budget=BUDGET,
            close_timeout=0,
        ) as device:
            # Every campaign is verified (the shuffled one too: its reports would need a
            # running shuffler, so none is made).
            device.prefetch(*CAMPAIGNS)
            for cid in direct:
                report = device.report(cid, value_for(CAMPAIGNS[cid]))
                assert report, report
                assert report.digest == device.configs.get(cid).digest  # type: ignore[union-attr]
            assert device.flush(timeout=60), device.stats()
            assert device.stats()["accepted"] == len(direct)
        listed = requests.get(
            srv.url + "/v1/campaigns", headers=srv.headers("analyst"), timeout=30
        ).json()["campaigns"]
    counts = {c["id"]: c["reports"] for c in listed}
    assert counts == {cid: (1 if cid in direct else 0) for cid in CAMPAIGNS}


# -- hostile collectors ---------------------------------------------------------------------------


class Hostile(JsonHandler):
    """Serves ``resources[campaign]`` as given (404 for others); takes every upload and keeps
    it in ``uploads``, or answers 503 while ``down``."""

    resources: ClassVar[dict[str, dict[str, Any]]] = {}
    uploads: ClassVar[list[tuple[str, dict[str, Any]]]] = []
    down: ClassVar[bool] = False

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        body = type(self).resources.get(self._campaign())
        if body is None:
            error = {"code": "unknown_campaign", "message": "no", "status": 404}
            self._answer(404, {"error": error})
            return
        self._answer(200, body, {"ETag": f'"{body["digest"]}"'})

    def do_POST(self) -> None:  # noqa: N802
        campaign, body = self._upload()
        if type(self).down:
            self._answer(503, {"error": {"code": "down", "message": "down", "status": 503}})
            return
        type(self).uploads.append((campaign, body))
        n = len(body["reports"])
        self._answer(200, {"accepted": n, "duplicate": 0, "rejected": 0, "errors": []})


@pytest.fixture
def hostile() -> Iterator[tuple[str, type[Hostile]]]:
    handler = type("Collector", (Hostile,), {"resources": {}, "uploads": [], "down": False})
    with serving(handler) as url:
        yield url, handler


def device(url: str, state: Path, **options: Any) -> TelemetryClient:
    options = {"close_timeout": 0, "backoff_base": 0.01, "backoff_cap": 0.05, **options}
    return TelemetryClient(url, ingest_token="t" * 20, state_dir=state, **options)


#: What a collector serves to tag one device, and what the refusal says.
TAGGED: dict[str, tuple[dict[str, Any], str]] = {
    # (i) the honest config under a digest of the collector's choosing
    "made_up_digest": (
        campaign_config("q", OUE, digest=secrets.token_hex(32)),
        "is not the config's own",
    ),
    # (ii) a key the mechanism does not use, the digest computed over it
    "junk_key": (
        campaign_config("q", {**OUE, "device": "17"}),
        "'mechanism.device' is no setting of the mechanism",
    ),
    "junk_key_inside_params": (
        campaign_config("q", {**SPL, "params": {**SPL["params"], "tag": 17}}),
        "'mechanism.params.tag' is no setting of the mechanism",
    ),
    # (iv) a key with a default left out: the same mechanism, another digest (accepted at
    # first, as configs of older collectors might lack one: every release serves config())
    "default_key_left_out": (
        campaign_config("q", {**SS, "params": {}}),
        "'mechanism.params.d' is missing where the mechanism built from it has 1",
    ),
    # (iii) 1 for 1.0: the same mechanism, another digest
    "int_for_float": (
        campaign_config("q", {**OUE, "epsilon": 1}),
        "'mechanism.epsilon' is 1 where the mechanism built from it has 1.0",
    ),
    "ints_for_floats_inside_attributes": (
        campaign_config("q", {**SPL, "attributes": {"o": ["x", "y"], "age": {"bounds": [0, 10]}}}),
        "'mechanism.attributes.age.bounds' is [0, 10] where the mechanism built from it has "
        "[0.0, 10.0]",
    ),
}


def assert_refused(client: TelemetryClient, handler: type[Hostile], why: str) -> None:
    """``report`` stores and charges nothing and says why; nothing is uploaded."""
    refused = client.report("q", "a")
    assert not refused and refused.reason == "not_ready"  # type: ignore[union-attr]
    message = refused.message  # type: ignore[union-attr]
    assert "cannot use" in message and why in message, message
    assert client.stats()["pending"] == 0
    assert client.pending_reports() == [] and client.privacy_charges() == []
    assert client.flush(timeout=10)
    assert handler.uploads == []


@pytest.mark.parametrize("name", sorted(TAGGED))
def test_a_config_that_could_tag_the_device_is_refused(
    hostile: tuple[str, type[Hostile]], tmp_path: Path, name: str
) -> None:
    url, handler = hostile
    body, why = TAGGED[name]
    handler.resources = {"q": body}
    with device(url, tmp_path) as client:
        with pytest.raises(InvalidParameter, match="campaign 'q': unusable config") as caught:
            client.prefetch("q")
        assert why in str(caught.value)
        assert_refused(client, handler, why)


def test_a_digest_the_app_did_not_pin_is_refused(
    hostile: tuple[str, type[Hostile]], tmp_path: Path
) -> None:
    """The collector serves an honest config (its own digest), another than the one the app
    pinned (epsilon 2 for 1): refused, so the config cannot vary per device at all."""
    url, handler = hostile
    handler.resources = {"q": campaign_config("q", {**OUE, "epsilon": 2.0})}
    pinned = campaign_config("q", OUE)["digest"]
    with device(url, tmp_path, pins={"q": pinned}) as client:
        with pytest.raises(InvalidParameter, match="not pinned by the app"):
            client.prefetch("q")
        assert_refused(client, handler, "not pinned by the app")


@pytest.mark.parametrize("form", ["one", "several"])
def test_a_digest_the_app_pinned_is_taken(
    hostile: tuple[str, type[Hostile]], tmp_path: Path, form: str
) -> None:
    url, handler = hostile
    served = campaign_config("q", OUE)
    handler.resources = {"q": served}
    other = campaign_config("q", {**OUE, "epsilon": 2.0})["digest"]
    pins = {"q": served["digest"]} if form == "one" else {"q": [other, served["digest"]]}
    pins["elsewhere"] = other  # a campaign the collector does not have: fine
    with device(url, tmp_path, pins=pins) as client:
        client.prefetch("q")
        assert client.report("q", "a")
        assert client.flush(timeout=30)
    assert [body["digest"] for _, body in handler.uploads] == [served["digest"]]


@pytest.mark.parametrize(
    ("pins", "why"),
    [
        ({"q": "F" * 64}, "pins for campaign 'q'"),
        ({"q": "f" * 63}, "pins for campaign 'q'"),
        ({"q": ["f" * 64, 7]}, "pins for campaign 'q'"),
        ({"q": []}, "pins for campaign 'q' name no digest"),
        ({"q": b"f" * 64}, "pins for campaign 'q'"),
        ({"Not a slug": "f" * 64}, "pins: campaign id must be a slug"),
        (["q"], "pins must be a mapping"),
    ],
)
def test_pins_that_are_no_digests_are_refused_at_construction(
    tmp_path: Path, pins: Any, why: str
) -> None:
    with pytest.raises(InvalidParameter, match=why):
        TelemetryClient("http://127.0.0.1:9", ingest_token="t", state_dir=tmp_path, pins=pins)


def test_a_revalidation_that_brings_a_tag_keeps_the_verified_config(
    hostile: tuple[str, type[Hostile]], tmp_path: Path
) -> None:
    """The device holds a verified config; a later answer (the background revalidation, or a
    refetch after a 409) brings the same config under a digest of the collector's: refused,
    and reports go on under the verified digest."""
    url, handler = hostile
    honest = campaign_config("q", OUE)
    handler.resources = {"q": honest}
    with device(url, tmp_path, reports_per_window=None) as client:
        client.prefetch("q")
        handler.resources = {"q": {**honest, "digest": secrets.token_hex(32)}}
        with pytest.raises(InvalidParameter, match="is not the config's own"):
            client.configs.refresh("q", conditional=False)
        report = client.report("q", "a")
        assert report and report.digest == honest["digest"]  # type: ignore[union-attr]
        assert client.flush(timeout=30)
    assert [body["digest"] for _, body in handler.uploads] == [honest["digest"]]


def test_a_cached_config_with_a_tag_is_refused_and_its_stored_reports_are_kept(
    hostile: tuple[str, type[Hostile]], tmp_path: Path
) -> None:
    """An SDK from before the check cached a tagged config and stored a report under its
    digest. The new SDK refuses the cached config (``report`` stores nothing more and says
    why), and the report already stored is not lost: it is uploaded as it was made."""
    url, handler = hostile
    tag = secrets.token_hex(32)
    tagged = campaign_config("q", OUE, digest=tag)
    # What the older SDK left: made here with the honest config (the collector takes no
    # upload meanwhile), then given the tag.
    handler.resources = {"q": campaign_config("q", OUE)}
    handler.down = True
    state = tmp_path / "old"
    with device(url, state, flush_interval=float("inf")) as client:
        client.prefetch("q")
        assert client.report("q", "a")
    handler.down = False
    cache = state / "campaigns" / "q.json"
    cache.write_text(json.dumps({"etag": f'"{tag}"', "body": tagged}))
    with sqlite3.connect(state / "ldp-client.sqlite3") as conn:
        assert conn.execute("UPDATE outbox SET digest = ?", (tag,)).rowcount == 1
    handler.resources = {"q": tagged}
    with device(url, state, flush_interval=float("inf")) as client:
        assert client.stats()["pending"] == 1
        refused = client.report("q", "b")
        assert not refused and refused.reason == "not_ready"  # type: ignore[union-attr]
        assert "is not the config's own" in refused.message  # type: ignore[union-attr]
        assert len(client.privacy_charges("q")) == 1  # the old report's charge alone
        assert client.flush(timeout=30), client.stats()
        assert client.stats()["pending"] == 0
    assert [body["digest"] for _, body in handler.uploads] == [tag]


def test_a_refused_cached_config_is_read_and_logged_once_until_it_changes(
    hostile: tuple[str, type[Hostile]], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Found by the digest sweep: while a refused config sat in ``state_dir/campaigns/``,
    every ``report`` read, parsed and verified it again and logged a warning (one per report
    at the app's reporting rate). It is now read once until the file changes; every report
    still says why nothing was stored."""
    url, handler = hostile
    good = campaign_config("q", OUE)
    tagged = campaign_config("q", OUE, digest=secrets.token_hex(32))
    state = tmp_path / "device"
    handler.resources = {"q": good}
    with device(url, state, flush_interval=float("inf")) as client:
        client.prefetch("q")
    cache = state / "campaigns" / "q.json"
    cache.write_text(json.dumps({"etag": f'"{tagged["digest"]}"', "body": tagged}))
    handler.resources = {"q": tagged}  # refetched and refused too: the file stays as it is
    with device(url, state, flush_interval=float("inf")) as client:
        caplog.set_level("WARNING", logger="client_sdk")
        answers = [client.report("q", "a") for _ in range(5)]
        assert not any(answers)
        assert all("is not the config's own" in a.message for a in answers)  # type: ignore[union-attr]
        warned = [r for r in caplog.records if "cached config of q is unusable" in r.message]
        assert len(warned) == 1, [r.message for r in warned]
        cache.write_text(json.dumps({"etag": f'"{good["digest"]}"', "body": good}))
        assert client.report("q", "a")  # the file changed: read again, and taken

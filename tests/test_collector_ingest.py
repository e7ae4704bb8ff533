"""Property tests of the ingest parser: garbage is rejected report by report, never a 5xx,
and the counts always add up to the batch."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from flask import Flask
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from collector import create_app
from collector.errors import APIError
from collector.ingest import gunzip_capped
from tests.support.reports import batch, campaign_body, reports, today
from tests.support.server import TOKENS

INGEST = {"Authorization": f"Bearer {TOKENS['ingest_token']}"}
_ids = itertools.count()

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=10,
)
report_like = st.fixed_dictionaries(
    {
        "id": st.one_of(st.text(max_size=70), st.just("x" * 20), st.integers()),
        "day": st.one_of(st.just(today()), st.text(max_size=12), st.dates().map(str)),
        "payload": json_values,
    }
)


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Flask]:
    app = create_app({"database": str(tmp_path_factory.mktemp("prop") / "p.db"), **TOKENS})
    yield app
    app.extensions["ldp_storage"].close()


@pytest.mark.parametrize("mechanism", ["oue", "grr", "olh", "ss"])
def test_garbage_reports_never_break_the_batch(app: Flask, mechanism: str) -> None:
    client = app.test_client()
    cid = f"prop-{mechanism}"
    r = client.post(
        "/v1/campaigns",
        json=campaign_body(cid, mechanism),
        headers={"Authorization": f"Bearer {TOKENS['admin_token']}"},
    )
    campaign = r.json
    valid = reports(campaign, 5)

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(st.one_of(report_like, json_values), max_size=8))
    def check(garbage: list) -> None:
        for item in valid:
            item["id"] = f"valid-{next(_ids):016d}"
        items = valid + garbage
        answer = client.post(
            f"/v1/campaigns/{cid}/reports", json=batch(campaign, items), headers=INGEST
        )
        assert answer.status_code == 200, answer.json
        body = answer.json
        assert body["accepted"] + body["duplicate"] + body["rejected"] == len(items)
        assert body["accepted"] >= 5  # the valid ones always go in
        assert [e["index"] for e in body["errors"]] == sorted(e["index"] for e in body["errors"])

    check()


@given(st.binary(max_size=200))
def test_gunzip_rejects_garbage_with_400_or_413(data: bytes) -> None:
    try:
        out = gunzip_capped(data, 1000)
    except APIError as exc:
        assert exc.status in (400, 413)
    else:
        assert len(out) <= 1000


def test_gunzip_cap_holds_for_a_bomb() -> None:
    import gzip

    with pytest.raises(APIError) as info:
        gunzip_capped(gzip.compress(b"\0" * 10_000_000), 4096)
    assert info.value.status == 413

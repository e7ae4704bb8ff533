"""``POST /v1/sealed`` with messages for an archived campaign among others, on both backends.

Found by an exploratory QA run: the storage's ``CampaignArchived`` escaped the view, so the
whole request answered 410 (its message naming the campaign from inside a sealed message)
after earlier groups had been committed; the later groups were never stored and the shuffler
resent the batch for ever. Now the archived campaign's messages are refused one by one, by
index and error code, and every other message is stored.

Real parts: ``ldp serve`` on a free loopback port with ``LDP_SEALED_KEY_FILE``, a real SQLite
file or a fresh PostgreSQL database, messages sealed with libsodium to the served key.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.postgres import BACKENDS, collector_database
from tests.support.reports import campaign_body, reports
from tests.support.server import CollectorProcess, running_collector

SHUFFLER = "http://127.0.0.1:9/"


def sealed(public_key: str, campaign: dict[str, Any], report: dict[str, Any]) -> str:
    """One report sealed to the collector's key, as client_sdk seals it (docs/SHUFFLE.md)."""
    from nacl.public import PublicKey, SealedBox

    plain = {"campaign": campaign["id"], "digest": campaign["digest"], "report": report}
    box = SealedBox(PublicKey(base64.b64decode(public_key)))
    return base64.b64encode(box.encrypt(json.dumps(plain).encode())).decode()


def create(srv: CollectorProcess, cid: str) -> dict[str, Any]:
    r = srv.post_campaign(campaign_body(cid, shuffler=SHUFFLER))
    assert r.status_code == 201, r.text
    answer: dict[str, Any] = r.json()
    return answer


def post_sealed(srv: CollectorProcess, messages: list[str]) -> requests.Response:
    return requests.post(
        srv.url + "/v1/sealed",
        json={"messages": messages},
        headers=srv.headers("ingest"),
        timeout=60,
    )


def n_of(srv: CollectorProcess, cid: str) -> int:
    r = requests.get(
        f"{srv.url}/v1/campaigns/{cid}/estimates", headers=srv.headers("analyst"), timeout=60
    )
    assert r.status_code == 200, r.text
    return int(r.json()["n"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_archived_campaign_refuses_only_its_own_messages(backend: str, tmp_path: Path) -> None:
    env = {"LDP_SEALED_KEY_FILE": str(tmp_path / "sealed.key")}
    with (
        collector_database(backend, tmp_path) as db,
        running_collector(tmp_path, env=env, db_url=db) as srv,
    ):
        key = requests.get(srv.url + "/v1/sealed/key", timeout=30).json()["public_key"]
        occ, arch, occs = (create(srv, cid) for cid in ("occ", "arch1", "occs"))
        # Each campaign gets two reports first; then arch1 is archived.
        first = [sealed(key, c, r) for c in (occ, arch, occs) for r in reports(c, 2, seed=1)]
        r = post_sealed(srv, first)
        assert r.status_code == 200, r.text
        assert (r.json()["accepted"], r.json()["rejected"]) == (6, 0)
        archived = requests.post(
            f"{srv.url}/v1/campaigns/arch1/archive", headers=srv.headers("admin"), timeout=30
        )
        assert archived.status_code == 200, archived.text

        # The QA run's batch: occ, then the archived campaign, then occs (groups are handled
        # in order of first appearance, so occ's group is stored before arch1's is refused).
        messages = [
            sealed(key, occ, reports(occ, 1, seed=2)[0]),
            sealed(key, arch, reports(arch, 1, seed=3)[0]),
            sealed(key, occs, reports(occs, 1, seed=4)[0]),
            sealed(key, arch, reports(arch, 1, seed=5)[0]),
        ]
        r = post_sealed(srv, messages)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body == {
            "accepted": 2,
            "duplicate": 0,
            "rejected": 2,
            "errors": [
                {"index": 1, "reason": "message #1: refused for its campaign (campaign_archived)"},
                {"index": 3, "reason": "message #3: refused for its campaign (campaign_archived)"},
            ],
        }
        assert "arch1" not in r.text  # nothing from inside a message reaches the shuffler
        assert (n_of(srv, "occ"), n_of(srv, "arch1"), n_of(srv, "occs")) == (3, 2, 3)

        # The shuffler's resend after a lost answer: duplicates, the same refusals, nothing new.
        again = post_sealed(srv, messages)
        assert again.status_code == 200, again.text
        assert (again.json()["accepted"], again.json()["duplicate"]) == (0, 2)
        assert again.json()["errors"] == body["errors"]
        assert (n_of(srv, "occ"), n_of(srv, "arch1"), n_of(srv, "occs")) == (3, 2, 3)
        for cid in ("occ", "arch1", "occs"):
            srv.verify_tallies(cid)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_batch_only_for_an_archived_campaign_is_answered_not_refused(
    backend: str, tmp_path: Path
) -> None:
    """A batch all for an archived campaign is a 200 with every message refused: the
    shuffler forgets it (a 410 kept it staged and resent for ever)."""
    env = {"LDP_SEALED_KEY_FILE": str(tmp_path / "sealed.key")}
    with (
        collector_database(backend, tmp_path) as db,
        running_collector(tmp_path, env=env, db_url=db) as srv,
    ):
        key = requests.get(srv.url + "/v1/sealed/key", timeout=30).json()["public_key"]
        arch = create(srv, "gone")
        archived = requests.post(
            f"{srv.url}/v1/campaigns/gone/archive", headers=srv.headers("admin"), timeout=30
        )
        assert archived.status_code == 200, archived.text
        r = post_sealed(srv, [sealed(key, arch, x) for x in reports(arch, 3, seed=6)])
        assert r.status_code == 200, r.text
        assert (r.json()["accepted"], r.json()["rejected"]) == (0, 3)
        assert [e["index"] for e in r.json()["errors"]] == [0, 1, 2]
        assert "gone" not in r.text

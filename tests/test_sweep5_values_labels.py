"""Labels an admin gives at creation are refused where they would mislead (fifth sweep, values).

* Two labels (or attribute names) that are one text in two Unicode forms, NFC and NFD of
  "café", were accepted: two rows that look alike, each counting the devices whose app sends
  that form. Refused now, naming both.
* A categorical pair's joint labels are ``"x|y"``: with ``"a|b"`` and ``"c"`` against ``"a"``
  and ``"b|c"`` two joint labels were one, and the admin read "domain labels must be distinct;
  'a|b|c' appears more than once"; two long labels got "domain label #6 is 202 characters",
  a label nobody wrote. Both are refused naming the pair.

A real ``ldp serve`` answers each ``POST /v1/campaigns``; what it refuses is not created.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests

from tests.support.server import CollectorProcess, running_collector

NFC = "caf\u00e9"
NFD = "cafe\u0301"


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CollectorProcess]:
    with running_collector(tmp_path_factory.mktemp("labels")) as server:
        yield server


def _refused(srv: CollectorProcess, body: dict[str, Any]) -> str:
    r = srv.post_campaign(body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["code"] == "invalid_campaign", err
    gone = requests.get(
        srv.url + f"/v1/campaigns/{body['id']}", headers=srv.headers("admin"), timeout=30
    )
    assert gone.status_code == 404, gone.text
    return str(err["message"])


def test_a_domain_with_one_label_in_two_unicode_forms_is_refused(srv: CollectorProcess) -> None:
    message = _refused(srv, {"id": "nfc-domain", "epsilon": 1.0, "domain": [NFC, NFD, "tea"]})
    assert repr(NFC) in message and repr(NFD) in message and "NFC" in message, message


def test_an_attribute_with_one_label_in_two_forms_is_refused(srv: CollectorProcess) -> None:
    body = {"id": "nfc-attr", "epsilon": 1.0, "attributes": {"drink": [NFC, NFD], "n": ["x", "y"]}}
    message = _refused(srv, body)
    assert "'drink'" in message and "NFC" in message, message


def test_two_attribute_names_in_two_forms_are_refused(srv: CollectorProcess) -> None:
    body = {"id": "nfc-names", "epsilon": 1.0, "attributes": {NFC: ["x", "y"], NFD: ["x", "y"]}}
    message = _refused(srv, body)
    assert "names" in message and "NFC" in message, message


def test_a_bar_in_a_paired_label_is_refused_naming_the_pair(srv: CollectorProcess) -> None:
    body = {
        "id": "bar-pair",
        "epsilon": 1.0,
        "attributes": {"p": ["a|b", "a"], "q": ["c", "b|c"]},
        "pairs": [["p", "q"]],
    }
    message = _refused(srv, body)
    assert "pair ['p', 'q']" in message and "'a|b'" in message and "'|'" in message, message


def test_a_joint_label_over_the_limit_is_refused_naming_the_pair(srv: CollectorProcess) -> None:
    body = {
        "id": "long-pair",
        "epsilon": 1.0,
        "attributes": {"p": ["x" * 120, "y"], "q": ["z" * 81, "w"]},
        "pairs": [["p", "q"]],
    }
    message = _refused(srv, body)
    assert "pair ['p', 'q']" in message and "202 characters" in message, message


def test_labels_that_only_look_related_are_still_accepted(srv: CollectorProcess) -> None:
    # Case, spaces and a '|' outside any pair are other strings: nothing to refuse.
    body = {"id": "fine", "epsilon": 1.0, "domain": [NFC, "Caf\u00e9", " caf\u00e9", "a|b"]}
    assert srv.post_campaign(body).status_code == 201
    multi = {
        "id": "fine-multi",
        "epsilon": 1.0,
        "attributes": {"p": ["x" * 100, "y"], "q": ["z" * 99, "w"], "r": ["a|b", "c"]},
        "pairs": [["p", "q"]],
    }
    r = srv.post_campaign(multi)
    assert r.status_code == 201, r.text

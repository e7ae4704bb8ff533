"""Red team, sweep 8: a candidate string no device could report is refused before the estimate.

``GET /v1/campaigns/{id}/estimates?candidate=...`` on an open-domain campaign checked each
candidate (NUL, longer than ``max_length`` bytes) only inside the estimate, after the tallies
were read and the heavy hitters discovered: on a pem campaign of 31 windows the 400 came after
5.5 to 6 s of work (a valid ``top=200`` query took 26.8 s), and on a young campaign the answer
was 422 ``not_enough_reports``, which tells the caller to retry the same query later. Now
:func:`collector.answers.campaign_answer` checks them first: 400 at once, whatever the data.
"""

from __future__ import annotations

from pathlib import Path

import requests

from tests.support.server import running_collector


def test_an_impossible_candidate_is_a_400_even_before_any_report(tmp_path: Path) -> None:
    with running_collector(tmp_path) as srv:
        r = srv.post_campaign({"id": "words", "max_length": 8, "epsilon": 4})
        assert r.status_code == 201, r.text
        url = srv.url + "/v1/campaigns/words/estimates"
        for candidate, why in (("a\x00b", "NUL"), ("x" * 9, "8")):
            r = requests.get(
                url, params={"candidate": candidate}, headers=srv.headers("analyst"), timeout=60
            )
            assert r.status_code == 400, r.text
            error = r.json()["error"]
            assert error["code"] == "invalid_parameter" and why in error["message"]
        # A string a device could send is still answered as before: not enough reports yet.
        r = requests.get(
            url, params={"candidate": "x" * 8}, headers=srv.headers("analyst"), timeout=60
        )
        assert r.status_code == 422 and r.json()["error"]["code"] == "not_enough_reports"

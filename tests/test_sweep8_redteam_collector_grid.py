"""Red team, sweep 8: a square_wave campaign whose grid the collector cannot estimate is refused.

The mechanism accepts grids up to 2**24 steps. On a real ``ldp serve`` a campaign created with
``"params": {"grid": 16777216}`` answered 201; then its empty estimate took 15 s to say 422,
an upload of 2,000 reports 26 s (a tally of 25 million counts per window, computed under the
write lock) and its estimate gave no answer after 5 minutes while the worker grew to 1.5 GB.
The estimate's cost grows about with the square of the grid (2 s at the default 512, 7 to 21 s
at 2048, 33 s at 4096 on the shared 2-core machine), so ``POST /v1/campaigns`` now refuses a
grid above ``MAX_SQUARE_WAVE_GRID`` with a 400 that says what to do, and stores nothing.
"""

from __future__ import annotations

from pathlib import Path

import requests

from collector.campaigns import MAX_SQUARE_WAVE_GRID
from tests.support.server import running_collector


def test_a_square_wave_grid_beyond_what_is_estimated_is_refused(tmp_path: Path) -> None:
    with running_collector(tmp_path) as srv:
        for grid in (MAX_SQUARE_WAVE_GRID + 1, 1 << 24):
            r = srv.post_campaign(
                {
                    "id": f"wide{grid}",
                    "bounds": [0, 1],
                    "epsilon": 1,
                    "mechanism": "square_wave",
                    "params": {"grid": grid},
                }
            )
            assert r.status_code == 400, r.text
            error = r.json()["error"]
            assert error["code"] == "invalid_campaign"
            assert f"{grid:,}" in error["message"] and "'grid'" in error["message"]
        listed = requests.get(
            srv.url + "/v1/campaigns", headers=srv.headers("analyst"), timeout=30
        ).json()
        assert listed["campaigns"] == []  # nothing stored

        # The largest grid taken is estimated like any other.
        r = srv.post_campaign(
            {
                "id": "fine",
                "bounds": [0, 1],
                "epsilon": 1,
                "mechanism": "square_wave",
                "params": {"grid": MAX_SQUARE_WAVE_GRID},
            }
        )
        assert r.status_code == 201, r.text
        campaign = r.json()
        assert campaign["mechanism"]["params"]["grid"] == MAX_SQUARE_WAVE_GRID
        srv.upload(campaign, list(range(0, 200, 7)))
        answer = srv.estimates("fine")
        assert answer["n"] == len(range(0, 200, 7))

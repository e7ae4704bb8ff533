"""``--url`` commands put a campaign id in the request path: an id no campaign can have is
refused before any request, never resolved into another campaign's path.

Found by the fifth CLI sweep: ``ldp campaign archive 'shop/archive?' --url ...`` archived
campaign ``shop`` (the ``?`` cut the path after ``/v1/campaigns/shop/archive``), and ``ldp
campaign archive ../campaigns/shop --url ...`` did too (the HTTP client resolves ``..``), where
``--db`` answered "no campaign". Archiving cannot be undone. ``ldp estimate ../campaigns/shop
--url`` likewise answered with shop's estimates. Now: "no campaign '...': campaign ids match
...", exit status 1, and the campaign is untouched.

Real parts: ``ldp serve`` as a subprocess on a SQLite file, the ``ldp`` CLI as subprocesses.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.server import ADMIN_TOKEN, ANALYST_TOKEN, running_collector

TYPED_IDS = ["shop/archive?", "../campaigns/shop", "shop/archive#", "shop?x=1"]


def ldp(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("LDP_")}
    return subprocess.run(
        [sys.executable, "-m", "ldp_cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**base, **env},
    )


def test_archive_and_estimate_refuse_an_id_that_is_not_one(tmp_path: Path) -> None:
    with running_collector(tmp_path) as srv:
        out = ldp(
            "campaign", "create", "shop", "--url", srv.url, "--domain", "a,b,c", "-e", "1",
            LDP_ADMIN_TOKEN=ADMIN_TOKEN,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        for typed in TYPED_IDS:
            out = ldp("campaign", "archive", typed, "--url", srv.url, LDP_ADMIN_TOKEN=ADMIN_TOKEN)
            assert out.returncode == 1, (typed, out.stdout, out.stderr)
            assert out.stdout == ""
            assert out.stderr.startswith(f"Error: no campaign {typed!r}"), out.stderr
            assert "Traceback" not in out.stderr
            out = ldp("estimate", typed, "--url", srv.url, LDP_ANALYST_TOKEN=ANALYST_TOKEN)
            assert out.returncode == 1, (typed, out.stdout, out.stderr)
            assert out.stderr.startswith(f"Error: no campaign {typed!r}"), out.stderr
            # --db never resolved paths: it says the same.
            out = ldp("campaign", "archive", typed, "--db", str(srv.db_path))
            assert out.returncode == 1
            assert out.stderr.startswith(f"Error: no campaign {typed!r}"), out.stderr
        # Nothing was archived: shop still takes reports.
        out = ldp(
            "campaign", "show", "shop", "--url", srv.url, "--format", "json",
            LDP_ANALYST_TOKEN=ANALYST_TOKEN,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["archived"] is None
        # A real id still works, through the same path.
        out = ldp("campaign", "archive", "shop", "--url", srv.url, LDP_ADMIN_TOKEN=ADMIN_TOKEN)
        assert out.returncode == 0, out.stderr
        assert "campaign 'shop' archived on" in out.stdout

"""A report leaves the device only once its charge would survive a power cut.

With ``durability="normal"`` (the default) a commit is in the WAL, which SQLite syncs only when
a checkpoint starts, and the upload thread checkpointed after its pass: a power cut after an
upload could roll back the charge of a report the collector already had, and the device would
spend that window's allowance again (a red-team finding). Now the WAL is synced before each
batch leaves (``StateDB.make_durable``).

A power cut cannot be caused here, so the test looks at what one would leave: when the
collector receives the upload, the charge must already be in the main database file, which a
checkpoint writes only after syncing the WAL. The main file is copied alone (no ``-wal``) and
read: what is in it survives losing the WAL.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any, ClassVar

from client_sdk import PrivacyBudget, TelemetryClient
from client_sdk.mechanisms import create
from client_sdk.state import STATE_FILE
from tests.support.fake_http import JsonHandler, campaign_config, serving

GRR = create("grr", epsilon=1.0, domain=["a", "b"]).config()


class Collector(JsonHandler):
    """Serves campaign ``q``; on each upload, reads what the device's main database file holds
    without its WAL."""

    state: ClassVar[Path]
    charged_on_disk: ClassVar[list[int]] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        self._answer(200, campaign_config("q", GRR))

    def do_POST(self) -> None:  # noqa: N802
        _, body = self._upload()
        with tempfile.TemporaryDirectory() as tmp:
            alone = Path(tmp) / "main-file-only.sqlite3"
            shutil.copyfile(self.state / STATE_FILE, alone)
            conn = sqlite3.connect(alone)
            try:
                tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
                charged = (
                    conn.execute("SELECT coalesce(sum(reports), 0) FROM charges").fetchone()[0]
                    if "charges" in tables
                    else 0
                )
            finally:
                conn.close()
        type(self).charged_on_disk.append(int(charged))
        n = len(body["reports"])
        self._answer(200, {"accepted": n, "duplicate": 0, "rejected": 0, "errors": []})


def test_a_reports_charge_is_on_disk_for_good_before_the_report_leaves(tmp_path: Path) -> None:
    handler: Any = type("C", (Collector,), {"state": tmp_path, "charged_on_disk": []})
    with serving(handler) as url:
        with TelemetryClient(
            url,
            ingest_token="t" * 20,
            state_dir=tmp_path,
            budget=PrivacyBudget.unlimited(),
            reports_per_window=None,
            flush_interval=float("inf"),
            close_timeout=0,
        ) as device:
            device.prefetch("q")
            for round_ in range(3):
                for _ in range(2):
                    assert device.report("q", "a")
                assert device.flush(timeout=30)
                # Every report sent so far is charged in the main file itself.
                assert handler.charged_on_disk[-1] == 2 * (round_ + 1), handler.charged_on_disk

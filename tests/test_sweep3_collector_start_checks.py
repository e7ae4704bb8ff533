"""``ldp serve`` checks at start what its workers use (docs sweep, 2026-11-27): the workers
read their settings again and made the metrics directory and the sealed key, so a bad value
killed the server *after* it printed its listening line, and an environment value a flag
overrides (``LDP_PORT`` with ``-p``) was refused there although the flag wins."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from tests.support.server import running_collector

LDP = str(Path(sys.executable).with_name("ldp"))


@pytest.mark.parametrize(("variable", "value"), [("LDP_PORT", "99999"), ("LDP_WORKERS", "abc")])
def test_a_flag_wins_over_a_bad_environment_value_in_the_workers_too(
    tmp_path: Path, variable: str, value: str
) -> None:
    # running_collector passes -p and -w; the bad environment value is what the flag overrides.
    with running_collector(tmp_path, env={variable: value}) as srv:
        assert requests.get(f"{srv.url}/healthz", timeout=30).status_code == 200
        assert srv.process.poll() is None


def _bad_metrics_dir(tmp_path: Path) -> tuple[str, str]:
    (tmp_path / "a-file").write_text("x")
    return "LDP_METRICS_DIR", str(tmp_path / "a-file")


def _bad_sealed_key(tmp_path: Path) -> tuple[str, str]:
    return "LDP_SEALED_KEY_FILE", str(tmp_path / "no-such-dir" / "sealed.key")


@pytest.mark.parametrize("bad", [_bad_metrics_dir, _bad_sealed_key])
def test_what_the_workers_make_is_refused_before_listening(tmp_path: Path, bad: object) -> None:
    variable, value = bad(tmp_path)  # type: ignore[operator]
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDP_")}
    done = subprocess.run(
        [LDP, "serve", "--dev", "-p", "0", "-w", "1", "--database", str(tmp_path / "ldp.db")],
        capture_output=True,
        text=True,
        env={**env, variable: value},
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "listening on" not in done.stdout
    assert done.stderr.strip().splitlines()[-1].startswith(f"Error: {variable} "), done.stderr

"""A real shuffler front door in this process, for tests of what devices send it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from shuffler.app import create_app
from shuffler.server import ShufflerServer
from shuffler.staging import Staging

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def front_door(path: Path) -> Iterator[tuple[str, Staging]]:
    """A real shuffler on a free loopback port that stages into ``path`` and forwards nothing:
    its URL and its staging file (which a test reads to see what was staged, and how often)."""
    staging = Staging(path)
    server = ShufflerServer("127.0.0.1", 0, create_app(staging))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.port}", staging
    finally:
        server.shutdown()
        server.server_close()
        staging.close()


LISTENING = "ldp shuffle: listening on "
INGEST_TOKEN = "ingest-token-for-tests-0123456789"


@contextmanager
def ldp_shuffle(
    tmp_path: Path, args: Sequence[str] = (), *, open_files: int | None = None
) -> Iterator[tuple[str, subprocess.Popen[bytes], Path]]:
    """A real ``ldp shuffle`` process on a free loopback port (batch of 1000, a collector
    nobody listens on: nothing is forwarded), ``args`` added; with ``open_files``, under that
    ``ulimit -n``. Its URL, process and stderr file."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDP_")}
    env["LDP_INGEST_TOKEN"] = INGEST_TOKEN
    stderr = tmp_path / "shuffle.stderr"
    cmd = [
        sys.executable, "-m", "ldp_cli", "shuffle",
        "--collector", "http://127.0.0.1:9",
        "--database", str(tmp_path / "shuffle.db"),
        "-b", "1000", "-p", "0", "--log-level", "warning",
        *args,
    ]  # fmt: skip
    if open_files is not None:
        cmd = ["bash", "-c", f'ulimit -n {open_files} && exec "$@"', "shuffle", *cmd]
    with open(stderr, "w") as err:
        proc = subprocess.Popen(cmd, stderr=err, env=env, cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        url = ""
        while not url:
            assert proc.poll() is None, stderr.read_text()
            assert time.monotonic() < deadline, stderr.read_text()
            for line in stderr.read_text().splitlines():
                if line.startswith(LISTENING):
                    url = line[len(LISTENING) :].strip()
            time.sleep(0.05)
        yield url, proc, stderr
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)

"""Output that cannot be written (a full disk, a quota) is a one-line error, exit status 1.

Found by the fifth CLI sweep: ``ldp campaign list --db ldp.db > /dev/full`` (any command
whose standard output is a file on a full disk) ended in a Python traceback ending
``OSError: [Errno 28] No space left on device``. Now: "Error: cannot write the output: No space
left on device" on stderr, exit status 1, and no "Exception ignored" when the interpreter exits
with the unwritten output still buffered. A broken pipe (``| head``) keeps click's quiet exit.

Real parts: the ``ldp`` CLI as subprocesses with stdout on Linux's ``/dev/full``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

FULL = Path("/dev/full")

COMMANDS = [
    ["mechanisms", "-e", "1", "--k", "14"],
    ["mechanisms", "-e", "1", "--k", "14", "--format", "json"],
    ["audit", "oue", "-e", "1", "--samples", "200", "--seed", "1", "--path", "vectorised"],
    ["campaign", "--help"],
    ["--version"],
]


@pytest.mark.skipif(not FULL.exists(), reason="needs /dev/full (Linux)")
@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: "-".join(a[:1] + a[-1:]).lstrip("-"))
def test_a_full_disk_is_one_line(args: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDP_")}
    with FULL.open("w") as full:
        out = subprocess.run(
            [sys.executable, "-m", "ldp_cli", *args],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            env=env,
        )
    assert out.returncode == 1, out.stderr
    errors = [line for line in out.stderr.splitlines() if line.startswith("Error")]
    assert errors == ["Error: cannot write the output: No space left on device"], out.stderr
    assert "Traceback" not in out.stderr
    assert "Exception ignored" not in out.stderr


def test_a_store_command_too(tmp_path: Path) -> None:
    """The same for a command that read a store: nothing else is said about the database."""
    if not FULL.exists():
        pytest.skip("needs /dev/full (Linux)")
    from collector.storage import open_storage

    db = tmp_path / "ldp.db"
    store = open_storage(str(db))
    store.migrate()
    store.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDP_")}
    with FULL.open("w") as full:
        out = subprocess.run(
            [sys.executable, "-m", "ldp_cli", "mix", "--db", str(db)],
            stdout=full,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            env=env,
        )
    assert out.returncode == 1
    assert out.stderr == "Error: cannot write the output: No space left on device\n"

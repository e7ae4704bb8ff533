"""What a new user met around ``ldp shuffle`` and a few CLI help and output texts (2026-11-28).

* The shuffler answered the errors its HTTP server raises itself, below the Flask app, as the
  standard library's HTML pages: ``GARBAGE`` (taken for HTTP/0.9) got a page without even a
  status line, a 70,000-byte request line a text/html 414, 150 header fields a text/html 431,
  ``HTTP/9.9`` an HTML 505. The collector answers the same in its JSON error envelope.
* ``--max-connections`` at or above the process's open-file limit was silent: with
  ``ulimit -n 128`` and the default 256, 200 idle connections made ``GET /healthz`` wait until
  ``--client-timeout`` freed descriptors. A WARNING at start now names both numbers.
* ``ldp mix --help`` said "(one transaction)" (SQLite mixes in slices, PostgreSQL in steps) and
  showed rST double backticks; ``ldp mechanisms --help`` had an empty "Example:" heading.
* ``ldp estimate --level 0.9999999`` printed "100% intervals".
* ``LDP_SHUFFLE_MAX_CONNECTIONS=abc ldp shuffle`` and a missing ``LDP_INGEST_TOKEN`` gave
  errors naming only the option, although nothing was on the command line; ``ldp serve`` names
  the environment variable.

Real processes: ``ldp shuffle`` and ``ldp serve`` on free loopback ports, raw sockets.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from ldp_cli.main import cli

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "ingest-token-for-tests-0123456789"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDP_")}
    return env | extra


@contextmanager
def shuffler(
    tmp_path: Path, args: Sequence[str] = (), *, open_files: int | None = None
) -> Iterator[tuple[tuple[str, int], Path]]:
    """A real ``ldp shuffle`` (:func:`tests.support.shuffler.ldp_shuffle`): its address and
    its stderr file."""
    pytest.importorskip("nacl")
    from tests.support.shuffler import ldp_shuffle

    with ldp_shuffle(tmp_path, args, open_files=open_files) as (url, _, stderr):
        host, port = url.removeprefix("http://").split(":")
        yield (host, int(port)), stderr


def _raw(address: tuple[str, int], data: bytes) -> bytes:
    """Send ``data``, read the answer until the server closes."""
    with socket.create_connection(address, timeout=15) as s:
        s.sendall(data)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
    return out


# -- 1. errors below the Flask app: the JSON envelope -------------------------------------------

SERVER_ERRORS = {
    "garbage": (b"GARBAGE\r\n\r\n", 400, "bad_request"),
    "http-0.9": (b"GET /healthz\r\n\r\n", 400, "bad_request"),
    "bad-version": (b"GET /healthz HTTP/x.y\r\n\r\n", 400, "bad_request"),
    "long-line": (b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n", 414, "uri_too_long"),
    "many-headers": (
        b"GET /healthz HTTP/1.1\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(150)) + b"\r\n",
        431,
        "headers_too_large",
    ),
    "long-header": (
        b"GET /healthz HTTP/1.1\r\nX: " + b"a" * 70_000 + b"\r\n\r\n",
        431,
        "headers_too_large",
    ),
    "http-9.9": (b"GET /healthz HTTP/9.9\r\n\r\n", 505, "http_version_not_supported"),
}


@pytest.fixture(scope="module")
def shuffle_address() -> Iterator[tuple[str, int]]:
    with tempfile.TemporaryDirectory() as tmp, shuffler(Path(tmp)) as (address, _):
        yield address


@pytest.mark.parametrize("case", list(SERVER_ERRORS))
def test_server_level_errors_are_the_json_envelope_with_a_status_line(
    shuffle_address: tuple[str, int], case: str
) -> None:
    """Before the fix: ``GARBAGE`` got ``<!DOCTYPE HTML>...`` with no status line at all, the
    others ``Content-Type: text/html`` pages."""
    request, status, code = SERVER_ERRORS[case]
    answer = _raw(shuffle_address, request)
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert re.fullmatch(rf"HTTP/1\.1 {status} \S.*", lines[0]), answer[:300]
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    assert headers["content-type"] == "application/json", answer[:300]
    assert headers["connection"] == "close"
    assert int(headers["content-length"]) == len(body)
    envelope = json.loads(body)
    assert set(envelope) == {"error"}
    assert envelope["error"]["code"] == code
    assert envelope["error"]["status"] == status
    assert isinstance(envelope["error"]["message"], str) and envelope["error"]["message"]


def test_the_shuffler_answers_garbage_as_the_collector_does(
    shuffle_address: tuple[str, int], tmp_path: Path
) -> None:
    """One envelope for both services: the same status line, headers and body keys."""
    from tests.support.server import running_collector

    ours = _raw(shuffle_address, b"GARBAGE\r\n\r\n")
    with running_collector(tmp_path) as srv:
        host, port = srv.url.removeprefix("http://").split(":")
        theirs = _raw((host, int(port)), b"GARBAGE\r\n\r\n")

    def shape(answer: bytes) -> tuple[str, list[str], dict[str, object]]:
        head, _, body = answer.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        names = sorted(line.split(":")[0].lower() for line in lines[1:])
        error = json.loads(body)["error"]
        return lines[0], names, {k: error[k] for k in ("code", "status")} | {"keys": sorted(error)}

    assert shape(ours) == shape(theirs)


def test_a_valid_request_is_still_served(shuffle_address: tuple[str, int]) -> None:
    answer = _raw(shuffle_address, b"GET /healthz HTTP/1.1\r\nHost: shuffler\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200 "), answer[:300]
    assert answer.endswith(b'{"status":"ok"}\n')


# -- 2. --max-connections against the open-file limit ------------------------------------------


@pytest.mark.skipif(sys.platform == "win32", reason="no RLIMIT_NOFILE on Windows")
def test_a_cap_above_the_open_file_limit_is_warned_at_start(tmp_path: Path) -> None:
    """``ulimit -n 128`` and the default cap of 256: a WARNING naming both numbers and what to
    do. Before the fix stderr held only the listening line."""
    with shuffler(tmp_path, open_files=128) as (_, stderr):
        text = stderr.read_text()
    warnings = [line for line in text.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1, text
    (warning,) = warnings
    assert "--max-connections 256" in warning and "128 open files" in warning
    assert "RLIMIT_NOFILE" in warning
    assert "ulimit -n" in warning and "lower --max-connections to 96" in warning


@pytest.mark.skipif(sys.platform == "win32", reason="no RLIMIT_NOFILE on Windows")
def test_a_cap_with_room_is_not_warned(tmp_path: Path) -> None:
    with shuffler(tmp_path, ["--max-connections", "96"], open_files=128) as (_, stderr):
        text = stderr.read_text()
    assert "WARNING" not in text, text


def test_the_rule_is_cap_plus_reserve_above_the_soft_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    from shuffler import limits

    reserve = limits.DESCRIPTOR_RESERVE
    assert limits.descriptor_warning(100, limit=100 + reserve) is None
    warning = limits.descriptor_warning(101, limit=100 + reserve)
    assert warning is not None and f"{100 + reserve} open files" in warning
    # Windows: no resource module, no check.
    monkeypatch.setitem(sys.modules, "resource", None)
    assert limits.open_file_limit() is None
    assert limits.descriptor_warning(10**9) is None


# -- 3. help texts ------------------------------------------------------------------------------


def _help(*command: str) -> str:
    result = CliRunner().invoke(cli, [*command, "--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    return result.output


def test_mix_help_describes_the_transactions_of_each_store() -> None:
    """Before: "(one transaction)" and ``ldp tally verify`` with its rST backticks."""
    from collector.storage.sqlite import MIX_CHUNK

    text = " ".join(_help("mix").split())
    assert "one transaction)" not in text
    assert f"slices of {MIX_CHUNK} reports, one transaction each" in text
    assert "PostgreSQL moves them in steps" in text
    assert "``" not in text


def _examples(text: str) -> list[list[str]]:
    """The lines under each "Example:" heading, up to the next blank line after them."""
    blocks = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.strip() == "Example:":
            body: list[str] = []
            for nxt in lines[i + 1 :]:
                if not nxt.strip():
                    if body:
                        break
                    continue
                body.append(nxt)
            blocks.append(body)
    return blocks


@pytest.mark.parametrize("command", ["mechanisms", "mix", "shuffle"])
def test_one_example_heading_followed_by_commands(command: str) -> None:
    """Before: ``ldp mechanisms --help`` had a first "Example:" followed by prose."""
    text = _help(command)
    blocks = _examples(text)
    assert len(blocks) == 1, text
    assert blocks[0] and all(line.strip().startswith(("ldp ", "LDP_")) for line in blocks[0])
    assert "``" not in text


# -- 4. the level of the intervals ------------------------------------------------------------

# The table's level, for every kind of campaign: tests/test_sweep6_docs_estimate_level.py.

LEVELS = [0.5, 0.9, 0.95, 0.99, 0.999, 0.9999995, 0.9999999, 1 - 2**-53, 2**-53, 5e-324, 1e-300]
LEVELS += [float(x) for x in np.random.default_rng(8).uniform(0, 1, 200)]
LEVELS += [1 - float(x) for x in 10.0 ** -np.random.default_rng(9).uniform(1, 16, 200)]


@pytest.mark.parametrize("level", LEVELS)
def test_every_level_in_0_1_shows_inside_0_100(level: float) -> None:
    """Strictly between 0% and 100%, within six significant digits of the level."""
    from aggregator.export import percent as _percent

    text = _percent(level)
    assert text.endswith("%")
    shown, exact = Decimal(text[:-1]), Decimal(repr(level)) * 100
    assert 0 < shown < 100, (level, text)
    assert abs(shown - exact) <= exact * Decimal("1e-5"), (level, text)


@pytest.mark.parametrize("level", [0.5, 0.9, 0.95, 0.99, 0.995, 0.999, 0.001, 1e-6, 1e-7])
def test_the_usual_levels_read_as_percent_g_writes_them(level: float) -> None:
    """As the dashboard writes them (``'%g' % (100 * level)``)."""
    from aggregator.export import percent as _percent

    assert _percent(level) == "%g%%" % (100 * level)  # noqa: UP031 - the dashboard's own


# -- 5. option errors name the environment variable --------------------------------------------


def _shuffle_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ldp_cli", "shuffle", *args],
        env=_env(**env),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_bad_environment_value_names_its_variable(tmp_path: Path) -> None:
    """Before: ``Invalid value for '--max-connections': 'abc' is not a valid integer range.``"""
    done = _shuffle_cli(
        {"LDP_SHUFFLE_MAX_CONNECTIONS": "abc", "LDP_INGEST_TOKEN": TOKEN},
        "--collector", "http://127.0.0.1:9", "--database", str(tmp_path / "s.db"),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert (
        "Invalid value for environment variable LDP_SHUFFLE_MAX_CONNECTIONS "
        "(for '--max-connections'): 'abc'" in done.stderr
    )
    # The same value on the command line is the option's error, as before.
    flag = _shuffle_cli(
        {"LDP_INGEST_TOKEN": TOKEN},
        "--collector", "http://127.0.0.1:9", "--max-connections", "abc",
    )  # fmt: skip
    assert "Invalid value for '--max-connections': 'abc'" in flag.stderr


def test_a_missing_token_names_its_variable() -> None:
    """Before: ``Missing option '--token'.``"""
    done = _shuffle_cli({}, "--collector", "http://127.0.0.1:9")
    assert done.returncode == 2, done.stderr
    assert "Missing option '--token' (or environment variable LDP_INGEST_TOKEN)." in done.stderr


def test_a_foreign_staging_file_from_the_environment_names_its_variable(tmp_path: Path) -> None:
    import sqlite3

    foreign = tmp_path / "other.db"
    with sqlite3.connect(foreign) as conn:
        conn.execute("CREATE TABLE mine (x)")
    done = _shuffle_cli(
        {"LDP_INGEST_TOKEN": TOKEN, "LDP_SHUFFLE_DATABASE": str(foreign)},
        "--collector",
        "http://127.0.0.1:9",
    )
    assert done.returncode == 2, done.stderr
    assert "environment variable LDP_SHUFFLE_DATABASE (for '--database')" in done.stderr


def test_shuffle_and_serve_both_name_the_variable(tmp_path: Path) -> None:
    """``ldp serve`` names the variable a bad value came from; ``ldp shuffle`` now does too."""
    serve = subprocess.run(
        [sys.executable, "-m", "ldp_cli", "serve", "--db", str(tmp_path / "c.db"), "--init"],
        env=_env(
            LDP_PORT="abc",
            LDP_ADMIN_TOKEN="a" * 32,
            LDP_ANALYST_TOKEN="b" * 32,
            LDP_INGEST_TOKEN="c" * 32,
        ),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert serve.returncode != 0
    assert "environment variable LDP_PORT" in serve.stderr
    shuffle = _shuffle_cli(
        {"LDP_INGEST_TOKEN": TOKEN, "LDP_SHUFFLE_CLIENT_TIMEOUT": "soon"},
        "--collector",
        "http://127.0.0.1:9",
    )
    assert "environment variable LDP_SHUFFLE_CLIENT_TIMEOUT" in shuffle.stderr


def test_each_variable_is_shown_once_in_the_help() -> None:
    """One definition: the option's ``envvar`` writes the help's ``[env NAME]``."""
    from ldp_cli.shuffle_cmd import shuffle_command

    text = " ".join(_help("shuffle").partition("Options:")[2].split())
    for param in shuffle_command.params:
        envvar = getattr(param, "envvar", None)
        if envvar:
            assert text.count(envvar) == 1, (envvar, text)
            assert f"[env {envvar}]" in text

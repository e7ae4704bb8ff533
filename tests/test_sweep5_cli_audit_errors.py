"""``ldp audit`` with --samples or --alpha out of range: the one-line error alone on stderr.

Found by the fifth CLI sweep: the progress bar was opened before ``aggregator.privacy_audit``
checked --samples and --alpha, so with stderr not a terminal its label "auditing oue" stood
above "Error: samples must be an integer >= 100, got 5". It now opens with the first reports
drawn. Exit status 1 either way; a valid audit still shows its label and its table.

Real parts: the ``ldp`` CLI as subprocesses (stderr a pipe, as in CI logs).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def ldp(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LDP_")}
    return subprocess.run(
        [sys.executable, "-m", "ldp_cli", "audit", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--samples", "5"], "samples must be an integer >= 100, got 5"),
        (["--samples", "-1"], "samples must be an integer >= 100, got -1"),
        (["--samples", "1000", "--alpha", "0"], "alpha must be in (0, 1), got 0.0"),
        (["--samples", "1000", "--alpha", "nan"], "alpha must be in (0, 1), got nan"),
    ],
)
def test_a_bad_option_is_one_line(args: list[str], message: str) -> None:
    out = ldp("oue", "-e", "1", *args)
    assert out.returncode == 1
    assert out.stdout == ""
    assert out.stderr == f"Error: {message}\n"


def test_a_valid_audit_keeps_its_label_and_its_bound() -> None:
    out = ldp("oue", "-e", "1", "--samples", "2000", "--seed", "4", "--path", "vectorised")
    assert out.returncode == 0, out.stderr
    assert out.stderr.startswith("auditing oue")
    assert "oue: claimed epsilon 1 (realised 1), empirical lower bound" in out.stdout


@pytest.mark.parametrize(("mechanism", "kind"), [("hybrid", "mean"), ("pem", "open_domain")])
def test_a_mechanism_the_audit_does_not_cover_is_told_in_its_words(
    mechanism: str, kind: str
) -> None:
    """It was the Python API's "give bounds=(low, high), not a domain", which no option of
    ``ldp audit`` can follow."""
    done = ldp(mechanism, "--epsilon", "1")
    assert done.returncode == 1, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert f"'{mechanism}' is not one (kind: {kind})" in lines[0], lines
    assert "audit one of rr, grr" in lines[0] and "bounds=" not in lines[0]

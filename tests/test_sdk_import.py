"""The SDK is light: importing it and reporting loads neither NumPy nor anything server-side.

Each check runs a fresh interpreter (``sys.modules`` of this test process is full of NumPy).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

import client_sdk
from client_sdk.mechanisms import MECHANISMS, NUMERIC_MECHANISMS, create
from tests.conftest import REPO
from tests.support.server import CollectorProcess, running_collector

FORBIDDEN = ("flask", "werkzeug", "sqlite_utils", "click", "collector", "aggregator", "simulator")
HEAVY = ("numpy", "scipy", "matplotlib")
LABELS = ["Zebra-Keeper", "Quokka-Tamer", "Narwhal-Pilot", "Axolotl-Chef", "Lynx-Warden"]
#: One per-device mechanism of each kind, as a campaign would serve it.
REPORTED = ("grr", "oue", "sue", "olh", "hr", "ss", "rappor", "ss-patterns")
#: Campaigns whose mechanism is not their name: SS whose tally keeps each report's subset.
SPECIAL = {"ss-patterns": {"mechanism": "ss", "params": {"d": 2, "patterns": True}}}
#: Every numeric mechanism, reported as a number (alpha_point through its memoised path).
NUMERIC = tuple(sorted(NUMERIC_MECHANISMS))
#: Makes ``import numpy`` fail, as on a device where it is not installed.
NO_NUMPY = "import sys; sys.modules['numpy'] = None\n"


def run_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def top_level_imports(stderr: str) -> set[str]:
    """Top-level package names from ``python -X importtime`` output."""
    return {
        line.rsplit("|", 1)[-1].strip().split(".")[0]
        for line in stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }


def test_import_loads_no_numpy_and_nothing_server_side() -> None:
    out = run_python("from client_sdk import TelemetryClient, mechanisms", "-X", "importtime")
    assert out.returncode == 0, out.stderr
    imported = top_level_imports(out.stderr)
    assert "client_sdk" in imported
    # requests loads when a client is made (its transport), not on import.
    unwanted = set(FORBIDDEN + HEAVY + ("requests", "urllib3"))
    assert not imported & unwanted, sorted(imported & unwanted)


def test_the_check_sees_numpy_when_it_is_loaded() -> None:
    """The import check above can fail: the batch path does load NumPy, and it is seen."""
    out = run_python(
        "from client_sdk.mechanisms import create\n"
        "create('oue', epsilon=1.0, domain=3).perturb_many(['0', '1'])",
        "-X",
        "importtime",
    )
    assert out.returncode == 0, out.stderr
    assert "numpy" in top_level_imports(out.stderr)


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CollectorProcess]:
    with running_collector(tmp_path_factory.mktemp("collector")) as srv:
        for name in REPORTED:
            body = {"id": f"light-{name}", "domain": LABELS, "mechanism": name, "epsilon": 1.0}
            body.update(SPECIAL.get(name, {}))
            body["min_reports"] = 1
            resp = requests.post(
                srv.url + "/v1/campaigns", json=body, headers=srv.headers("admin"), timeout=10
            )
            assert resp.status_code == 201, resp.text
        for name in NUMERIC:
            body = {"id": f"num-{name}".replace("_", "-"), "bounds": [0, 10], "epsilon": 1.0}
            body["mechanism"] = name
            resp = requests.post(
                srv.url + "/v1/campaigns", json=body, headers=srv.headers("admin"), timeout=10
            )
            assert resp.status_code == 201, resp.text
        yield srv


def test_import_and_report_load_no_numpy(collector: CollectorProcess, tmp_path: Path) -> None:
    """``import client_sdk`` plus one ``report`` per mechanism, uploaded: NumPy never loads."""
    code = f"""
        import json, sys
        import client_sdk
        with client_sdk.TelemetryClient({collector.url!r}, ingest_token={collector.ingest_token!r},
                                        state_dir={str(tmp_path)!r}) as client:
            client.prefetch(*["light-" + name for name in {REPORTED!r}])
            for name in {REPORTED!r}:
                assert client.report("light-" + name, {LABELS[1]!r})
            numeric = ["num-" + name.replace("_", "-") for name in {NUMERIC!r}]
            client.prefetch(*numeric)
            for cid in numeric:
                assert client.report(cid, 12.5)  # clipped to 10 on the device
            flushed = client.flush(timeout=60)
        heavy = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})
        print(json.dumps({{"flushed": flushed, "heavy": heavy}}))
    """
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result == {"flushed": True, "heavy": []}
    for name in REPORTED:
        resp = requests.get(
            f"{collector.url}/v1/campaigns/light-{name}/estimates",
            headers=collector.headers("analyst"),
            timeout=10,
        )
        assert resp.status_code == 200, resp.text
        assert resp.json()["n"] == 1
    for name in NUMERIC:
        resp = requests.get(
            f"{collector.url}/v1/campaigns/num-{name.replace('_', '-')}/estimates",
            headers=collector.headers("analyst"),
            timeout=10,
        )
        assert resp.status_code == 200, resp.text
        assert resp.json()["n"] == 1


def test_mechanisms_build_and_perturb_without_numpy_installed() -> None:
    """With NumPy unimportable every mechanism is built with the same integer thresholds as
    here, and ``perturb`` returns reports this process's parser accepts."""
    code = (
        NO_NUMPY
        + f"""
import json
from client_sdk.mechanisms import MECHANISMS, NUMERIC_MECHANISMS, create
out = {{}}
for name in MECHANISMS:
    for eps in (0.5, 2.0):
        domain = {LABELS!r}[:2] if name == "rr" else {LABELS!r}
        mech = create(name, epsilon=eps, domain=domain)
        state = {{k: v for k, v in vars(mech).items() if k.startswith("threshold")}}
        reports = [mech.perturb(label) for label in domain for _ in range(50)]
        out[f"{{name}}/{{eps}}"] = [state, mech.realised_epsilon, reports]
print(json.dumps(out))
"""
    )
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert len(result) == 2 * len(MECHANISMS)
    for key, (state, realised, reports) in result.items():
        name, eps = key.split("/")
        mech = create(name, epsilon=float(eps), domain=LABELS[:2] if name == "rr" else LABELS)
        assert state == {k: v for k, v in vars(mech).items() if k.startswith("threshold")}
        assert realised == mech.realised_epsilon <= mech.epsilon
        assert len(mech.decode_many(reports)) == len(reports)  # every report well-formed


def test_numeric_mechanisms_perturb_without_numpy_installed() -> None:
    """Every numeric mechanism of the registry is built and perturbs with NumPy unimportable;
    the reports are on its output grid."""
    code = (
        NO_NUMPY
        + """
import json
from client_sdk.mechanisms import NUMERIC_MECHANISMS, create
out = {}
for name in NUMERIC_MECHANISMS:
    mech = create(name, epsilon=1.0, bounds=(0, 10))
    out[name] = [mech.output_size, [mech.perturb(x / 7) for x in range(-7, 80)]]
print(json.dumps(out))
"""
    )
    out = run_python(code)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert set(result) == set(NUMERIC_MECHANISMS)
    for name, (size, reports) in result.items():
        mech = create(name, epsilon=1.0, bounds=(0, 10))
        assert size == mech.output_size
        assert len(mech.decode_many(reports)) == len(reports), name


def test_public_names() -> None:
    assert client_sdk.__all__ == sorted(client_sdk.__all__)
    assert {"TelemetryClient", "Report", "BudgetSpent", "ClientClosed"} <= set(client_sdk.__all__)
    assert {"PrivacyBudgetExceeded", "UnknownCampaign", "TransportError"} <= set(client_sdk.__all__)
    from client_sdk.mechanisms import Tally  # lazily imported, still public

    assert Tally.empty(3).n == 0


def test_the_batch_path_without_numpy_says_which_extra_to_install() -> None:
    out = run_python(
        NO_NUMPY + "from client_sdk.mechanisms import create\n"
        "create('oue', epsilon=1.0, domain=3).perturb_many(['1'])"
    )
    assert out.returncode != 0
    assert "pip install 'ldp-telemetry[batch]'" in out.stderr


def _names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=~!\[ ;]", r, maxsplit=1)[0].lower() for r in requirements}


def _resolved(extras: dict[str, list[str]], name: str) -> set[str]:
    """The distributions an extra installs, following ``ldp-telemetry[a,b]`` references."""
    names: set[str] = set()
    for req in extras[name]:
        if req.startswith("ldp-telemetry["):
            for inner in req[len("ldp-telemetry[") : req.index("]")].split(","):
                names |= _resolved(extras, inner.strip())
        else:
            names |= _names([req])
    return names


def test_packaging_keeps_the_sdk_alone_light_and_the_extras_complete() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert _names(project["dependencies"]) == {"requests"}  # pure Python, no NumPy
    raw = project["optional-dependencies"]
    extras = {name: _resolved(raw, name) for name in raw}
    server = {"numpy", "flask", "sqlite-utils", "click", "gunicorn", "prometheus-client"}
    assert extras["batch"] == {"numpy"}
    # A device sealing reports for a shuffled campaign gets PyNaCl, none of the server.
    assert extras["sealed"] == {"pynacl"}
    assert extras["shuffle"] == server | {"pynacl"}
    assert extras["collector"] == server
    for name in ("sim", "all", "dev"):  # the README's commands install what demo and tests need
        assert server | {"matplotlib", "scipy"} <= extras[name], name
    assert {"mypy", "ruff", "pytest"} <= extras["dev"]
    # The collector image installs the collector's extra (and PostgreSQL's, sealed reports').
    assert "'.[collector,postgres,shuffle]'" in (REPO / "docker" / "Dockerfile").read_text()

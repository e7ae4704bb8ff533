"""docker/: the compose file and the Dockerfile, checked without a Docker engine.

The compose file must run two collector replicas behind one port with PostgreSQL and a
volume, every service with a healthcheck, configured only by environment variables that the
collector actually reads (``collector.settings.SETTINGS``); the Dockerfile must build a
non-root image with a HEALTHCHECK on /healthz and no secret in it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from collector.auth import check_tokens
from collector.settings import SETTINGS, load_settings

REPO = Path(__file__).resolve().parents[1]
DOCKER = REPO / "docker"
COLLECTOR_ENV = {s.env for s in SETTINGS}
#: ``${NAME}``, ``${NAME:-default}``, ``${NAME:?message}`` (compose interpolation).
INTERPOLATION = re.compile(r"\$\{([A-Z0-9_]+)(?:(:?[-?])([^}]*))?\}")
SECRET_WORDS = ("TOKEN", "PASSWORD", "SECRET")


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((DOCKER / "compose.yml").read_text())


def collectors(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: svc
        for name, svc in compose["services"].items()
        if svc.get("build", {}).get("dockerfile") == "docker/Dockerfile"
    }


def interpolate(value: str, placeholders: dict[str, str]) -> str:
    """What compose substitutes when only ``placeholders`` are set in the environment."""

    def one(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3)
        if name in placeholders:
            return placeholders[name]
        if op and op.endswith("-"):
            return arg
        raise AssertionError(f"${{{name}}} has no default and no test value")

    return INTERPOLATION.sub(one, value)


def test_two_collector_replicas_behind_one_port_with_postgres_and_a_volume(
    compose: dict[str, Any],
) -> None:
    services = compose["services"]
    replicas = collectors(compose)
    assert len(replicas) == 2, sorted(services)
    assert "postgres" in services and services["postgres"]["image"].startswith("postgres:")
    published = {n: s["ports"] for n, s in services.items() if s.get("ports")}
    assert list(published) == ["proxy"] and len(published["proxy"]) == 1
    for svc in replicas.values():
        assert "ports" not in svc and svc["expose"] == ["8750"]
        assert svc["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert set(services["proxy"]["depends_on"]) == set(replicas)
    assert "pgdata" in compose["volumes"]
    assert "pgdata:/var/lib/postgresql/data" in services["postgres"]["volumes"]


def test_every_service_has_a_healthcheck(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        check = svc.get("healthcheck")
        assert check and check["test"] and check["interval"], name
    for svc in collectors(compose).values():
        assert any("/healthz" in part for part in svc["healthcheck"]["test"])


def test_collectors_set_only_variables_the_collector_reads(compose: dict[str, Any]) -> None:
    for name, svc in collectors(compose).items():
        env = svc["environment"]
        unknown = sorted(set(env) - COLLECTOR_ENV)
        assert not unknown, f"{name} sets {unknown}, which the collector does not read"
        assert {"LDP_DATABASE", "LDP_HOST", "LDP_PORT"} <= set(env)


def test_configuration_is_only_environment_and_holds_no_secret(compose: dict[str, Any]) -> None:
    for name, svc in compose["services"].items():
        for key, value in (svc.get("environment") or {}).items():
            if any(word in key for word in SECRET_WORDS):
                m = INTERPOLATION.fullmatch(str(value))
                assert m and m.group(2) == ":?", f"{name}.{key} must be ${{{key}:?...}}"
        assert "env_file" not in svc and "secrets" not in svc, name
    url = collectors(compose)["collector-1"]["environment"]["LDP_DATABASE"]
    assert "${POSTGRES_PASSWORD:?" in url  # the password comes from the environment only


def test_the_collectors_environment_is_a_valid_configuration(compose: dict[str, Any]) -> None:
    values = {
        "POSTGRES_PASSWORD": "pw",
        "LDP_ADMIN_TOKEN": "a" * 32,
        "LDP_ANALYST_TOKEN": "b" * 32,
        "LDP_INGEST_TOKEN": "c" * 32,
    }
    for svc in collectors(compose).values():
        env = {k: interpolate(str(v), values) for k, v in svc["environment"].items()}
        settings = load_settings(environ=env)
        check_tokens(settings)
        assert settings["database"] == "postgresql://ldp:pw@postgres:5432/ldp"
        assert settings["host"] == "0.0.0.0" and settings["port"] == 8750


def test_the_proxy_balances_both_replicas_and_logs_no_address(compose: dict[str, Any]) -> None:
    (mount,) = compose["services"]["proxy"]["volumes"]
    conf = (DOCKER / mount.split(":")[0]).read_text()
    upstream = re.findall(r"^\s*server\s+([\w-]+):(\d+)", conf, re.M)
    assert sorted(upstream) == sorted((n, "8750") for n in collectors(compose))
    assert re.search(r"^\s*access_log off;", conf, re.M)
    size = re.search(r"client_max_body_size (\d+)m;", conf)
    default_body = {s.env: s.default for s in SETTINGS}["LDP_MAX_BODY_BYTES"]
    assert size and int(size.group(1)) * 1024 * 1024 > default_body


def test_dockerfile_is_slim_non_root_healthchecked_and_secret_free() -> None:
    text = (DOCKER / "Dockerfile").read_text()
    lines = [ln.strip() for ln in text.replace("\\\n", " ").splitlines()]
    instr = [ln for ln in lines if ln and not ln.startswith("#")]
    froms = [ln.split()[1] for ln in instr if ln.startswith("FROM ")]
    assert froms and all(re.fullmatch(r"python:3\.\d+-slim", f) for f in froms)
    users = [ln.split()[1] for ln in instr if ln.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    last_user = max(i for i, ln in enumerate(instr) if ln.startswith("USER "))
    entry = max(i for i, ln in enumerate(instr) if ln.startswith(("ENTRYPOINT", "CMD")))
    assert last_user < entry
    (health,) = [ln for ln in instr if ln.startswith("HEALTHCHECK")]
    assert "/healthz" in health
    assert 'ENTRYPOINT ["ldp", "serve"]' in instr and 'CMD ["--host", "0.0.0.0"]' in instr
    for ln in instr:
        if ln.startswith(("ENV", "ARG", "LABEL")):
            assert not any(w in ln.upper() for w in SECRET_WORDS), ln
            names = re.findall(r"\b(LDP_[A-Z_]+)=", ln)
            assert set(names) <= COLLECTOR_ENV, names
    assert not re.search(r"postgres(ql)?://[^\s\"']*:[^\s\"'@]*@", text)  # no inline password


def test_dockerignore_keeps_local_state_out_of_the_image() -> None:
    ignored = set((REPO / ".dockerignore").read_text().split())
    assert {".git", ".venv", ".env", "*.db", "tests"} <= ignored


def test_readme_shows_compose_up_with_every_required_variable() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## PostgreSQL, Docker and scaling", 1)[1].split("\n## ", 1)[0]
    assert "docker compose -f docker/compose.yml up" in section
    required = {
        m.group(1)
        for m in INTERPOLATION.finditer((DOCKER / "compose.yml").read_text())
        if m.group(2) == ":?"
    }
    exported = set(re.findall(r"\b([A-Z][A-Z0-9_]+)=\.\.\.", section))
    assert required and required <= exported, sorted(required - exported)


def test_the_image_copies_every_package_pyproject_installs() -> None:
    import tomllib

    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    include = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = {p.rstrip("*") for p in include}
    copied = set(re.findall(r"^COPY (\w+) \./\1$", (DOCKER / "Dockerfile").read_text(), re.M))
    assert packages <= copied, sorted(packages - copied)

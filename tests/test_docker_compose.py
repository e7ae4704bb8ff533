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
from collector.errors import ConfigError
from collector.settings import SETTINGS, load_settings

REPO = Path(__file__).resolve().parents[1]
DOCKER = REPO / "docker"
COLLECTOR_ENV = {s.env for s in SETTINGS} | {s.env + "_FILE" for s in SETTINGS}
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")
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
    for name, svc in services.items():
        assert DIGEST.search(svc.get("image", "")) or "build" in svc, f"{name}: pin by digest"
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
    # Secrets reach the containers as compose secrets (files), taken from the environment.
    sources = {name: spec["environment"] for name, spec in compose["secrets"].items()}
    assert set(sources.values()) == {
        "POSTGRES_PASSWORD",
        "LDP_ADMIN_TOKEN",
        "LDP_ANALYST_TOKEN",
        "LDP_INGEST_TOKEN",
    }
    for name, svc in compose["services"].items():
        for key, value in (svc.get("environment") or {}).items():
            if any(word in key for word in SECRET_WORDS):
                assert key.endswith("_FILE"), f"{name}.{key}: secrets only as *_FILE"
                secret = str(value).removeprefix("/run/secrets/")
                assert secret in sources and secret in svc["secrets"], (name, key, value)
        assert "env_file" not in svc, name
    url = collectors(compose)["collector-1"]["environment"]["LDP_DATABASE"]
    userinfo = interpolate(url, {}).split("://")[1].split("@")[0]
    assert userinfo == "ldp"  # a user, no password: it comes from LDP_DATABASE_PASSWORD_FILE


def test_secret_files_and_an_escaped_password_make_the_configuration(tmp_path: Path) -> None:
    password = "p@ss/w:rd%?#"
    (tmp_path / "pw").write_text(password + "\n")
    (tmp_path / "admin").write_text("a" * 32 + "\n")
    env = {
        "LDP_DATABASE": "postgresql://ldp@postgres:5432/ldp",
        "LDP_DATABASE_PASSWORD_FILE": str(tmp_path / "pw"),
        "LDP_ADMIN_TOKEN_FILE": str(tmp_path / "admin"),
    }
    settings = load_settings(environ=env)
    assert settings["admin_token"] == "a" * 32
    assert settings["database"] == "postgresql://ldp:p%40ss%2Fw%3Ard%25%3F%23@postgres:5432/ldp"
    from psycopg.conninfo import conninfo_to_dict

    assert conninfo_to_dict(settings["database"])["password"] == password
    with pytest.raises(ConfigError, match="not both"):
        load_settings(environ={**env, "LDP_ADMIN_TOKEN": "b" * 32})
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(environ={"LDP_ADMIN_TOKEN_FILE": str(tmp_path / "missing")})


def test_the_collectors_environment_is_a_valid_configuration(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    values = {
        "postgres_password": "pw",
        "ldp_admin_token": "a" * 32,
        "ldp_analyst_token": "b" * 32,
        "ldp_ingest_token": "c" * 32,
    }
    secrets = tmp_path / "run" / "secrets"
    secrets.mkdir(parents=True)
    for name, value in values.items():
        (secrets / name).write_text(value)
    for svc in collectors(compose).values():
        env = {
            k: interpolate(str(v), {}).replace("/run/secrets", str(secrets))
            for k, v in svc["environment"].items()
        }
        settings = load_settings(environ=env)
        check_tokens(settings)
        assert settings["database"] == "postgresql://ldp:pw@postgres:5432/ldp"
        assert {"LDP_RATE_LIMIT", "LDP_CORS_ORIGINS"} <= set(env)
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
    assert froms and all(re.fullmatch(r"python:3\.\d+-slim@sha256:[0-9a-f]{64}", f) for f in froms)
    # No anonymous VOLUME: a PostgreSQL deployment would leave one per container.
    assert not any(ln.startswith("VOLUME") for ln in instr)
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
    required |= {
        spec["environment"]
        for spec in yaml.safe_load((DOCKER / "compose.yml").read_text())["secrets"].values()
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


def test_each_replica_is_scraped_on_its_own_not_through_the_proxy(
    compose: dict[str, Any],
) -> None:
    scrape = yaml.safe_load((DOCKER / "prometheus.yml").read_text())
    (job,) = scrape["scrape_configs"]
    (static,) = job["static_configs"]
    assert sorted(static["targets"]) == sorted(f"{n}:8750" for n in collectors(compose))
    assert job["authorization"]["credentials_file"].startswith("/run/secrets/")
    conf = (DOCKER / "nginx.conf").read_text()
    assert re.search(r"location = /metrics \{\s*return 404;", conf)

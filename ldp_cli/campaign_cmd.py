"""``ldp campaign create|list|show|archive``: manage campaigns without writing curl.

Each command works on the store itself (``--db``, or ``LDP_DATABASE``) or through a running
collector (``--url``, with the admin token for create/archive and the analyst or admin token for
list/show, from ``--token`` or the environment). Both paths apply the same rules: campaigns are
validated by ``collector.campaigns.campaign_from_request``, exactly as ``POST /v1/campaigns``.
"""

from __future__ import annotations

import json
import os
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import click

from ldp_cli.output import FORMAT_OPTION, emit_json, printable, table


class _Campaigns:
    """What both places campaigns live in (a store, a running collector) answer alike."""

    def list(self) -> list[dict[str, Any]]:
        raise NotImplementedError

    def show(self, campaign_id: str) -> dict[str, Any]:
        from ldp_cli.remote import campaign_segment

        campaign_segment(campaign_id)  # an id no campaign can have: refused before any request
        for item in self.list():
            if item["id"] == campaign_id:
                return item
        raise click.ClickException(f"no campaign {campaign_id!r} (see: ldp campaign list)")


class _Store(_Campaigns):
    """The campaigns of a database file or URL (the store the collector serves)."""

    def __init__(self, database: str) -> None:
        from ldp_cli.store import opened_store

        self._open = ExitStack()
        self.store = self._open.enter_context(opened_store(database, url_option=True))

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        from collector.campaigns import campaign_from_request
        from collector.errors import APIError, CampaignExists, ConfigError
        from collector.settings import setting_from_environment

        try:
            # The rules of POST /v1/campaigns with the collector's settings from this
            # environment, read as the collector reads them (LDP_MAX_RETENTION_DAYS or its
            # _FILE, checked): its retention ceiling, and whether it has a sealed key (a
            # shuffled campaign needs one).
            ceiling = setting_from_environment("max_retention_days")
            campaign = campaign_from_request(
                body,
                max_retention_days=ceiling,
                sealed_key=bool(os.environ.get("LDP_SEALED_KEY_FILE")),
            )
            self.store.create_campaign(campaign)
        except APIError as exc:
            if exc.code == "sealed_not_configured":
                raise click.ClickException(
                    f"{exc.message} (with --db, LDP_SEALED_KEY_FILE is read from this "
                    "command's environment: set it as the collector serving this database has "
                    "it, or use --url)"
                ) from None
            raise click.ClickException(exc.message) from None
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from None
        except CampaignExists as exc:
            raise click.ClickException(f"{exc}; campaigns are immutable, pick another id") from None
        return {**campaign.resource(), "archived": None}

    def list(self) -> list[dict[str, Any]]:
        from collector.retention import stored_fields

        archived = self.store.archived()
        stored = stored_fields(self.store)
        return [
            {**c.resource(), "archived": archived.get(c.id), "reports": n, **stored[c.id]}
            for c, n in self.store.list_campaigns()
        ]

    def archive(self, campaign_id: str) -> dict[str, Any]:
        campaign = self.store.get_campaign(campaign_id)
        if campaign is None:
            raise click.ClickException(f"no campaign {campaign_id!r} (see: ldp campaign list)")
        from collector import clock
        from collector.errors import ConfigError

        # The collector's date (its test clock too), as POST .../archive dates it.
        try:
            today = clock.today()
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from None
        day = self.store.archive_campaign(campaign, today.isoformat())
        return {**campaign.resource(), "archived": day}

    def close(self) -> None:
        self._open.close()


class _Collector(_Campaigns):
    """The same operations through a running collector's HTTP API."""

    def __init__(self, url: str, token: str | None, role_hint: str) -> None:
        if not token:
            raise click.ClickException(
                f"--url needs a token: export {role_hint}=<token> (or pass --token)"
            )
        self.url = url.rstrip("/")
        self.token = token

    def _call(self, method: str, path: str, body: Any = None) -> Any:
        from ldp_cli.remote import collector_request, json_answer

        return json_answer(collector_request(method, self.url + path, self.token, json=body))

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        return dict(self._call("POST", "/v1/campaigns", body))

    def list(self) -> list[dict[str, Any]]:
        return list(self._call("GET", "/v1/campaigns")["campaigns"])

    def archive(self, campaign_id: str) -> dict[str, Any]:
        from ldp_cli.remote import campaign_segment

        return dict(self._call("POST", f"/v1/campaigns/{campaign_segment(campaign_id)}/archive"))

    def close(self) -> None:
        pass


def _target(db: str | None, url: str | None, token: str | None, roles: tuple[str, ...]) -> Any:
    if db and url:
        raise click.UsageError("give --db PATH (the store) or --url URL (a collector), not both")
    if url:
        env = [f"LDP_{r.upper()}_TOKEN" for r in roles]
        token = token or next((os.environ[e] for e in env if os.environ.get(e)), None)
        return _Collector(url, token, " or ".join(env))
    database = db or os.environ.get("LDP_DATABASE")
    if not database and os.environ.get("LDP_DATABASE_FILE"):
        # The option's default: opened_store reads LDP_DATABASE_FILE in its place.
        from collector.settings import DEFAULT_DATABASE

        database = DEFAULT_DATABASE
    if not database:
        raise click.UsageError("give --db PATH (or LDP_DATABASE), or --url URL of a collector")
    return _Store(database)


def _where(f: Any) -> Any:
    f = click.option("--token", default=None, help="Bearer token for --url (prefer the env).")(f)
    f = click.option("--url", default=None, metavar="URL", help="A running collector.")(f)
    return click.option(
        "--db", "--database", "db", default=None, help="The store: SQLite file or URL."
    )(f)


def _row(item: dict[str, Any]) -> list[Any]:
    mech = item["mechanism"]
    return [
        item["id"],
        mech["mechanism"],
        mech["epsilon"],
        _size(mech),
        item["window"],
        item.get("reports", ""),
        item.get("archived") or "-",
    ]


def _size(mech: dict[str, Any]) -> str | int:
    """The ``k`` column: domain size, numeric bounds, the attributes of a multi campaign, or
    an open-domain campaign's max_length."""
    if "domain" in mech:
        return len(mech["domain"])
    if "attributes" in mech:
        return f"{len(mech['attributes'])} attributes"
    if "max_length" in mech:  # an open-domain campaign: any string of at most max_length bytes
        return f"strings <= {mech['max_length']} B"
    return "[{}, {}]".format(*mech["bounds"])


def _attribute_text(spec: Any) -> str:
    if isinstance(spec, dict):
        return "[{}, {}]".format(*spec["bounds"])
    return f"{len(spec)} values: {', '.join(spec[:8])}{' ...' if len(spec) > 8 else ''}"


def _load_attributes(text: str | None, path: str | None) -> dict[str, Any] | None:
    """``--attributes`` (inline JSON) or ``--attributes-file`` (a JSON file), or None."""
    if text is not None and path is not None:
        raise click.UsageError("give --attributes JSON or --attributes-file FILE, not both")
    if text is None and path is None:
        return None
    hint = "--attributes" if text is not None else "--attributes-file"
    source = text if text is not None else _read_text(str(path), hint)
    try:
        value = json.loads(source)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint=hint) from None
    except RecursionError:
        raise click.BadParameter(
            "the JSON nests arrays or objects too deeply", param_hint=hint
        ) from None
    if not isinstance(value, dict):
        raise click.BadParameter(
            'an object: {"occupation": ["a", "b"], "age": {"bounds": [17, 90]}}',
            param_hint="--attributes",
        )
    return value


def _read_text(path: str, option: str) -> str:
    """The UTF-8 text of the file ``path`` given to ``option`` (a byte-order mark dropped)."""
    try:
        return Path(path).read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as exc:
        raise click.BadParameter(
            f"{path} is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset "
            f"{exc.start}); save it as UTF-8",
            param_hint=option,
        ) from None
    except OSError as exc:
        raise click.BadParameter(f"cannot read {path}: {exc.strerror}", param_hint=option) from None


def _number(x: float) -> float | int:
    """An integral bound as a JSON integer (``17`` rather than ``17.0``), while the integer is
    exact in a float: ``--bounds -1e308 1e308`` became two 309-digit integers, printed whole in
    the campaign rules' error message."""
    return int(x) if float(x).is_integer() and abs(x) <= 2**53 else x


_HEADERS = ["id", "mechanism", "epsilon", "k", "window", "reports", "archived"]


def _expected(text: str, *, numeric: bool) -> list[float] | dict[str, float]:
    """``--expected``: comma-separated numbers; for a numeric campaign exactly MEAN,SD."""
    try:
        numbers = [float(x) for x in text.split(",")]
    except ValueError:
        raise click.BadParameter(
            f"must be comma-separated numbers, got {text!r}", param_hint="--expected"
        ) from None
    if not numeric:
        return numbers
    if len(numbers) != 2:
        raise click.BadParameter(
            f"a numeric campaign takes MEAN,SD (two numbers), got {text!r}",
            param_hint="--expected",
        )
    return {"mean": numbers[0], "sd": numbers[1]}


@click.group("campaign")
def campaign_group() -> None:
    """Create, list, show and archive campaigns (in the store or through a collector)."""


@campaign_group.command("create")
@click.argument("campaign_id")
@click.option("--domain", multiple=True, help="Value labels, comma-separated or repeated.")
@click.option(
    "--domain-file",
    type=click.Path(exists=True, dir_okay=False),
    help="Value labels, one per line.",
)
@click.option(
    "--bounds",
    type=(float, float),
    default=None,
    metavar="LOW HIGH",
    help="A numeric campaign: the range values are clipped into (instead of --domain).",
)
@click.option(
    "--attributes",
    "attributes_json",
    default=None,
    metavar="JSON",
    help='Several attributes per device (instead of --domain): {"occupation": [labels], '
    '"age": {"bounds": [17, 90]}}; mechanism spl, smp, rsfd or auto. A numeric attribute may '
    'declare its values for auto: {"bounds": [17, 90], "expected": {"mean": 38.6, "sd": 13.6}}.',
)
@click.option(
    "--attributes-file",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="The same object in a JSON file.",
)
@click.option(
    "--pair",
    "pairs",
    multiple=True,
    metavar="A,B",
    help="With --attributes: a pair of categorical attributes to get a joint table (repeat).",
)
@click.option(
    "--max-length",
    type=int,
    default=None,
    metavar="BYTES",
    help="An open-domain campaign (instead of --domain): devices report any string of at most "
    "BYTES of UTF-8; mechanism pem (discovers; also auto), cms or hcms, sketch via --param "
    "width=... depth=....",
)
@click.option("--mechanism", "-m", default="auto", show_default=True)
@click.option("--epsilon", "-e", type=float, default=None)
@click.option("--window", type=click.Choice(["day", "week"]), default="day", show_default=True)
@click.option("--horizon-days", type=int, default=None)
@click.option("--min-reports", type=int, default=None)
@click.option(
    "--retention-days",
    type=int,
    default=None,
    help="Days reports are kept (>= horizon; default max(90, horizon)); tallies stay.",
)
@click.option("--description", default="")
@click.option(
    "--expected",
    default=None,
    metavar="W1,W2,...|MEAN,SD",
    help="What -m auto chooses for: expected frequencies, one weight per label (--domain), or "
    "the mean and standard deviation of the values (--bounds); default uniform / the worst case. "
    'With --attributes, a numeric attribute declares its own in the JSON ("expected").',
)
@click.option(
    "--param", "params", multiple=True, metavar="KEY=VALUE", help="Mechanism parameter (JSON)."
)
@click.option(
    "--shuffler",
    default=None,
    metavar="URL",
    help="Devices send their reports sealed through this ldp shuffle (docs/SHUFFLE.md); the "
    "collector needs LDP_SEALED_KEY_FILE.",
)
@_where
@FORMAT_OPTION
def create_command(
    campaign_id: str,
    domain: tuple[str, ...],
    domain_file: str | None,
    bounds: tuple[float, float] | None,
    attributes_json: str | None,
    attributes_file: str | None,
    pairs: tuple[str, ...],
    max_length: int | None,
    mechanism: str,
    epsilon: float | None,
    window: str,
    horizon_days: int | None,
    min_reports: int | None,
    retention_days: int | None,
    description: str,
    expected: str | None,
    params: tuple[str, ...],
    shuffler: str | None,
    db: str | None,
    url: str | None,
    token: str | None,
    fmt: str,
) -> None:
    """Create campaign CAMPAIGN_ID (immutable once created).

    Example:

    \b
        ldp campaign create occupation --db ldp.db --domain Sales,Tech,Other -m oue -e 1
        LDP_ADMIN_TOKEN=... ldp campaign create city --url http://127.0.0.1:8750 \\
            --domain-file cities.txt --window week -e 2
        ldp campaign create age --db ldp.db --bounds 17 90 -m auto -e 1
        ldp campaign create age2 --db ldp.db --bounds 17 90 -m auto -e 1 --expected 38.6,13.6
        ldp campaign create person --db ldp.db -e 2 --pair occupation,sex \\
            --attributes '{"occupation": ["Sales", "Tech"], "sex": ["F", "M"],
                           "age": {"bounds": [17, 90]}}'
        ldp campaign create person2 --db ldp.db -e 2 \\
            --attributes '{"sex": ["F", "M"],
                           "age": {"bounds": [17, 90], "expected": {"mean": 38.6, "sd": 13.6}}}'
        ldp campaign create homepage --db ldp.db --max-length 32 -m pem -e 4 \\
            --param width=1024 --param depth=16
        LDP_ADMIN_TOKEN=... ldp campaign create sealed --url http://127.0.0.1:8750 \\
            --domain a,b,c -e 1 --shuffler http://shuffler:8081
    """
    labels = [label for part in domain for label in part.split(",")]
    if domain_file:
        text = _read_text(domain_file, "--domain-file")
        labels += [ln for ln in text.splitlines() if ln.strip()]
    attributes = _load_attributes(attributes_json, attributes_file)
    if attributes is not None and (labels or bounds is not None):
        raise click.UsageError("give --attributes (several per device) or --domain or --bounds")
    if pairs and attributes is None:
        raise click.UsageError("--pair applies only with --attributes")
    if bounds is not None and labels:
        raise click.UsageError("give either --domain/--domain-file or --bounds LOW HIGH, not both")
    if max_length is not None and (labels or bounds is not None or attributes is not None):
        raise click.UsageError(
            "give --max-length (an open-domain campaign) without --domain, --bounds or --attributes"
        )
    if attributes is None and bounds is None and not labels and max_length is None:
        raise click.UsageError(
            "give the value labels: --domain a,b,c or --domain-file FILE "
            "(or --bounds LOW HIGH for a numeric campaign, --max-length BYTES for strings)"
        )
    body: dict[str, Any] = {
        "id": campaign_id,
        "description": description,
        "mechanism": mechanism,
        "window": window,
    }
    if max_length is not None:
        body["max_length"] = max_length
    elif attributes is not None:
        body["attributes"] = attributes
        if pairs:
            body["pairs"] = [[x.strip() for x in p.split(",")] for p in pairs]
    elif bounds is not None:
        body["bounds"] = [_number(b) for b in bounds]
    else:
        body["domain"] = labels
    if epsilon is not None:
        body["epsilon"] = epsilon
    if horizon_days is not None:
        body["horizon_days"] = horizon_days
    if min_reports is not None:
        body["min_reports"] = min_reports
    if retention_days is not None:
        body["retention_days"] = retention_days
    if shuffler is not None:
        body["shuffler"] = shuffler
    if expected is not None:
        body["expected"] = _expected(expected, numeric=bounds is not None)
    if params:
        body["params"] = {}
        for item in params:
            key, sep, value = item.partition("=")
            if not sep:
                raise click.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--param")
            try:
                body["params"][key] = json.loads(value)
            except (ValueError, RecursionError):  # a plain string (the campaign rules check it)
                body["params"][key] = value
    target = _target(db, url, token, ("admin",))
    try:
        item = target.create(body)
    finally:
        target.close()
    if fmt == "json":
        emit_json(item)
    else:
        click.echo(table(_HEADERS[:5], [_row(item)[:5]]))
        click.echo(f"digest {printable(str(item['digest']))}")


@campaign_group.command("list")
@_where
@FORMAT_OPTION
def list_command(db: str | None, url: str | None, token: str | None, fmt: str) -> None:
    """Every campaign with its report count and archive date.

    Example:

    \b
        ldp campaign list --db ldp.db
        LDP_ANALYST_TOKEN=... ldp campaign list --url http://127.0.0.1:8750 --format json
    """
    target = _target(db, url, token, ("analyst", "admin"))
    try:
        items = target.list()
    finally:
        target.close()
    if fmt == "json":
        emit_json({"campaigns": items})
    elif not items:
        click.echo("no campaigns yet (create one: ldp campaign create ID --domain a,b,c)")
    else:
        click.echo(table(_HEADERS, [_row(i) for i in items], right={2, 3, 5}))


@campaign_group.command("show")
@click.argument("campaign_id")
@_where
@FORMAT_OPTION
def show_command(
    campaign_id: str, db: str | None, url: str | None, token: str | None, fmt: str
) -> None:
    """One campaign: its settings, digest, report count and archive date.

    Example:

    \b
        ldp campaign show occupation --db ldp.db
        LDP_ANALYST_TOKEN=... ldp campaign show occupation --url http://127.0.0.1:8750 --format json
    """
    target = _target(db, url, token, ("analyst", "admin"))
    # The store's own ceiling, however the store was named (--db, LDP_DATABASE or
    # LDP_DATABASE_FILE): with the variables it was not applied ("90" where 40 days are kept).
    try:
        ceiling = _ceiling() if isinstance(target, _Store) else None
        item = target.show(campaign_id)
    finally:
        target.close()
    if fmt == "json":
        emit_json(item)
        return
    mech = item["mechanism"]
    rows = [
        ["id", item["id"]],
        ["description", item["description"]],
        ["mechanism", f"{mech['mechanism']} {json.dumps(mech['params'])}"],
        ["epsilon", f"{mech['epsilon']} (realised {item['realised_epsilon']:.6g})"],
        (
            ["domain", f"{len(mech['domain'])} values: {', '.join(mech['domain'][:12])}"]
            if "domain" in mech
            else ["attributes", str(len(mech["attributes"]))]
            if "attributes" in mech
            else ["max_length", f"{mech['max_length']} bytes of UTF-8 (open domain: any string)"]
            if "max_length" in mech
            else ["bounds", f"[{mech['bounds'][0]}, {mech['bounds'][1]}] ({item.get('kind')})"]
        ),
        *(
            [[f"  {name}", _attribute_text(spec)] for name, spec in mech["attributes"].items()]
            if "attributes" in mech
            else []
        ),
        *(
            [["pairs", ", ".join(" x ".join(p) for p in mech["params"]["pairs"]) or "-"]]
            if "attributes" in mech
            else []
        ),
        ["window", item["window"]],
        ["horizon_days", item["horizon_days"]],
        ["min_reports", item["min_reports"]],
        ["shuffler", item.get("shuffler") or "none (devices upload directly)"],
        ["created", item["created"]],
        ["reports", item.get("reports", "")],
        ["retention_days", _retention_text(item, ceiling)],
        ["stored_reports", _stored_text(item, "stored_reports")],
        ["stored_bytes", _stored_text(item, "stored_bytes")],
        ["reports_deleted_before", item.get("reports_deleted_before") or "(none deleted)"],
        ["archived", item.get("archived") or "no (takes reports)"],
        ["digest", item["digest"]],
    ]
    click.echo(table(["field", "value"], rows, right=set()))


def _stored_text(item: dict[str, Any], field: str) -> str:
    """A ``stored_reports`` / ``stored_bytes`` row: the figure and that it is the last retention
    sweep's measurement, not a live count (docs/COLLECTOR.md "Retention"). ``stored_reports 0``
    beside ``reports 9`` read as reports lost; where the campaign has reports, none stored and
    none deleted by retention (ingest stores every report it tallies), no sweep has run since
    its first report, and the row says so.
    """
    value = item.get(field)
    if value is None:
        return ""
    unmeasured = (
        item.get("reports", 0) > 0
        and item.get("stored_reports") == 0
        and item.get("reports_deleted_before") is None
    )
    if unmeasured:
        return f"{value} (not measured yet: no retention sweep has run since its first report)"
    return f"{value} (as measured by the last retention sweep)"


def _ceiling() -> int | None:
    """``LDP_MAX_RETENTION_DAYS`` (or its _FILE) of this environment, read as the collector
    and ``ldp retention run`` read it (with ``--db`` the sweeps there apply it)."""
    from collector.errors import ConfigError
    from collector.settings import setting_from_environment

    try:
        ceiling: int | None = setting_from_environment("max_retention_days")
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    return ceiling


def _retention_text(item: dict[str, Any], ceiling: int | None) -> str:
    """The ``retention_days`` row: the campaign's own value and, where the server-wide ceiling
    shortens it, the days actually kept (``collector.retention.keep_days``). A campaign created
    before retention was shown as kept "forever" beside the date retention had deleted its
    reports before: a ceiling keeps it that long."""
    days = item.get("retention_days")
    if ceiling is None:
        if days is None:
            return (
                "none (created before retention): kept forever, or LDP_MAX_RETENTION_DAYS "
                "days where the collector sets that ceiling"
            )
        return str(days)
    from collector.retention import kept_days

    kept = kept_days(days, int(item["horizon_days"]), ceiling)
    if days is None:
        return f"none (created before retention): kept {kept} days (LDP_MAX_RETENTION_DAYS)"
    if kept != days:
        return f"{days} (kept {kept} days: LDP_MAX_RETENTION_DAYS={ceiling})"
    return str(days)


@campaign_group.command("archive")
@click.argument("campaign_id")
@_where
def archive_command(campaign_id: str, db: str | None, url: str | None, token: str | None) -> None:
    """Archive a campaign: uploads are refused from now on (410 campaign_archived), its
    estimates stay readable. Cannot be undone; archiving again keeps the first date.

    Example:

    \b
        ldp campaign archive occupation --db ldp.db
        LDP_ADMIN_TOKEN=... ldp campaign archive occupation --url http://127.0.0.1:8750
    """
    target = _target(db, url, token, ("admin",))
    try:
        item = target.archive(campaign_id)
    finally:
        target.close()
    click.echo(
        f"campaign {item['id']!r} archived on {printable(str(item['archived']))}: uploads now "
        "answer 410 campaign_archived; estimates stay readable (ldp estimate)"
    )

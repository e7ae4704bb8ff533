"""Campaigns: validating a create request, the resolved (immutable) record, digest and windows.

A campaign fixes everything a device needs to perturb (the resolved mechanism config) and how
the collector files reports (window size, acceptance horizon). A categorical campaign declares
a ``domain`` (value labels); a numeric one declares ``bounds`` ``[low, high]`` instead, and its
mechanism (``auto``: the mean mechanism of smallest worst-case variance) estimates a mean or a
distribution; the bounds are part of the mechanism config, hence of the digest. An open-domain
one declares ``max_length`` (bytes of UTF-8 a value may hold) and its sketch's public
parameters instead of a domain (``pem``, ``cms``, ``hcms``). Its ``digest``
covers ``id``, ``mechanism``, ``window`` and ``horizon_days``; every upload names it, so a
device holding a stale or forged configuration cannot add reports to the tallies.
"""

from __future__ import annotations

import datetime as dt
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any
from urllib.parse import urlsplit

from client_sdk.config_cache import campaign_digest
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import (
    NUMERIC_MECHANISMS,
    OPEN_MECHANISMS,
    AnyMechanism,
    OpenDomainMechanism,
    create,
    from_config,
)
from client_sdk.mechanisms.numeric.square_wave import SquareWave
from client_sdk.mechanisms.validation import MAX_LABEL_LENGTH
from collector import clock
from collector.errors import APIError

SLUG = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
#: Characters no value label may hold (C0 controls, DEL); LABEL_PATTERN is the same set for
#: the OpenAPI document.
CONTROL = re.compile(r"[\x00-\x1f\x7f]")
LABEL_PATTERN = "^[^\\u0000-\\u001f\\u007f]*$"
WINDOWS = ("day", "week")
DEFAULT_WINDOW = "day"
DEFAULT_HORIZON_DAYS = 30
MAX_HORIZON_DAYS = 3660
DEFAULT_MIN_REPORTS = 1
MAX_MIN_REPORTS = 10**12
MAX_DESCRIPTION = 2000
#: Longest ``shuffler`` URL a campaign may name.
MAX_SHUFFLER_URL = 2000
#: Days a new campaign keeps its reports when ``retention_days`` is not given (never fewer
#: than its ``horizon_days``). Campaigns created before retention existed keep theirs until the
#: server-wide ceiling ``LDP_MAX_RETENTION_DAYS`` (unset: forever).
DEFAULT_RETENTION_DAYS = 90
MAX_RETENTION_DAYS = 36600
#: A report's day may be this many days after the collector's UTC date (device clock skew).
CLOCK_SKEW_DAYS = 1
#: Most integers an open-domain campaign's tally (its sketch) may hold: every window keeps one
#: and every upload adds to it (hcms's default 2 x 16 x 65,536 is the largest accepted).
MAX_OPEN_TALLY_SIZE = 1 << 21
#: Largest input grid of a ``square_wave`` campaign (the mechanism takes up to 2**24). Its
#: estimate (EMS over the grid with a search for the number of refinement steps) costs about the
#: square of the grid: 2 s at the default 512, 7 to 21 s at 2048, 33 s at 4096, and at 2**24
#: no answer after 5 minutes (1.5 GB), every upload then taking 26 s to tally a window of
#: 25 million counts. Larger grids made every estimate of the campaign hang a request thread.
MAX_SQUARE_WAVE_GRID = 2048

_CREATE_FIELDS = {
    "attributes",
    "pairs",
    "bounds",
    "expected",
    "id",
    "max_length",
    "description",
    "domain",
    "mechanism",
    "epsilon",
    "params",
    "window",
    "horizon_days",
    "min_reports",
    "shuffler",
    "retention_days",
}


def _bad(message: str) -> APIError:
    return APIError(400, "invalid_campaign", message)


def _int_field(body: Mapping[str, Any], name: str, default: int, lo: int, hi: int) -> int:
    value = body.get(name, default)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise _bad(f"'{name}' must be an integer in [{lo}, {hi}], got {value!r}")
    return value


@dataclass(frozen=True)
class Campaign:
    """A stored campaign: immutable once created."""

    id: str
    description: str
    mechanism_config: dict[str, Any]
    window: str
    horizon_days: int
    min_reports: int
    created: str
    #: Optional: the URL of the ``ldp shuffle`` devices send this campaign's reports through
    #: (sealed, one per message); its estimates then state a central (ε, δ). Not in the digest.
    shuffler: str | None = None
    #: Days reports are kept (docs/COLLECTOR.md "Retention"); None: created before retention
    #: existed, kept until the server-wide ceiling. Not in the digest: devices never need it.
    retention_days: int | None = None

    @cached_property
    def digest(self) -> str:
        """sha256 hex of the canonical JSON of id, mechanism, window and horizon_days: the
        device's own definition (``client_sdk.config_cache.campaign_digest``), which every
        device recomputes from the served config and refuses a config whose digest differs."""
        return campaign_digest(self.id, self.mechanism_config, self.window, self.horizon_days)

    @property
    def kind(self) -> str:
        """What the campaign estimates: ``frequency``, ``mean``, ``distribution``, ``multi`` or
        ``open_domain``."""
        return self.mechanism.kind

    @cached_property
    def mechanism(self) -> AnyMechanism:
        """The mechanism rebuilt from its stored config (built once per process and campaign)."""
        return from_config(self.mechanism_config)

    def window_of(self, day: dt.date) -> dt.date:
        """The start of the window a report made on ``day`` is filed under."""
        if self.window == "week":
            return day - dt.timedelta(days=day.weekday())
        return day

    def resource(self) -> dict[str, Any]:
        """The JSON resource served by ``GET /v1/campaigns/{id}``.

        Numeric campaigns also carry ``kind`` (``mean``/``distribution``) and ``bounds``;
        open-domain ones ``kind`` ``open_domain`` and ``max_length``.
        """
        resource: dict[str, Any] = {
            "id": self.id,
            "description": self.description,
            "window": self.window,
            "horizon_days": self.horizon_days,
            "min_reports": self.min_reports,
            "retention_days": self.retention_days,
            "created": self.created,
            "mechanism": self.mechanism_config,
            "realised_epsilon": self.mechanism.realised_epsilon,
            "digest": self.digest,
        }
        if self.kind == "multi":  # several attributes per device (docs/MECHANISMS.md §22)
            resource["kind"] = self.kind
            resource["attributes"] = self.mechanism_config["attributes"]
            resource["pairs"] = self.mechanism_config["params"]["pairs"]
        elif self.kind == "open_domain":  # strings nobody listed (docs/MECHANISMS.md §24)
            resource["kind"] = self.kind
            resource["max_length"] = self.mechanism_config["max_length"]
        elif self.kind != "frequency":  # categorical resources keep their exact shape
            resource["kind"] = self.kind
            resource["bounds"] = self.mechanism_config["bounds"]
        if self.shuffler:
            resource["shuffler"] = self.shuffler
        return resource

    def to_record(self) -> dict[str, Any]:
        """What storage keeps (everything but derived fields)."""
        record: dict[str, Any] = {
            "id": self.id,
            "description": self.description,
            "mechanism": self.mechanism_config,
            "window": self.window,
            "horizon_days": self.horizon_days,
            "min_reports": self.min_reports,
            "created": self.created,
        }
        if self.shuffler:
            record["shuffler"] = self.shuffler
        if self.retention_days is not None:
            record["retention_days"] = self.retention_days
        return record

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Campaign:
        return cls(
            id=record["id"],
            description=record["description"],
            mechanism_config=dict(record["mechanism"]),
            window=record["window"],
            horizon_days=int(record["horizon_days"]),
            min_reports=int(record["min_reports"]),
            created=record["created"],
            shuffler=record.get("shuffler"),
            retention_days=(
                int(record["retention_days"]) if record.get("retention_days") is not None else None
            ),
        )


def campaign_from_request(
    body: object,
    *,
    today: dt.date | None = None,
    max_retention_days: int | None = None,
    sealed_key: bool | None = None,
) -> Campaign:
    """Validate a ``POST /v1/campaigns`` body and resolve its mechanism (``auto``, presets).

    ``retention_days`` defaults to ``max(DEFAULT_RETENTION_DAYS, horizon_days)`` (capped by
    ``max_retention_days``, the server's ``LDP_MAX_RETENTION_DAYS``); it may not be below
    ``horizon_days`` (a deleted report's id could then be replayed and counted again) nor
    above the ceiling.

    ``shuffler`` must be an absolute http(s) URL with a host (:func:`shuffler_url`), and
    ``sealed_key`` says whether the collector has a sealed key (``LDP_SEALED_KEY_FILE``):
    False refuses a ``shuffler`` (its devices could never send a report), None does not check.

    Raises :class:`APIError` 400 naming the field, the rule and the value.
    """
    if not isinstance(body, dict):
        raise _bad(f"the body must be a JSON object, got {type(body).__name__}")
    unknown = sorted(set(body) - _CREATE_FIELDS)
    if unknown:
        raise _bad(f"unknown field(s) {unknown}; allowed: {sorted(_CREATE_FIELDS)}")
    cid = body.get("id")
    if not isinstance(cid, str) or not SLUG.fullmatch(cid):
        raise _bad(f"'id' must be a slug matching [a-z0-9][a-z0-9_-]{{0,63}}, got {cid!r}")
    description = body.get("description", "")
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION:
        raise _bad(f"'description' must be a string of at most {MAX_DESCRIPTION} characters")
    window = body.get("window", DEFAULT_WINDOW)
    if window not in WINDOWS:
        raise _bad(f"'window' must be one of {list(WINDOWS)}, got {window!r}")
    horizon = _int_field(body, "horizon_days", DEFAULT_HORIZON_DAYS, 1, MAX_HORIZON_DAYS)
    min_reports = _int_field(body, "min_reports", DEFAULT_MIN_REPORTS, 1, MAX_MIN_REPORTS)
    default_retention = max(DEFAULT_RETENTION_DAYS, horizon)
    if max_retention_days is not None:
        default_retention = max(min(default_retention, max_retention_days), horizon)
    retention = _int_field(body, "retention_days", default_retention, 1, MAX_RETENTION_DAYS)
    if retention < horizon:
        raise _bad(
            f"'retention_days' ({retention}) must be >= 'horizon_days' ({horizon}): reports "
            "are kept at least as long as a replay of them could be accepted"
        )
    if max_retention_days is not None and retention > max_retention_days:
        if "retention_days" not in body:
            # Only the horizon can push the default past the ceiling: say so, and what to pass.
            given = "" if "horizon_days" in body else f" (its default, {DEFAULT_HORIZON_DAYS})"
            raise _bad(
                f"'retention_days' was not given, so it defaults to the campaign's "
                f"'horizon_days'{given} of {horizon} (reports are kept at least as long as a "
                f"replay of them could be accepted), which exceeds this server's ceiling "
                f"LDP_MAX_RETENTION_DAYS={max_retention_days}: pass 'horizon_days' of at most "
                f"{max_retention_days} (ldp campaign create: --horizon-days)"
            )
        raise _bad(
            f"'retention_days' ({retention}) exceeds this server's ceiling "
            f"LDP_MAX_RETENTION_DAYS={max_retention_days}"
        )
    name = body.get("mechanism", "auto")
    if not isinstance(name, str):
        raise _bad(f"'mechanism' must be a mechanism name (a string), got {name!r}")
    epsilon = body.get("epsilon")
    params = body.get("params") or {}
    if not isinstance(params, dict):
        raise _bad(f"'params' must be an object, got {type(params).__name__}")
    if epsilon is not None and (isinstance(epsilon, bool) or not isinstance(epsilon, int | float)):
        raise _bad(f"'epsilon' must be a number, got {epsilon!r}")
    if "max_length" in body:
        mech = _open_mechanism(body, name, epsilon, params)
    elif "attributes" in body:
        mech = _multi_mechanism(body, name, epsilon, params)
    elif "pairs" in body:
        raise _bad("'pairs' apply only to a campaign with 'attributes'")
    elif "bounds" in body:
        mech = _numeric_mechanism(body, name, epsilon, params)
    else:
        mech = _categorical_mechanism(body, name, epsilon, params)
    shuffler = body.get("shuffler")
    if shuffler is not None:
        shuffler = shuffler_url(shuffler)
        if sealed_key is False:
            raise APIError(
                400,
                "sealed_not_configured",
                "this collector has no sealed key configured, so the devices of a campaign "
                "with a 'shuffler' could never send a report: restart ldp serve with "
                "LDP_SEALED_KEY_FILE=/path/to/sealed.key (the key is created there, mode 0600, "
                "if missing; ldp serve --dev makes none) and PyNaCl installed "
                "(pip install 'ldp-telemetry[shuffle]'), see docs/SHUFFLE.md; or create the "
                "campaign without 'shuffler'",
            )
    today = today or clock.today()
    return Campaign(
        id=cid,
        description=description,
        mechanism_config=mech.config(),
        window=window,
        horizon_days=horizon,
        min_reports=min_reports,
        created=today.isoformat(),
        shuffler=shuffler,
        retention_days=retention,
    )


def shuffler_url(value: object) -> str:
    """``value`` if it is a usable ``shuffler``: an absolute ``http://`` or ``https://`` URL
    with a host (and a valid port, if any), no whitespace or control character, no userinfo
    (``user@``) and no fragment, at most ``MAX_SHUFFLER_URL`` characters; else a 400."""
    why = None
    if not isinstance(value, str):
        why = "a string"
    elif len(value) > MAX_SHUFFLER_URL:
        why = f"at most {MAX_SHUFFLER_URL} characters"
    elif not value.startswith(("http://", "https://")):
        why = "an absolute URL starting http:// or https://"
    elif CONTROL.search(value) or any(c.isspace() for c in value):
        why = "free of whitespace and control characters"
    else:
        try:
            parts = urlsplit(value)
            port_ok = parts.port is None or parts.port > 0
        except ValueError:  # an unclosed [IPv6 literal, a port that is not a number or > 65535
            parts, port_ok = None, False
        if parts is None or not port_ok:
            why = "a URL whose host and port parse (port 1 to 65535)"
        elif not parts.hostname:
            why = "a URL with a host (http://HOST[:PORT])"
        elif "@" in parts.netloc:
            why = "a URL without user information (user@)"
        elif "#" in value:
            why = "a URL without a fragment (#)"
    if why is not None:
        shown = repr(value)
        shown = shown[:100] + "..." if len(shown) > 100 else shown
        raise _bad(f"'shuffler' must be the http(s) URL of an ldp shuffle ({why}), got {shown}")
    assert isinstance(value, str)
    return value


def _categorical_mechanism(
    body: Mapping[str, Any], name: str, epsilon: Any, params: dict[str, Any]
) -> AnyMechanism:
    domain = body.get("domain")
    if not isinstance(domain, list) or not all(isinstance(v, str) for v in domain):
        hint = (
            f"; {name!r} is a numeric mechanism: give 'bounds': [low, high] instead"
            if name in NUMERIC_MECHANISMS
            else " (or 'bounds': [low, high] for a numeric campaign)"
        )
        raise _bad(f"'domain' must be a list of value labels (strings){hint}")
    _check_labels(domain, "domain ")
    # Optional: the frequencies 'auto' averages its criterion over (uniform when absent). The
    # resolved config holds the chosen mechanism and parameters, so devices need not see it.
    extra = {"expected": body["expected"]} if body.get("expected") is not None else {}
    return _create(name, epsilon, params, domain=domain, **extra)


def _create(name: str, epsilon: Any, params: dict[str, Any], **kind: Any) -> AnyMechanism:
    """``create`` for a campaign body: whatever the constructor refuses is the client's 400."""
    try:
        return create(name, epsilon=epsilon, **kind, **params)
    except InvalidParameter as exc:
        raise _bad(f"invalid mechanism settings: {exc}") from None
    except (TypeError, ValueError, ArithmeticError) as exc:
        raise _bad(f"invalid mechanism parameters: {exc}") from None


def _numeric_mechanism(
    body: Mapping[str, Any], name: str, epsilon: Any, params: dict[str, Any]
) -> AnyMechanism:
    """A numeric campaign: ``bounds`` ``[low, high]``, finite numbers with ``low < high``."""
    bounds = body["bounds"]
    if "domain" in body:
        raise _bad("give either 'domain' (a categorical campaign) or 'bounds', not both")
    if (
        not isinstance(bounds, list)
        or len(bounds) != 2
        or any(isinstance(b, bool) or not isinstance(b, int | float) for b in bounds)
    ):
        raise _bad(f"'bounds' must be a list [low, high] of two numbers, got {bounds!r}")
    if epsilon is None:
        raise _bad("a numeric campaign needs 'epsilon' (a number > 0)")
    # Optional, with 'auto': {mean, sd} of the values, which auto averages the mean's variance
    # over (docs/MECHANISMS.md §19.3); the resolved config holds only the chosen mechanism.
    extra = {"expected": body["expected"]} if body.get("expected") is not None else {}
    mech = _create(name, epsilon, params, bounds=tuple(bounds), **extra)
    grid = mech.grid.size if isinstance(mech, SquareWave) else 0
    if grid > MAX_SQUARE_WAVE_GRID:
        raise _bad(
            f"a square_wave grid of {grid:,} steps is more than this collector estimates "
            f"({MAX_SQUARE_WAVE_GRID:,}: the estimate's cost grows with the square of the grid); "
            "choose a smaller 'grid' in 'params' (default 512)"
        )
    return mech


def _multi_mechanism(
    body: Mapping[str, Any], name: str, epsilon: Any, params: dict[str, Any]
) -> AnyMechanism:
    """A multi-attribute campaign (docs/MECHANISMS.md §22): ``attributes`` maps each name to a
    list of labels or ``{"bounds": [low, high]}``; optional ``pairs`` of attribute names get
    joint tables; ``mechanism`` is ``spl``, ``smp``, ``rsfd`` or ``auto``. One report per
    device covers every attribute under the one ``epsilon``. A numeric attribute may declare
    its values, ``{"bounds": [...], "expected": {"mean": m, "sd": s}}``: they choose its mean
    mechanism and weigh it in ``auto``'s choice; the resolved config (and so the digest) holds
    the chosen mechanisms, not the declaration."""
    attributes = body["attributes"]
    if "expected" in body:
        raise _bad(
            "a campaign with 'attributes' takes no top-level 'expected': a numeric attribute "
            'declares its own values, "age": {"bounds": [17, 90], "expected": {"mean": 38.6, '
            '"sd": 13.6}}'
        )
    for other in ("domain", "bounds"):
        if other in body:
            raise _bad(f"a campaign with 'attributes' takes no '{other}' (give it per attribute)")
    if not isinstance(attributes, dict):
        raise _bad(
            "'attributes' must be an object: name -> list of labels or {\"bounds\": [low, high]}"
        )
    for attr, spec in attributes.items():
        labels = spec.get("domain") if isinstance(spec, dict) else spec
        if isinstance(labels, list):
            _check_labels(labels, f"attribute {attr!r}: ")
        if not isinstance(attr, str) or CONTROL.search(attr) or "|" in attr:
            raise _bad(f"attribute name {attr!r}: no control characters and no '|'")
    _check_labels(list(attributes), "attribute names: ", what="names")
    if epsilon is None:
        raise _bad("a campaign with 'attributes' needs 'epsilon' (a number > 0)")
    pairs = body.get("pairs")
    if pairs is not None and not isinstance(pairs, list):
        raise _bad("'pairs' must be a list of [attribute, attribute]")
    _check_pair_labels(attributes, pairs or [])
    return _create(name, epsilon, params, attributes=attributes, pairs=pairs)


def _check_labels(labels: list[Any], where: str, what: str = "labels") -> None:
    """Labels an admin gives at creation: no control character (they are shown in tables, CSV
    and the dashboard), and no two that are one text in two Unicode forms (NFC and NFD of
    "café": two rows that look alike, each counting the devices whose app sends that form)."""
    seen: dict[str, str] = {}
    for i, label in enumerate(labels):
        if not isinstance(label, str):
            continue  # the mechanism refuses it, with its message
        if CONTROL.search(label):
            raise _bad(
                f"{where}label #{i} contains a control character (NUL, a line break, ...): "
                "labels are shown in tables, CSV and the dashboard"
            )
        first = seen.setdefault(unicodedata.normalize("NFC", label), label)
        if first != label:
            raise _bad(
                f"{where}{what} {first!r} and {label!r} are the same text in two Unicode "
                "forms (NFC/NFD): they would show alike; keep one"
            )


def _check_pair_labels(attributes: Mapping[str, Any], pairs: list[Any]) -> None:
    """A categorical pair's joint labels are ``"x|y"``: refused here, naming the pair, where
    a ``|`` in a label makes two joint labels one (``"a|b" x "c"`` and ``"a" x "b|c"``) or a
    joint label runs past the label limit (the mechanism's message named a label the admin
    never wrote, "domain label #6 is 202 characters")."""

    def labels_of(name: object) -> list[str] | None:
        spec = attributes.get(name) if isinstance(name, str) else None
        labels = spec.get("domain") if isinstance(spec, dict) else spec
        ok = isinstance(labels, list) and all(isinstance(v, str) for v in labels)
        return labels if ok else None

    for pair in pairs:
        if not isinstance(pair, list | tuple) or len(pair) != 2:
            continue  # the mechanism refuses it, with its message
        a, b = pair
        la, lb = labels_of(a), labels_of(b)
        if la is None or lb is None or not la or not lb:
            continue
        for name, labels in ((a, la), (b, lb)):
            bad = next((v for v in labels if "|" in v), None)
            if bad is not None:
                raise _bad(
                    f"pair [{a!r}, {b!r}]: label {bad!r} of {name!r} contains '|', which joins "
                    "a pair's labels in its joint table ('x|y'); rename the label or drop the "
                    "pair"
                )
        x, y = max(la, key=len), max(lb, key=len)
        if len(x) + 1 + len(y) > MAX_LABEL_LENGTH:
            raise _bad(
                f"pair [{a!r}, {b!r}]: the joint label of {x[:40]!r} and {y[:40]!r} would be "
                f"{len(x) + 1 + len(y)} characters ('x|y'), over the {MAX_LABEL_LENGTH} a "
                f"label may have; shorten the labels of {a!r} or {b!r}, or drop the pair"
            )


def _open_mechanism(
    body: Mapping[str, Any], name: str, epsilon: Any, params: dict[str, Any]
) -> AnyMechanism:
    """An open-domain campaign (docs/MECHANISMS.md §24): ``max_length`` (bytes of UTF-8 after
    NFC) instead of a domain; ``mechanism`` ``pem`` (discovers heavy hitters; also ``auto``),
    ``cms`` or ``hcms`` (count candidate strings only); ``params`` its public sketch
    parameters (``width``, ``depth``; ``flips``; pem's ``oracle``). The hash functions are
    fixed by the mechanism and these parameters, so the config is all a device needs."""
    for other in ("domain", "bounds", "attributes", "pairs", "expected"):
        if other in body:
            raise _bad(
                f"an open-domain campaign (with 'max_length') takes no '{other}': devices "
                "report any string of at most max_length bytes"
            )
    if name == "auto":
        name = "pem"
    if name not in OPEN_MECHANISMS:
        raise _bad(
            f"unknown open-domain mechanism {name!r}; known: {', '.join(OPEN_MECHANISMS)} "
            "(pem discovers heavy hitters; cms and hcms count candidate strings)"
        )
    if epsilon is None:
        raise _bad("an open-domain campaign needs 'epsilon' (a number > 0)")
    max_length = body["max_length"]
    mech = _create(name, epsilon, params, max_length=max_length)
    assert isinstance(mech, OpenDomainMechanism)
    if mech.tally_size > MAX_OPEN_TALLY_SIZE:
        raise _bad(
            f"the {name} sketch would hold {mech.tally_size:,} counts per window, more than "
            f"this collector keeps ({MAX_OPEN_TALLY_SIZE:,}): choose a smaller width or depth"
            + (" or max_length" if name == "pem" else "")
        )
    return mech

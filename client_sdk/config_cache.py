"""Campaign configurations: fetched once, cached on disk, revalidated with ETags.

The cache is ``state_dir/campaigns/<id>.json`` (the collector's campaign resource and its ETag),
kept apart from the state file so that the file holding reports and the ledger contains no
domain label at all.

A campaign is immutable on the collector, so a cached configuration stays valid; the client
revalidates it in the background (``If-None-Match``) and refetches it when an upload answers
409 ``stale_config``. Offline, the cache is used.

Every config, fetched or read from the cache, is verified before use (:meth:`CampaignConfig.
from_resource`): its ``mechanism`` holds nothing the device's mechanism does not use, and its
``digest``, which every upload carries back to the collector, is the config's own
(:func:`campaign_digest`). A collector can therefore not tag one device with a digest of its
own, nor vary the config per device without changing what the device runs (the served
mechanism object must be exactly its ``config()``); with ``pins`` the
app fixes the digests it accepts outright.

``report`` never fetches: it uses :meth:`ConfigCache.peek` (memory or disk only). A campaign not
cached yet is put on the *wanted* list, which the upload thread fetches in the background; a
campaign the collector answered 404 for is remembered as *gone* (``report`` then raises
:class:`UnknownCampaign`). :meth:`ConfigCache.get` (used by ``prefetch``) is the only blocking
fetch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import re
import secrets
import threading
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from client_sdk.errors import (
    AuthenticationFailed,
    InvalidParameter,
    StateUnusable,
    TransportError,
    UnknownCampaign,
)
from client_sdk.ledger import WINDOWS
from client_sdk.mechanisms import AnyMechanism, from_config
from client_sdk.state import StateDB
from client_sdk.transport import (
    AuthError,
    CampaignGone,
    PermanentError,
    Transport,
)

log = logging.getLogger(__name__)

CACHE_DIR = "campaigns"
#: Campaign ids are slugs (docs/HTTP_API.md); only those become file names.
CAMPAIGN_ID = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
#: Seconds before an unusable config is fetched again in the background (doubling per unusable
#: answer in a row, at most the cap); ``prefetch`` fetches at once.
UNUSABLE_REFETCH_BASE = 1.0
UNUSABLE_REFETCH_CAP = 300.0
#: Longest config digest accepted from the collector (its own are sha256 hex: 64 characters).
MAX_DIGEST_CHARS = 128
#: A digest the app pins: the collector's, sha256 hex in lower case.
PINNED_DIGEST = re.compile(r"[0-9a-f]{64}")
#: Characters of a collector's value quoted in a refusal.
_SHOWN_CHARS = 60


def campaign_digest(
    campaign_id: str, mechanism: Mapping[str, Any], window: str, horizon_days: int
) -> str:
    """The digest of a campaign config: sha256 hex of the canonical JSON (sorted keys, no
    spaces, UTF-8) of ``id``, ``mechanism``, ``window`` and ``horizon_days``.

    The one definition: the collector names its campaigns by it
    (``collector.campaigns.Campaign.digest``) and the device recomputes it from the config it
    was served, so a digest can only ever be a function of the config. Raises ``ValueError``
    (``UnicodeEncodeError``) for text that is no UTF-8 (a lone surrogate)."""
    core = {
        "id": campaign_id,
        "mechanism": mechanism,
        "window": window,
        "horizon_days": horizon_days,
    }
    blob = json.dumps(core, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


def _canonical(value: object) -> str:
    """``value`` as canonical JSON: type-strict (``1``, ``1.0`` and ``true`` differ)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + "..."


def unused_setting(
    served: Mapping[str, Any], used: Mapping[str, Any], path: str = ""
) -> str | None:
    """Why the served mechanism object is not exactly the device's mechanism's own config
    (``used``: its ``config()``), or None when it is: the same keys, recursively in objects,
    with the identical canonical JSON values (lists compared whole, type-strict).

    Anything else is room for a collector to vary, per device, a config that runs the same on
    the device: an ignored key, ``1`` for ``1.0``, or a key with a default left out (allowed
    at first: 3 variants of one ``duchi`` campaign, 32 of an ``spl`` with a numeric
    attribute). Every collector release since the stores ``tests/test_storage_upgrade.py``
    upgrades serves exactly ``config()`` (checked for every mechanism kind and those stores)."""
    for key in used:
        if key not in served:
            where = f"{path}.{key}" if path else str(key)
            return (
                f"'mechanism.{where}' is missing where the mechanism built from it has "
                f"{_shown(used[key])} (the config must be exactly the mechanism's own)"
            )
    for key, value in served.items():
        where = f"{path}.{key}" if path else str(key)
        if key not in used:
            return f"'mechanism.{where}' is no setting of the mechanism built from it"
        expected = used[key]
        if isinstance(value, Mapping) and isinstance(expected, Mapping):
            why = unused_setting(value, expected, where)
            if why is not None:
                return why
        elif _canonical(value) != _canonical(expected):
            return (
                f"'mechanism.{where}' is {_shown(value)} where the mechanism built from it "
                f"has {_shown(expected)} (the config must be exactly the mechanism's own)"
            )
    return None


@dataclass(frozen=True)
class Pin:
    """What the app accepts for one campaign: its config digests and, when pinned, the
    shuffler it must name (``""``: none, its reports go straight to the collector)."""

    digests: frozenset[str]
    shuffler: str | None = None


def _pinned_shuffler(campaign: str, value: object) -> str:
    if value is None or value == "":
        return ""
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        raise InvalidParameter(
            f"pins for campaign {campaign!r}: 'shuffler' must be the shuffler's http(s) URL, or "
            f"None for a campaign sent straight to the collector, got {_shown(value)}"
        )
    return value.rstrip("/")


def check_pins(pins: object) -> dict[str, Pin]:
    """``pins`` (a mapping campaign id -> a digest, a collection of digests, or ``{"digest":
    digest(s), "shuffler": url or None}``) as campaign id -> :class:`Pin`; raises
    :class:`InvalidParameter` naming the campaign whose pin is not 64 lowercase hex digits (or
    that pins nothing, or a shuffler that is not a URL). None: no pins."""
    if pins is None:
        return {}
    if not isinstance(pins, Mapping):
        raise InvalidParameter(
            f"pins must be a mapping campaign id -> digest(s), got {type(pins).__name__}"
        )
    out: dict[str, Pin] = {}
    for campaign, pinned in pins.items():
        try:
            check_campaign_id(campaign)
        except InvalidParameter as exc:
            raise InvalidParameter(f"pins: {exc}") from None
        shuffler: str | None = None
        if isinstance(pinned, Pin):
            shuffler, pinned = pinned.shuffler, sorted(pinned.digests)
        elif isinstance(pinned, Mapping):
            unknown = sorted(set(map(str, pinned)) - {"digest", "shuffler"})
            if unknown or "digest" not in pinned:
                raise InvalidParameter(
                    f"pins for campaign {campaign!r}: a mapping takes 'digest' (required) and "
                    f"'shuffler', got keys {sorted(map(str, pinned))}"
                )
            if "shuffler" in pinned:
                shuffler = _pinned_shuffler(campaign, pinned["shuffler"])
            pinned = pinned["digest"]
        digests = pinned
        items = [digests] if isinstance(digests, str) else digests
        if not isinstance(items, Collection) or isinstance(items, (bytes, Mapping)):
            raise InvalidParameter(
                f"pins for campaign {campaign!r} must be a digest or a collection of digests "
                f"(64 lowercase hex digits each, as `ldp campaign show` prints), got "
                f"{type(digests).__name__}"
            )
        for digest in items:
            if not isinstance(digest, str) or not PINNED_DIGEST.fullmatch(digest):
                raise InvalidParameter(
                    f"pins for campaign {campaign!r}: {_shown(digest)} is not a campaign "
                    "digest (64 lowercase hex digits, as `ldp campaign show` prints)"
                )
        if not items:
            raise InvalidParameter(
                f"pins for campaign {campaign!r} name no digest (the campaign could never be "
                "used); pin at least one, or leave the campaign out of pins"
            )
        out[campaign] = Pin(frozenset(items), shuffler)
    return out


def check_campaign_id(campaign: object) -> str:
    """Return ``campaign`` if it is a campaign slug, else raise :class:`InvalidParameter`."""
    if not isinstance(campaign, str) or not CAMPAIGN_ID.fullmatch(campaign):
        raise InvalidParameter(
            f"campaign id must be a slug like 'occupation' ([a-z0-9][a-z0-9_-]{{0,63}}), "
            f"got {campaign!r}"
        )
    return campaign


@dataclass(frozen=True)
class CampaignConfig:
    """What the device needs to report to one campaign (holds no device data)."""

    id: str
    digest: str
    window: str
    horizon_days: int
    mechanism: AnyMechanism
    resource: dict[str, Any]
    #: ``mechanism.realised_epsilon``, worked out once: every report is charged it, and the
    #: exact computation (rational arithmetic on the thresholds) costs tens of microseconds.
    epsilon: float = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", self.mechanism.realised_epsilon)

    @property
    def archived(self) -> bool:
        """Whether the collector archived the campaign (its resource's ``archived`` date, or a
        410 ``campaign_archived`` seen by the uploader): it takes no report any more."""
        return bool(self.resource.get("archived"))

    @classmethod
    def from_resource(cls, body: Mapping[str, Any]) -> CampaignConfig:
        """Validate a ``GET /v1/campaigns/{id}`` body; raises :class:`InvalidParameter`.

        A config is used only if its ``mechanism`` object holds nothing the mechanism built
        from it does not use (:func:`unused_setting`: type-strict, keys with defaults may be
        missing) and its ``digest`` is :func:`campaign_digest` of its id, mechanism, window
        and horizon: the digest goes back to the collector with every upload, so one of the
        collector's choosing, or a config varied where the device does not look, could tag
        this device and link its uploads across days and campaigns."""
        try:
            campaign_id, digest = body["id"], body["digest"]
            window = body.get("window", "day")
            horizon = int(body.get("horizon_days", 30))
            mech_config = body["mechanism"]
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise InvalidParameter(f"not a campaign resource: missing or bad {exc}") from None
        if horizon < 1:
            raise InvalidParameter(f"campaign horizon_days must be >= 1, got {horizon}")
        if not isinstance(campaign_id, str) or not isinstance(digest, str) or not digest:
            raise InvalidParameter("a campaign resource needs a string id and digest")
        if len(digest) > MAX_DIGEST_CHARS or not (digest.isascii() and digest.isprintable()):
            # Every report stores and sends the digest: one of 4 MiB made 20 reports a state
            # file of 100 MB (a collector could fill the device's storage), and a line break
            # in it made every revalidation (If-None-Match) fail.
            raise InvalidParameter(
                f"campaign {campaign_id!r}: unusable config: its digest is not up to "
                f"{MAX_DIGEST_CHARS} printable ASCII characters (the collector's is 64 hex "
                f"digits; got {len(digest)} characters)"
            )
        if window not in WINDOWS:
            raise InvalidParameter(f"campaign window must be one of {WINDOWS}, got {window!r}")
        try:
            mechanism = from_config(mech_config)
        except InvalidParameter as exc:
            raise InvalidParameter(f"campaign {campaign_id!r}: unusable config: {exc}") from None
        except (TypeError, ValueError, ArithmeticError, LookupError, AttributeError) as exc:
            # The resource comes from the collector, which the device does not trust: a config
            # the parsers did not foresee is refused like any other unusable one, so the
            # uploader logs it and goes on with the other campaigns.
            raise InvalidParameter(
                f"campaign {campaign_id!r}: unusable config ({type(exc).__name__})"
            ) from None
        try:
            unused = (
                unused_setting(mech_config, mechanism.config())
                if isinstance(mech_config, Mapping)
                else "'mechanism' is not an object"
            )
            own = campaign_digest(campaign_id, mech_config, window, horizon)
        except (TypeError, ValueError, RecursionError) as exc:
            # Text that is no UTF-8 (a lone surrogate), nesting past the stack: no digest of
            # this config can be checked, so it is not used.
            raise InvalidParameter(
                f"campaign {campaign_id!r}: unusable config: its digest cannot be checked "
                f"({type(exc).__name__})"
            ) from None
        if unused is not None:
            raise InvalidParameter(
                f"campaign {campaign_id!r}: unusable config: {unused}; a config the collector "
                "can vary without changing what the device runs could tag this device"
            )
        if digest != own:
            raise InvalidParameter(
                f"campaign {campaign_id!r}: unusable config: its digest {_shown(digest)} is not "
                f"the config's own ({own}, sha256 of its id, mechanism, window and "
                "horizon_days); every upload carries the digest back to the collector, so one "
                "of its choosing could tag this device"
            )
        return cls(
            id=campaign_id,
            digest=digest,
            window=window,
            horizon_days=horizon,
            mechanism=mechanism,
            resource=dict(body),
        )


class ConfigCache:
    """Campaign id -> :class:`CampaignConfig`, from memory, the state file or the collector."""

    def __init__(
        self,
        db: StateDB,
        transport: Transport,
        *,
        pins: Mapping[str, Any] | None = None,
    ) -> None:
        self.db = db
        self.transport = transport
        #: Campaign id -> the digests the app accepts for it (:func:`check_pins`); a campaign
        #: not in it takes any config that passes :meth:`CampaignConfig.from_resource`.
        self.pins = check_pins(pins)
        self.directory = db.state_dir / CACHE_DIR
        try:
            self.directory.mkdir(mode=0o700, exist_ok=True)
        except OSError as exc:  # a file in its place
            raise StateUnusable(
                f"the config cache {str(self.directory)!r} cannot be made a directory "
                f"({exc.strerror}); state_dir must be a directory of the app's own"
            ) from None
        self._memory: dict[str, CampaignConfig] = {}
        self._unrevalidated: set[str] = set()
        self._wanted: set[str] = set()
        self._gone: set[str] = set()
        #: Campaign -> why the collector's last config for it was unusable (this session).
        self._unusable: dict[str, str] = {}
        #: Campaign -> (inode, mtime_ns, size) of its cached file when it was found unusable.
        self._refused_files: dict[str, tuple[int, int, int]] = {}
        #: Campaign -> (unusable answers in a row, monotonic time before which ``want`` asks
        #: for no background fetch of it).
        self._refetch_after: dict[str, tuple[int, float]] = {}
        self._lock = threading.Lock()

    def peek(self, campaign: str) -> CampaignConfig | None:
        """The campaign's config from memory or disk, None if never cached. No network."""
        with self._lock:
            cached = self._memory.get(campaign)
        if cached is not None:
            return cached
        check_campaign_id(campaign)
        try:
            st = (self.directory / f"{campaign}.json").stat()
            seen: tuple[int, int, int] | None = (st.st_ino, st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            return None
        except OSError:
            seen = None
        with self._lock:
            if seen is not None and self._refused_files.get(campaign) == seen:
                return None  # the file refused before, unchanged: not read and logged again
        stored = self._load(campaign)
        if stored is None:
            self._refuse_file(campaign, seen)
            return None
        try:
            config = self._verified(campaign, stored["body"])
        except InvalidParameter as exc:
            # Refused as a fetched one is (an SDK from before the digest check, or pins the
            # app changed, may have cached it): report() says why while it is fetched again.
            log.warning("cached config of %s is unusable (%s); refetching", campaign, exc)
            with self._lock:
                self._unusable[campaign] = str(exc)
            self._refuse_file(campaign, seen)
            return None
        with self._lock:
            self._memory[campaign] = config
            self._unrevalidated.add(campaign)
        return config

    def _refuse_file(self, campaign: str, seen: tuple[int, int, int] | None) -> None:
        """Remember that the cached file of ``campaign``, as ``seen`` (inode, modification time
        and size), is unreadable or refused: every ``report`` until a good config arrives read,
        parsed, verified and logged it again (one warning per report)."""
        if seen is not None:
            with self._lock:
                self._refused_files[campaign] = seen

    def want(self, campaign: str) -> None:
        """Ask the upload thread to fetch ``campaign`` in the background; after an unusable
        config, not before a backoff (:data:`UNUSABLE_REFETCH_BASE` seconds, doubling per
        unusable answer in a row, at most :data:`UNUSABLE_REFETCH_CAP`).

        Every ``report`` of a campaign not on the device asks for it: after an unusable answer
        each one started a fetch at once (a collector answering with 16 MiB bodies had the
        device download them at the app's reporting rate)."""
        check_campaign_id(campaign)
        with self._lock:
            _, after = self._refetch_after.get(campaign, (0, 0.0))
            if campaign not in self._memory and time.monotonic() >= after:
                self._wanted.add(campaign)

    @property
    def wanted(self) -> bool:
        """Whether a background fetch is waiting."""
        return bool(self._wanted)

    def take_wanted(self) -> list[str]:
        with self._lock:
            out = sorted(self._wanted)
            self._wanted.clear()
        return out

    def is_gone(self, campaign: str) -> bool:
        """The collector answered 404 for ``campaign`` (this session)."""
        return campaign in self._gone

    def unusable(self, campaign: str) -> str | None:
        """Why the collector's last config for ``campaign`` could not be used, or None."""
        with self._lock:
            return self._unusable.get(campaign)

    def gone_message(self, campaign: str) -> str:
        return (
            f"the collector at {self.transport.base_url} has no campaign {campaign!r}; "
            "check the id (campaign ids are slugs like 'occupation')"
        )

    def get(self, campaign: str) -> CampaignConfig:
        """The campaign's config; fetches it (blocking) only if it was never cached."""
        config = self.peek(campaign)
        if config is not None:
            return config
        try:
            return self.refresh(campaign)
        except CampaignGone:
            raise UnknownCampaign(self.gone_message(campaign)) from None
        except AuthError as exc:
            raise AuthenticationFailed(
                f"the collector at {self.transport.base_url} refused the ingest token "
                f"({exc.status}); check ingest_token / LDP_INGEST_TOKEN against the collector's "
                "ingest token"
            ) from None
        except TransportError as exc:
            raise UnknownCampaign(
                f"campaign {campaign!r} was never fetched on this device and the collector at "
                f"{self.transport.base_url} cannot be reached ({exc}); the device must be online "
                "once to fetch a campaign, after that reports work offline"
            ) from None

    def refresh(self, campaign: str, *, conditional: bool = True) -> CampaignConfig:
        """Fetch the config (with ``If-None-Match`` when cached) and store it.

        Raises the transport's errors; :class:`CampaignGone` also evicts the cached config.
        """
        with self._lock:
            current = self._memory.get(campaign)
            self._unrevalidated.discard(campaign)
        etag = f'"{current.digest}"' if current is not None and conditional else None
        try:
            fetched = self.transport.fetch_campaign(campaign, etag=etag)
        except CampaignGone:
            self.forget(campaign)
            with self._lock:
                self._gone.add(campaign)
            raise
        if fetched.body is None and current is not None:
            return current
        if fetched.body is None:
            raise PermanentError("collector answered 304 to an unconditional GET", status=304)
        try:
            config = self._verified(campaign, fetched.body)
        except InvalidParameter as exc:
            with self._lock:
                self._unusable[campaign] = str(exc)
                row, _ = self._refetch_after.get(campaign, (0, 0.0))
                delay = min(UNUSABLE_REFETCH_CAP, UNUSABLE_REFETCH_BASE * 2 ** min(row, 30))
                self._refetch_after[campaign] = (row + 1, time.monotonic() + delay)
            raise
        self._store(campaign, {"etag": fetched.etag, "body": fetched.body})
        with self._lock:
            self._memory[campaign] = config
            self._gone.discard(campaign)
            self._wanted.discard(campaign)
            self._unusable.pop(campaign, None)
            self._refetch_after.pop(campaign, None)
        if current is not None and current.digest != config.digest:
            log.warning(
                "campaign %s changed its config digest (recreated on the collector)", campaign
            )
        return config

    def _verified(self, campaign: str, body: Mapping[str, Any]) -> CampaignConfig:
        """``body`` as the config of ``campaign``: checked by
        :meth:`CampaignConfig.from_resource` (its digest is its own), and, for a campaign the
        app pinned, its digest among the pins. Raises :class:`InvalidParameter`."""
        config = CampaignConfig.from_resource(body)
        if config.id != campaign:
            raise InvalidParameter(f"asked for campaign {campaign!r}, got {config.id!r}")
        pin = self.pins.get(campaign)
        if pin is not None and config.digest not in pin.digests:
            raise InvalidParameter(
                f"campaign {campaign!r}: unusable config: its digest {config.digest} is not "
                f"pinned by the app (pins accept {', '.join(sorted(pin.digests))}); the "
                "collector serves another config than the one the app was built for"
            )
        if pin is not None and pin.shuffler is not None:
            from client_sdk.sealed import shuffler_of

            served = shuffler_of(config.resource) or ""
            if served != pin.shuffler:
                raise InvalidParameter(
                    f"campaign {campaign!r}: unusable config: it names "
                    f"{('the shuffler ' + _shown(served)) if served else 'no shuffler'}, the "
                    f"app pins {('the shuffler ' + repr(pin.shuffler)) if pin.shuffler else 'none'}"
                    "; the collector chose where this device's reports go"
                )
        return config

    def mark_archived(self, campaign: str) -> None:
        """Remember that the collector answered 410 ``campaign_archived`` for ``campaign``:
        ``report`` then stores and charges nothing for it. The collector's ETag is the config
        digest, which archiving does not change, so a revalidation would not say so."""
        with self._lock:
            current = self._memory.get(campaign)
            if current is None or current.archived:
                return
            resource = {**current.resource, "archived": True}
            self._memory[campaign] = dataclasses.replace(current, resource=resource)
        stored = self._load(campaign)
        if stored is not None:
            stored["body"] = {**stored["body"], "archived": True}
            self._store(campaign, stored)

    def forget(self, campaign: str) -> None:
        """Evict a campaign from the cache (the collector no longer has it)."""
        with self._lock:
            self._memory.pop(campaign, None)
            self._unrevalidated.discard(campaign)
        (self.directory / f"{campaign}.json").unlink(missing_ok=True)

    def take_unrevalidated(self) -> list[str]:
        """Campaigns loaded from disk this session and not yet revalidated with the collector."""
        with self._lock:
            out = sorted(self._unrevalidated)
            self._unrevalidated.clear()
        return out

    def mark_unrevalidated(self, campaign: str) -> None:
        with self._lock:
            self._unrevalidated.add(campaign)

    def cached(self) -> list[str]:
        """Ids of every campaign cached on this device."""
        return sorted(p.stem for p in self.directory.glob("*.json"))

    def _load(self, campaign: str) -> dict[str, Any] | None:
        try:
            data = json.loads((self.directory / f"{campaign}.json").read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError, RecursionError):
            # RecursionError: the collector's resource, stored as it came, may nest deeper than
            # the parser can follow from the app's stack (report() is called from anywhere);
            # it escaped report() as a RecursionError. The upload thread fetches it again.
            log.warning("cached config of %s is unreadable; refetching", campaign)
            return None
        return data if isinstance(data, dict) and isinstance(data.get("body"), dict) else None

    def _store(self, campaign: str, data: dict[str, Any]) -> None:
        """Write atomically: a temporary file renamed over the old one.

        Best effort: the disk copy only lets a restart work offline. When it cannot be written
        (disk full, a read-only directory) the config is kept in memory and the failure logged;
        before, the OSError stopped the upload thread until the app restarted.
        """
        path = self.directory / f"{campaign}.json"
        tmp = path.with_name(f".{campaign}.{secrets.token_hex(6)}.tmp")
        try:
            tmp.write_text(json.dumps(data))
            os.replace(tmp, path)
        except OSError as exc:
            with contextlib.suppress(OSError):
                tmp.unlink(missing_ok=True)
            log.warning("config of %s kept in memory only: cannot write %s (%s)", campaign,
                        path, exc.strerror)  # fmt: skip

"""Mutants of the sixth sweep's device-side config checks that the tests let through.

Found by mutation testing of the lines changed since d245125 (``client_sdk/config_cache.py``:
``campaign_digest``, ``_shown``, ``check_pins``; ``client_sdk/sealed.py``: ``check_sealed_key``,
``SealedTransport._shuffler_of``), docs/MUTATION.md "Runs of the seventh sweep". Each test
names the mutant it kills.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import json
import logging
import os
import secrets
from pathlib import Path
from typing import Any

import pytest

from client_sdk import InvalidParameter
from client_sdk.config_cache import CampaignConfig, campaign_digest, check_pins
from client_sdk.mechanisms import create
from client_sdk.sealed import check_sealed_key
from tests.support.fake_http import campaign_config, serving
from tests.test_sweep6_sdk_sealed_pins import Both, device

GRR_ACCENTED = create("grr", epsilon=1.0, domain=["café", "naïve", "日本"]).config()
OUE = create("oue", epsilon=1.0, domain=["a", "b"]).config()


def _both() -> type[Both]:
    """A fresh fake collector and shuffler (its own request lists)."""
    return type(
        "Server", (Both,), {"resources": {}, "requests": [], "submitted": [], "uploads": []}
    )


def test_a_digest_of_non_ascii_labels_hashes_their_utf8() -> None:
    """Kills ``ensure_ascii=True`` in ``campaign_digest``: the digest is sha256 of the canonical
    JSON in UTF-8 (docs/HTTP_API.md), not of ``\\u00e9`` escapes. The collector computes it with
    the same function, so only a known answer tells (a device of an older release, or a
    campaign stored before, holds the UTF-8 one)."""
    core = {"id": "q", "mechanism": GRR_ACCENTED, "window": "day", "horizon_days": 30}
    blob = json.dumps(core, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert "café" in blob  # the label is written as itself
    expected = hashlib.sha256(blob.encode("utf-8")).hexdigest()
    assert campaign_digest("q", GRR_ACCENTED, "day", 30) == expected
    escaped = json.dumps(core, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    assert expected != hashlib.sha256(escaped.encode()).hexdigest()


def test_a_long_value_is_quoted_to_60_characters() -> None:
    """Kills ``_SHOWN_CHARS = 61`` (and 59): a collector's or app's value quoted in a refusal
    is cut at 60 characters of its repr, then ``...``."""
    bad = "z" * 100
    with pytest.raises(InvalidParameter) as caught:
        check_pins({"q": bad})
    assert f"{repr(bad)[:60]}... is not a campaign digest" in str(caught.value)
    short = "z" * 58  # repr of 60 characters: shown whole
    with pytest.raises(InvalidParameter) as caught:
        check_pins({"q": short})
    assert f"{short!r} is not a campaign digest" in str(caught.value)
    assert f"{short!r}..." not in str(caught.value)


@pytest.mark.parametrize("size", [33, 64])
def test_a_sealed_key_longer_than_32_bytes_is_refused(size: int) -> None:
    """Kills ``len(...) < 32`` for ``!= 32`` in ``check_sealed_key``: a longer key is no X25519
    public key either (the tests tried shorter ones only)."""
    key = base64.b64encode(secrets.token_bytes(size)).decode()
    with pytest.raises(InvalidParameter, match="sealed_key must be the collector's X25519"):
        check_sealed_key(key)
    good = base64.b64encode(secrets.token_bytes(32)).decode()
    assert check_sealed_key(good) == good


def test_a_refused_sealed_key_is_quoted_to_60_characters() -> None:
    """Kills ``repr(key)[:61]`` and ``[:59]`` in ``check_sealed_key``'s message."""
    key = "k" * 100
    with pytest.raises(InvalidParameter) as caught:
        check_sealed_key(key)
    assert str(caught.value).endswith("got " + repr(key)[:60])


def test_a_refused_direct_config_without_pins_sends_pending_reports_straight(
    tmp_path: Path,
) -> None:
    """Kills ``pin is not None`` for ``pin is None`` and ``and`` for ``or`` in
    ``SealedTransport._shuffler_of`` (``(pin is None or not pin.shuffler)``): both read
    ``pin.shuffler`` of no pin. A report made under the honest direct config is pending; on
    the next start the cached config and the served one are refused (a digest not their own)
    and name no shuffler, and the app pinned nothing: the report goes straight to the
    collector, as every direct campaign's do (the mutants raise AttributeError and it never
    goes)."""
    handler = _both()
    with serving(handler) as url:
        handler.resources = {"q": campaign_config("q", OUE)}
        state = tmp_path / "device"
        options: dict[str, Any] = {"flush_interval": 3600, "batch_size": 1000}
        with device(url, state, **options) as client:
            client.prefetch("q")
            assert client.report("q", "a")
        tagged = dict(handler.resources["q"], digest=secrets.token_hex(32))
        (state / "campaigns" / "q.json").write_text(
            json.dumps({"etag": f'"{tagged["digest"]}"', "body": tagged})
        )
        handler.resources = {"q": tagged}
        with device(url, state, **options) as client:
            assert client.flush(timeout=20)
            assert client.stats()["pending"] == 0
    assert handler.submitted == []
    assert [len(body["reports"]) for body in handler.uploads] == [1]


@pytest.mark.parametrize("params", [[], 0, None])
def test_a_served_value_that_is_no_object_where_the_mechanism_has_one_is_refused(
    params: object,
) -> None:
    """Kills ``or`` for ``and`` in ``unused_setting``'s ``isinstance(value, Mapping) and
    isinstance(expected, Mapping)``: ``from_config`` reads ``"params": []`` (or 0, or null) as
    no parameters, so each is a variant of the same config a collector could serve one device;
    the mechanism's own is ``{}``. The mutant recursed into the list and crashed with an
    AttributeError instead of refusing the config."""
    mech = dict(GRR_ACCENTED, params=params)
    with pytest.raises(InvalidParameter, match=r"'mechanism.params' is .* where the mechanism"):
        CampaignConfig.from_resource(campaign_config("q", mech))


def test_a_config_nested_past_the_stack_is_refused_not_raised() -> None:
    """Kills ``except (TypeError, ValueError)`` without ``RecursionError`` in
    ``CampaignConfig.from_resource``: a value nested deeper than the encoder's stack (here
    under a key ``from_config`` ignores) leaves no digest to check; the config is refused as
    unusable, which the uploader logs, instead of an exception out of the fetch."""
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    mech = dict(GRR_ACCENTED, zz=deep)
    body = {"id": "q", "digest": "0" * 64, "window": "day", "horizon_days": 30, "mechanism": mech}
    with pytest.raises(InvalidParameter, match=r"cannot be checked \(RecursionError\)"):
        CampaignConfig.from_resource(body)


@pytest.mark.parametrize("pin", ["a" * 65, "a" * 64 + "z", "a" * 64 + "\n"])
def test_a_pin_with_anything_after_64_hex_digits_is_refused(pin: str) -> None:
    """Kills ``[0-9a-f]{64,}`` and ``PINNED_DIGEST.match`` for ``fullmatch`` in
    ``check_pins``: a pin is exactly 64 lowercase hex digits (a longer one can never equal a
    config's digest, so the campaign could never be used)."""
    with pytest.raises(InvalidParameter, match="is not a campaign digest"):
        check_pins({"q": pin})
    assert check_pins({"q": pin[:64]})["q"].digests == {pin[:64]}


def test_an_empty_pinned_shuffler_pins_none() -> None:
    """Kills ``if value is None`` for ``if value is None or value == ""`` in
    ``_pinned_shuffler``: ``""`` is what a :class:`Pin` holds for "no shuffler" (and what a
    config naming none is compared with), so it pins none as ``None`` does, not a bad URL."""
    digest = "c" * 64
    assert check_pins({"q": {"digest": digest, "shuffler": ""}})["q"].shuffler == ""
    assert check_pins({"q": {"digest": digest, "shuffler": None}})["q"].shuffler == ""


def test_a_config_of_another_campaign_is_refused(tmp_path: Path) -> None:
    """Kills ``if False`` for ``if config.id != campaign`` in ``ConfigCache._verified``: a
    collector answering ``GET /v1/campaigns/q`` with campaign r's config (its digest r's own)
    would have the device report q's question under r's mechanism and digest."""
    handler = _both()
    with serving(handler) as url:
        handler.resources = {"q": campaign_config("r", OUE)}
        with device(url, tmp_path) as client:
            with pytest.raises(InvalidParameter, match="asked for campaign 'q', got 'r'"):
                client.prefetch("q")
            assert not client.report("q", "a")
            assert client.pending_reports() == [] and client.privacy_charges() == []


def test_a_direct_campaign_pinned_to_no_shuffler_is_used(tmp_path: Path) -> None:
    """Kills ``served = shuffler_of(config.resource)`` without ``or ""`` in
    ``ConfigCache._verified``: a config naming no shuffler matches a pin of none (``""``);
    the mutant compared ``None`` with it and refused every such campaign."""
    handler = _both()
    with serving(handler) as url:
        body = campaign_config("q", OUE)
        handler.resources = {"q": body}
        pins = {"q": {"digest": body["digest"], "shuffler": None}}
        with device(url, tmp_path, pins=pins) as client:
            client.prefetch("q")
            assert client.report("q", "a")
            assert client.flush(timeout=20)
    assert handler.submitted == [] and [len(b["reports"]) for b in handler.uploads] == [1]


def test_a_refused_cached_file_rewritten_in_the_same_clock_tick_is_read_again(
    tmp_path: Path,
) -> None:
    """Kills ``(st.st_ino, st.st_mtime_ns, st.st_ino)`` for ``..., st.st_size)`` in
    ``ConfigCache.peek``: a refused cached file is not read again while unchanged, but a file
    rewritten in place within one tick of the file system's clock keeps its inode and its
    modification time; its size tells it changed, and the good config in it is used."""
    handler = _both()
    with serving(handler) as url:
        good = campaign_config("q", OUE)
        handler.resources = {"q": good}
        path = tmp_path / "campaigns" / "q.json"
        with device(url, tmp_path, flush_interval=3600) as client:
            tagged = dict(good, digest=secrets.token_hex(32))
            path.write_text(json.dumps({"etag": '"x"', "body": tagged}, indent=2))
            assert client.configs.peek("q") is None  # refused, remembered
            before = path.stat()
            with path.open("r+") as fh:  # in place: the same inode
                fh.truncate(0)
                fh.write(json.dumps({"etag": f'"{good["digest"]}"', "body": good}))
            os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
            after = path.stat()
            assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
            assert after.st_size != before.st_size
            config = client.configs.peek("q")
            assert config is not None and config.digest == good["digest"]


def test_a_cached_file_whose_stat_fails_is_still_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kills ``if self._refused_files.get(campaign) == seen`` without ``seen is not None`` in
    ``ConfigCache.peek``: a file that cannot be fingerprinted (its ``stat`` failed: EIO, a
    permission race) matches no refused file and is read; the mutant took ``None == None``
    for "refused before" and never used the good config cached in it."""
    handler = _both()
    with serving(handler) as url:
        good = campaign_config("q", OUE)
        handler.resources = {"q": good}
        path = tmp_path / "campaigns" / "q.json"
        with device(url, tmp_path, flush_interval=3600) as client:
            client.prefetch("q")
        assert path.is_file()
        real_stat = Path.stat

        def stat(self: Path, **kwargs: Any) -> os.stat_result:
            if self == path:
                raise OSError(errno.EIO, "I/O error", str(self))
            return real_stat(self, **kwargs)

        with device(url, tmp_path, flush_interval=3600) as client:
            monkeypatch.setattr(Path, "stat", stat)
            config = client.configs.peek("q")
            monkeypatch.undo()
        assert config is not None and config.digest == good["digest"]


def test_an_unreadable_cached_file_is_read_and_logged_once_until_it_changes(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Kills ``_refuse_file`` left out after ``_load`` found nothing usable in ``peek``: a cached
    file that is no JSON was read and logged again by every ``report`` (as a refused config
    was before 8813078); now once, and again after it changes."""
    path = tmp_path / "campaigns" / "q.json"
    with device("http://127.0.0.1:9", tmp_path, flush_interval=3600) as client:
        path.write_text("{not json")
        with caplog.at_level(logging.WARNING, logger="client_sdk"):
            assert client.configs.peek("q") is None
            assert client.configs.peek("q") is None
            unreadable = [r for r in caplog.records if "is unreadable" in r.getMessage()]
            assert len(unreadable) == 1
            path.write_text("{still not json, longer")
            assert client.configs.peek("q") is None
            unreadable = [r for r in caplog.records if "is unreadable" in r.getMessage()]
            assert len(unreadable) == 2


@pytest.mark.parametrize(
    "pinned",
    [
        {"digest": {"d" * 64: True}},  # a mapping: its keys are no list of pins
        b"d" * 64,  # bytes: no text
        {"digest": b"d" * 64},
    ],
)
def test_pins_that_are_no_digest_nor_collection_of_digests_are_refused(pinned: object) -> None:
    """Kills ``(bytes,)`` and ``(Mapping,)`` for ``(bytes, Mapping)`` in ``check_pins``: a
    mapping's keys were taken as the pinned digests, and bytes refused only digit by digit
    (``100 is not a campaign digest``) instead of as what they are."""
    with pytest.raises(InvalidParameter, match="must be a digest or a collection of digests"):
        check_pins({"q": pinned})

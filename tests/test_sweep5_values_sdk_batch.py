"""``report_many`` batches the SDK used to take wrongly (fifth sweep, values, 2026-11-28).

* An open-domain campaign given a dict (``report_many("homepage", {"a": 1, "b": 2})``)
  reported each *key* as a device's string, silently: a categorical or numeric campaign
  refuses the same mapping, and a mapping of columns is a multi-attribute campaign's input.
* A multi-attribute campaign's numeric column holding an infinity was clipped to a bound (a
  plausible report hiding the app's bug), where ``report`` and a numeric campaign's
  ``report_many`` refuse it; an int beyond the float range raised a bare ``OverflowError``.
* A single value where a batch belongs (``report_many("homepage", 5)``) raised a bare
  ``TypeError`` from inside ``perturb_many`` for open-domain and multi-attribute campaigns
  (categorical and numeric campaigns answer ``InvalidParameter``).

Each bad batch is refused whole with :class:`InvalidParameter`, naming the attribute and the
row, and stores nothing; a real ``ldp serve`` serves the campaigns and takes the good batch.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from client_sdk import TelemetryClient
from client_sdk.errors import InvalidParameter
from tests.support.server import CollectorProcess, running_collector

ATTRIBUTES = {"occupation": ["Sales", "Tech"], "sex": ["F", "M"], "age": {"bounds": [17, 90]}}


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CollectorProcess]:
    with running_collector(tmp_path_factory.mktemp("batch")) as server:
        for body in (
            {"id": "homepage", "epsilon": 4.0, "mechanism": "pem", "max_length": 16},
            {"id": "person", "epsilon": 2.0, "mechanism": "spl", "attributes": ATTRIBUTES},
            # Only the good batch goes here (a bad batch stored would be uploaded at close).
            {"id": "person-ok", "epsilon": 2.0, "mechanism": "spl", "attributes": ATTRIBUTES},
        ):
            r = server.post_campaign(body)
            assert r.status_code == 201, r.text
        yield server


@pytest.fixture
def client(srv: CollectorProcess, tmp_path: Path) -> Iterator[TelemetryClient]:
    with TelemetryClient(
        srv.url, ingest_token=srv.ingest_token, state_dir=tmp_path, flush_interval=math.inf
    ) as c:
        c.prefetch("homepage", "person", "person-ok")
        yield c


def _refused(client: TelemetryClient, campaign: str, values: Any, match: str) -> None:
    with pytest.raises(InvalidParameter, match=match):
        client.report_many(campaign, values, simulate_devices=True, rng=1)
    assert client.stats()["pending"] == 0  # nothing half-stored


def test_an_open_domain_batch_given_a_mapping_is_refused(client: TelemetryClient) -> None:
    _refused(client, "homepage", {"example.org": 1, "other.org": 2}, "not a dict")
    assert client.report_many("homepage", ["example.org", "other.org"], simulate_devices=True) == 2


@pytest.mark.parametrize("campaign", ["homepage", "person"])
@pytest.mark.parametrize("values", [5, 2.5, np.array(5)])
def test_a_batch_that_is_no_sequence_is_refused(
    client: TelemetryClient, campaign: str, values: Any
) -> None:
    _refused(client, campaign, values, "values must be a sequence, one value per device")


@pytest.mark.parametrize(
    ("age", "match"),
    [
        ([30, math.inf], r"attribute 'age' is numeric: value #1 is not a finite number"),
        ([-math.inf, 30], r"attribute 'age' is numeric: value #0 is not a finite number"),
        ([30, math.nan], r"attribute 'age' is numeric: value #1 is not a finite number"),
        ([30, 10**400], r"attribute 'age' is numeric: its values must be numbers"),
    ],
)
def test_a_multi_attribute_batch_with_a_bad_number_is_refused_whole(
    client: TelemetryClient, age: list[Any], match: str
) -> None:
    columns = {"occupation": ["Sales", "Tech"], "sex": ["F", "M"], "age": age}
    _refused(client, "person", columns, match)
    records = [dict(zip(columns, row, strict=True)) for row in zip(*columns.values(), strict=True)]
    _refused(client, "person", records, match)


def test_a_good_multi_attribute_batch_is_taken(
    client: TelemetryClient, srv: CollectorProcess
) -> None:
    columns = {
        "occupation": ["Sales", "Tech", "Tech"],
        "sex": ["F", "M", "F"],
        "age": [17, 50.5, 90],
    }
    assert client.report_many("person-ok", columns, simulate_devices=True, rng=3) == 3
    records = iter([{"occupation": "Sales", "sex": "M", "age": 40}])  # read once
    assert client.report_many("person-ok", records, simulate_devices=True, rng=4) == 1
    assert client.flush(timeout=30)
    assert srv.estimates("person-ok")["n"] == 4


def test_an_app_error_partway_through_its_records_is_the_apps_not_a_half_batch(
    client: TelemetryClient,
) -> None:
    """A TypeError the app's own generator raises partway is raised to the app; it was taken
    for "not a batch", and the half-read iterator went on with the first records lost."""

    def records() -> Iterator[dict[str, Any]]:
        yield {"occupation": "Sales", "sex": "M", "age": 40}
        yield {"occupation": "Tech", "sex": "F", "age": 41}
        raise TypeError("the app's own bug")

    with pytest.raises(TypeError, match="the app's own bug"):
        client.report_many("person", records(), simulate_devices=True, rng=5)
    assert client.stats()["pending"] == 0

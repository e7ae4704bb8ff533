"""Campaign shapes and values the SDK used to take wrongly (third sweep, 2026-11-27).

* ``auto`` and multi-attribute campaigns over bounds near the float range: the worst-case
  variance in units of ``x**2`` overflowed in ``**`` and the whole campaign was refused with
  ``(34, 'Numerical result out of range')``, while a named mean mechanism took the same bounds.
* A pair of attributes declared twice (in either order): a component that split the report's
  epsilon further and measured nothing new.
* ``report_many`` clipped an infinite number to a bound where ``report`` refuses it.
* ``alpha_point`` with ``segments`` out of range: the message named a ``grid``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from client_sdk import TelemetryClient
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import create
from tests.support.server import CollectorProcess, running_collector

WIDE = (-1e300, 1e300)


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CollectorProcess]:
    with running_collector(tmp_path_factory.mktemp("inputs")) as server:
        yield server


def test_auto_over_bounds_near_the_float_range_is_built() -> None:
    mech = create("auto", epsilon=1, bounds=WIDE)
    assert mech.name in ("duchi", "piecewise", "hybrid")
    # The variance in x**2 exceeds the float range; the grid-unit figure stays exact.
    assert mech.worst_case_variance == math.inf
    assert 0 < float(mech.worst_case_variance_grid) < math.inf
    assert mech.variance(0.0) == math.inf
    assert np.all(mech.variances(np.array([0.0, 1e299])) == math.inf)


@pytest.mark.parametrize("protocol", ["auto", "smp", "spl"])
def test_a_multi_attribute_campaign_with_wide_bounds_is_built(protocol: str) -> None:
    mech = create(
        protocol,
        epsilon=1,
        attributes={"a": {"bounds": list(WIDE)}, "c": ["x", "y"]},
        pairs=[["a", "c"]],
    )
    assert mech.pairs == (("a", "c"),)


def test_the_collector_takes_auto_over_wide_bounds(srv: CollectorProcess) -> None:
    r = srv.post_campaign(
        {"id": "wide-auto", "bounds": list(WIDE), "mechanism": "auto", "epsilon": 1.0}
    )
    assert r.status_code == 201, r.text


@pytest.mark.parametrize("pairs", [[["a", "c"], ["a", "c"]], [["a", "c"], ["c", "a"]]])
def test_a_pair_declared_twice_is_refused(srv: CollectorProcess, pairs: list[list[str]]) -> None:
    attributes = {"a": ["p", "q"], "c": ["x", "y"], "d": ["u", "v"]}
    with pytest.raises(InvalidParameter, match="declared twice"):
        create("smp", epsilon=1, attributes=attributes, pairs=pairs)
    # The collector checks a campaign with the same definition: a 400 naming the pair.
    body = {"id": "dup-pairs", "mechanism": "smp", "epsilon": 1.0, "attributes": attributes}
    r = srv.post_campaign({**body, "pairs": pairs})
    assert r.status_code == 400, r.text
    assert "declared twice" in r.json()["error"]["message"]
    # Distinct pairs stay accepted.
    create("smp", epsilon=1, attributes=attributes, pairs=[["a", "c"], ["c", "d"]])


@pytest.mark.parametrize("bad", [math.inf, -math.inf, 1e400, math.nan])
def test_report_many_refuses_a_number_report_refuses(
    srv: CollectorProcess, tmp_path: Path, bad: float
) -> None:
    cid = "finite-only"
    r = srv.post_campaign({"id": cid, "bounds": [0, 10], "mechanism": "piecewise", "epsilon": 1.0})
    assert r.status_code in (201, 409), r.text
    with TelemetryClient(srv.url, ingest_token=srv.ingest_token, state_dir=tmp_path) as client:
        client.prefetch(cid)
        with pytest.raises(InvalidParameter, match="finite"):
            client.report(cid, bad)
        with pytest.raises(InvalidParameter, match=r"value #2 is not a finite number"):
            client.report_many(cid, [1.0, 2.0, bad, 3.0], simulate_devices=True, rng=1)
        assert client.stats()["pending"] == 0  # nothing of the refused call was stored
        assert client.report_many(cid, [1.0, 10.0], simulate_devices=True, rng=1) == 2


def test_alpha_point_segments_out_of_range_are_named_as_segments() -> None:
    for segments in (0, 1, -3, 2.5):
        with pytest.raises(InvalidParameter, match=r"^segments must be an integer"):
            create("alpha_point", epsilon=1, bounds=(0, 10), segments=segments)
    assert create("alpha_point", epsilon=1, bounds=(0, 10), segments=8).segments == 8


def test_a_plain_report_is_charged_without_a_permanent_epsilon(
    srv: CollectorProcess, tmp_path: Path
) -> None:
    """The ledger's listing says ``permanent_epsilon`` None for a report with no memoised
    release (mutation testing of ``client_sdk/ledger.py``: a stored -1.0 went unnoticed)."""
    cid = "plain-charge"
    body = {"id": cid, "domain": ["a", "b"], "mechanism": "grr", "epsilon": 1.0}
    assert srv.post_campaign(body).status_code in (201, 409)
    with TelemetryClient(srv.url, ingest_token=srv.ingest_token, state_dir=tmp_path) as client:
        client.prefetch(cid)
        assert client.report(cid, "a")
        charges = client.privacy_charges(cid)
    assert [c["permanent_epsilon"] for c in charges] == [None]
    assert [c["reports"] for c in charges] == [1]

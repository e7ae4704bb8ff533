"""``TelemetryClient.report(campaign, number)`` for numeric campaigns, against a real collector.

The device clips into the bounds, perturbs in pure Python and is charged the mechanism's
realised epsilon; α-point campaigns memoise one bit per rounded value and are charged by the
longitudinal bound. The estimate over HTTP lands within its own standard errors of the truth.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import requests

from client_sdk import InvalidParameter, PrivacyBudget, TelemetryClient
from client_sdk.mechanisms import from_config
from tests.support.server import CollectorProcess, running_collector

_ids = itertools.count()
UNLIMITED = PrivacyBudget.unlimited()


@pytest.fixture(scope="module")
def collector(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CollectorProcess]:
    with running_collector(tmp_path_factory.mktemp("collector")) as srv:
        yield srv


def numeric_campaign(srv: CollectorProcess, mechanism: str, **extra: Any) -> dict[str, Any]:
    body = {
        "id": f"n{next(_ids)}-{mechanism.replace('_', '-')}",
        "bounds": [0, 100],
        "mechanism": mechanism,
        "epsilon": 1.0,
        **extra,
    }
    resp = requests.post(
        srv.url + "/v1/campaigns", json=body, headers=srv.headers("admin"), timeout=10
    )
    assert resp.status_code == 201, resp.text
    return resp.json()


def multi_campaign(srv: CollectorProcess, bounds: tuple[float, float]) -> str:
    """A two-attribute campaign: label ``x`` in {a, b} and number ``y`` in ``bounds``; its id."""
    body = {
        "id": f"n{next(_ids)}-multi",
        "attributes": {"x": ["a", "b"], "y": {"bounds": list(bounds)}},
        "mechanism": "spl",
        "epsilon": 1.0,
    }
    resp = requests.post(
        srv.url + "/v1/campaigns", json=body, headers=srv.headers("admin"), timeout=10
    )
    assert resp.status_code == 201, resp.text
    return str(body["id"])


def client_for(srv: CollectorProcess, state_dir: Path, *ready: str, **options: Any):
    options.setdefault("backoff_base", 0.01)
    client = TelemetryClient(srv.url, ingest_token=srv.ingest_token, state_dir=state_dir, **options)
    client.prefetch(*ready)
    return client


def estimates(srv: CollectorProcess, campaign: str) -> dict[str, Any]:
    resp = requests.get(
        f"{srv.url}/v1/campaigns/{campaign}/estimates", headers=srv.headers("analyst"), timeout=30
    )
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_numbers_are_clipped_perturbed_and_estimated(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    camp = numeric_campaign(collector, "auto", epsilon=4.0)
    cid = camp["id"]
    mech = from_config(camp["mechanism"])
    values = np.random.default_rng(7).uniform(-30, 130, 1500)  # a third outside the bounds
    with client_for(collector, tmp_path, cid, reports_per_window=None, budget=UNLIMITED) as client:
        for x in values.tolist():
            report = client.report(cid, x)
            assert report and 0 <= report.payload < mech.output_size  # type: ignore[union-attr]
        assert client.report(cid, 42)  # an int is a number too
        spent = client.privacy_spent(cid)
        assert spent.reports == 1501
        assert spent.epsilon_per_report == mech.realised_epsilon <= 4.0
        assert client.flush(timeout=60)
    body = estimates(collector, cid)
    assert body["kind"] == "mean" and body["n"] == 1501
    truth = float(np.clip(np.append(values, 42), 0, 100).mean())
    assert abs(body["mean"] - truth) <= 5 * body["std_error"], (body["mean"], truth)


def test_a_bad_number_is_refused_without_quoting_it_and_costs_nothing(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    cid = numeric_campaign(collector, "piecewise")["id"]
    with client_for(collector, tmp_path, cid) as client:
        for bad in ("41.5", None, True, float("nan"), float("inf"), [1]):
            with pytest.raises(InvalidParameter, match=f"campaign '{cid}' is numeric") as info:
                client.report(cid, bad)  # type: ignore[arg-type]
            assert "41.5" not in str(info.value)
        assert client.outbox.pending == 0
        assert client.privacy_spent(cid).reports == 0
        assert client.report(cid, 41.5)  # the budget (one report per window) was untouched
        assert client.outbox.pending == 1


def test_an_int_beyond_the_float_range_is_a_finite_number_clipped_to_the_bounds(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    # float(10**400) overflows: the client raised OverflowError before clipping it.
    cid = numeric_campaign(collector, "piecewise")["id"]
    with client_for(collector, tmp_path, cid, reports_per_window=None, budget=UNLIMITED) as client:
        assert client.report(cid, 10**400)
        assert client.report(cid, -(10**400))
        assert client.outbox.pending == 2
    multi = multi_campaign(collector, (0, 1))
    with client_for(
        collector, tmp_path / "multi", multi, reports_per_window=None, budget=UNLIMITED
    ) as client:
        assert client.report(multi, {"x": "a", "y": 10**400})


def test_numbers_from_numpy_are_numbers(collector: CollectorProcess, tmp_path: Path) -> None:
    """A data frame's column gives NumPy scalars: ``int64`` was refused ("report an int or
    float, got int64") while ``float64``, a float subclass, was taken."""
    cid = numeric_campaign(collector, "piecewise", epsilon=4.0)["id"]
    values = np.random.default_rng(11).integers(0, 101, 600)
    with client_for(collector, tmp_path, cid, reports_per_window=None, budget=UNLIMITED) as client:
        for x in values:
            assert client.report(cid, x)  # numpy.int64
        for y in values.astype(np.float32):
            assert client.report(cid, y)
        assert client.report(cid, Fraction(1, 2))
        for bad in (np.float32("nan"), np.True_, Decimal("3")):
            with pytest.raises(InvalidParameter, match="is numeric"):
                client.report(cid, bad)  # type: ignore[arg-type]
        assert client.flush(timeout=60)
    body = estimates(collector, cid)
    assert body["n"] == 1201
    truth = (2 * float(values.sum()) + 0.5) / 1201
    assert abs(body["mean"] - truth) <= 5 * body["std_error"], (body["mean"], truth)
    multi = multi_campaign(collector, (0, 100))
    with client_for(
        collector, tmp_path / "multi", multi, reports_per_window=None, budget=UNLIMITED
    ) as client:
        assert client.report(multi, {"x": "a", "y": np.int64(30)})
        with pytest.raises(InvalidParameter, match="is numeric"):
            client.report(multi, {"x": "a", "y": Decimal("30")})


def test_a_categorical_campaign_still_wants_a_label(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    body = {"id": f"cat{next(_ids)}", "domain": ["a", "b"], "mechanism": "grr", "epsilon": 1.0}
    resp = requests.post(
        collector.url + "/v1/campaigns", json=body, headers=collector.headers("admin"), timeout=10
    )
    assert resp.status_code == 201, resp.text
    with client_for(collector, tmp_path, body["id"]) as client:
        assert client.report(body["id"], "a")


def test_alpha_point_memoises_and_is_charged_by_its_longitudinal_bound(
    collector: CollectorProcess, tmp_path: Path
) -> None:
    camp = numeric_campaign(collector, "alpha_point", params={"segments": 4})
    cid = camp["id"]
    mech = from_config(camp["mechanism"])
    eps = mech.realised_epsilon
    with client_for(collector, tmp_path, cid, reports_per_window=None, budget=UNLIMITED) as client:
        same = {client.report(cid, 37.0).payload for _ in range(30)}  # type: ignore[union-attr]
        assert len(same) == 1  # one memoised bit for one rounded value
        spent = client.privacy_spent(cid)
        assert spent.sequential == pytest.approx(30 * eps)
        # The ledger never learns values: it counts distinct rounded values as at most
        # min(reports, segments + 1) = 5, one memoised bit each.
        assert spent.memoised == pytest.approx(5 * eps) and spent.best < spent.sequential
        for x in np.linspace(0, 100, 60).tolist():
            client.report(cid, x)
        spent = client.privacy_spent(cid)
        # At most segments + 1 = 5 memoised bits, whatever the number of reports.
        assert spent.memoised == pytest.approx(5 * eps)
        assert spent.best <= 5 * eps + 1e-12
        assert client.flush(timeout=60)
    assert estimates(collector, cid)["n"] == 90

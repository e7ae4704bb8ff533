"""A numeric attribute of a multi-attribute campaign may declare its values.

docs/MECHANISMS.md §22: with ``"age": {"bounds": [17, 90], "expected": {"mean": m, "sd": s}}``
the attribute's mean mechanism is the one a single-attribute ``auto`` campaign with that
declaration at the attribute's epsilon chooses it (``choose_mean``, one definition), and the
multi ``auto`` criterion counts that declared variance (rescaled to [0, 1]) and, for SMP's
sampling term, the declared variance of the value on [0, 1] instead of a uniform value's 1/12.
The declaration is checked (naming the attribute) and not stored: the config holds the chosen
per-attribute mechanisms, devices rebuild them from it, and an undeclared campaign's config and
digest are what they were before (pinned below from the code before the change, 8813078).
"""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path
from typing import Any

import jsonschema_rs
import numpy as np
import pytest
import requests
from click.testing import CliRunner

from client_sdk import TelemetryClient
from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import create, from_config
from client_sdk.mechanisms.multi import MultiMechanism, compare_protocols
from client_sdk.mechanisms.numeric import ExpectedValues, MeanMechanism, expected_variance
from collector.campaigns import campaign_from_request
from collector.errors import APIError
from collector.openapi import openapi_document
from ldp_cli.main import cli
from tests.support.openapi_schema import validate
from tests.support.server import ADMIN_TOKEN, INGEST_TOKEN, running_collector

OCC = ["Sales", "Tech", "Craft", "Admin"]
SEX = ["F", "M"]
AGE_BOUNDS = (17.0, 90.0)
#: Adult-like ``age``: mean and sd of the clipped values.
AGE = {"mean": 38.6, "sd": 13.6}
DECLARED_AGE = {"bounds": [17, 90], "expected": AGE}
PLAIN_AGE = {"bounds": [17, 90]}
SEX_AGE = {"sex": SEX, "age": PLAIN_AGE}
#: Digests of undeclared multi campaigns, computed with the code before this change (commit
#: 8813078) through ``campaign_from_request``: a declaration must not move them.
PINNED: dict[str, tuple[dict[str, Any], str]] = {
    "person": (
        {"epsilon": 4.0, "attributes": {"sex": SEX, "age": {"bounds": [17, 90]}}},
        "98cc041f00025ea12c4ed4bb16ef50203a7fd1b46ff364ca16072e8c2c96b0fa",
    ),
    "adult": (
        {
            "epsilon": 2.0,
            "attributes": {"occupation": OCC, "sex": SEX, "age": {"bounds": [17, 90]}},
            "pairs": [["occupation", "sex"], ["occupation", "age"]],
        },
        "0ee4676d0e6a5bc0989859f7620fff8058c847b085a96cf4e7ef1aab9bc56931",
    ),
    "split": (
        {
            "epsilon": 3.0,
            "mechanism": "spl",
            "attributes": {
                "sex": SEX,
                "age": {"bounds": [17, 90], "grid": 1024},
                "hours": {"bounds": [1, 99]},
            },
        },
        "4a4e36601bd09a905d6964e3282702a93087047f71cc51303e969e5803b0dfd8",
    ),
}


def _declared(body: dict[str, Any], name: str, expected: object) -> dict[str, Any]:
    attributes = dict(body["attributes"])
    attributes[name] = {**attributes[name], "expected": expected}
    return {**body, "attributes": attributes}


@pytest.mark.parametrize("protocol", ["spl", "smp", "auto"])
def test_a_declared_age_gets_the_single_attribute_choice_at_its_epsilon(protocol: str) -> None:
    """Adult-like age at epsilon 2: Piecewise (the single-attribute ``auto`` with the same
    declaration at the attribute's epsilon: 2/2 under SPL, 2 under SMP), where the worst case
    takes Hybrid; the choice says what decided it."""
    epsilon = 2.0
    declared = create(
        protocol, epsilon=epsilon, attributes={"occupation": OCC, "age": DECLARED_AGE}
    )
    plain = create(
        protocol, epsilon=epsilon, attributes={"occupation": OCC, "age": {"bounds": [17, 90]}}
    )
    assert isinstance(declared, MultiMechanism) and isinstance(plain, MultiMechanism)
    age = declared.mechanisms[1]
    single = create("auto", epsilon=age.epsilon, bounds=AGE_BOUNDS, expected=AGE)
    worst = create("auto", epsilon=age.epsilon, bounds=AGE_BOUNDS)
    assert age.epsilon == pytest.approx(epsilon / 2 if declared.name == "spl" else epsilon)
    assert age.config() == single.config() and single.name == "piecewise"
    assert plain.mechanisms[1].config() == worst.config() and worst.name == "hybrid"
    assert "declared" in declared.mean_choices["age"].criterion
    assert "worst-case" in plain.mean_choices["age"].criterion
    assert declared.mechanisms[0].config() == plain.mechanisms[0].config()  # occupation alike
    if protocol == "auto":
        reason = compare_protocols(
            epsilon=epsilon, attributes={"occupation": OCC, "age": DECLARED_AGE}
        ).reason
        assert "age: piecewise by the per-report variance averaged over values of mean 38.6" in (
            reason
        )


def test_values_at_a_bound_choose_duchi_for_the_attribute() -> None:
    """Most values at the low bound (capital-gain-like): Duchi, at every protocol's epsilon."""
    gain = {"bounds": [0, 100_000], "expected": {"mean": 1077.6, "sd": 7385.3}}
    for protocol in ("spl", "smp"):
        mech = create(protocol, epsilon=4.0, attributes={"sex": SEX, "gain": gain})
        assert mech.mechanisms[1].name == "duchi"
        plain = create(protocol, epsilon=4.0, attributes={"sex": SEX, "gain": {"bounds": [0, 1e5]}})
        assert plain.mechanisms[1].name == "hybrid"


def test_the_criterion_counts_the_declared_variance_and_spread() -> None:
    """SMP's criterion, written out: per component ``A_j / pi_j - s_j`` with ``A_j = V_j +
    s_j``; for the declared age ``V = expected_variance / (high - low)**2`` and ``s = (sd /
    (high - low))**2`` (the declared values' variance on [0, 1]); undeclared ``V`` is the worst
    case and ``s = 1/12``. The weights are the optimal ``pi_j ~ sqrt(A_j)`` of those terms."""
    span = AGE_BOUNDS[1] - AGE_BOUNDS[0]
    for expected, spread in ((AGE, (AGE["sd"] / span) ** 2), (None, 1 / 12)):
        spec: dict[str, Any] = {"bounds": [17, 90]}
        if expected is not None:
            spec["expected"] = expected
        mech = create("smp", epsilon=4.0, attributes={"sex": SEX, "age": spec}, weights="optimal")
        sex, age = mech.mechanisms
        assert isinstance(age, MeanMechanism)
        if expected is None:
            v_age = age.unit_worst_case_variance / 4
        else:
            v_age = expected_variance(age, ExpectedValues(**expected)) / span**2
        a = [sex.mean_variance() + 1 / 4, v_age + spread]  # type: ignore[union-attr]
        s = [1 / 4, spread]
        roots = [math.sqrt(x) for x in a]
        want = tuple(max(1, round(10_000 * r / sum(roots))) for r in roots)
        assert mech.weights == want
        pis = [w / sum(want) for w in want]
        formula = sum(ai / p - si for ai, p, si in zip(a, pis, s, strict=True)) / 2
        assert mech.variance_criterion() == pytest.approx(formula, rel=1e-12)
    # The declared spread is a seventh below uniform's here; the declared Piecewise variance
    # below Hybrid's worst case: the weights move toward sex.
    declared = create(
        "smp", epsilon=4.0, attributes={"sex": SEX, "age": DECLARED_AGE}, weights="optimal"
    )
    plain = create("smp", epsilon=4.0, attributes=SEX_AGE, weights="optimal")
    assert declared.weights is not None and plain.weights is not None
    assert declared.weights[0] > plain.weights[0]


def test_the_declaration_changes_the_protocol_where_it_should() -> None:
    """sex + age at epsilon 4: by the worst case SPL (Hybrid at 2 each); with Adult's age
    declared SMP with Piecewise at 4, whose criterion is below SPL's under the same
    declaration (and measured 0.62x the worst-case choice's n * MSE on Adult, §22)."""
    plain = compare_protocols(epsilon=4.0, attributes=SEX_AGE)
    declared = compare_protocols(epsilon=4.0, attributes={"sex": SEX, "age": DECLARED_AGE})
    assert (plain.chosen.name, plain.chosen.mechanisms[1].name) == ("spl", "hybrid")
    assert (declared.chosen.name, declared.chosen.mechanisms[1].name) == ("smp", "piecewise")
    spl, smp = declared.criteria["spl"], declared.criteria["smp"]
    assert spl is not None and smp is not None and smp < spl
    assert declared.criteria != plain.criteria


def test_the_config_holds_the_choice_not_the_declaration_and_devices_rebuild_it() -> None:
    for protocol in ("spl", "smp", "auto"):
        mech = create(
            protocol,
            epsilon=2.0,
            attributes={"occupation": OCC, "age": DECLARED_AGE},
            pairs=[("occupation", "age")],
        )
        config = mech.config()
        assert "expected" not in json.dumps(config)
        assert config["attributes"]["age"] == {"bounds": [17.0, 90.0]}
        age_eps = mech.mechanisms[1].epsilon
        chosen = create("auto", epsilon=age_eps, bounds=AGE_BOUNDS, expected=AGE).name
        assert config["params"]["per_attribute"][1]["mechanism"] == chosen
        if mech.name == "smp":  # at 2: not the worst case's Hybrid, so rebuilt by name
            assert chosen == "piecewise"
        rebuilt = from_config(json.loads(json.dumps(config, sort_keys=True)))
        assert isinstance(rebuilt, MultiMechanism)
        assert rebuilt.config() == config and rebuilt.mechanisms[1].name == chosen
    # A stored numeric attribute runs a mean mechanism auto could have chosen, nothing else.
    params = config["params"]
    tampered = [dict(p) for p in params["per_attribute"]]
    tampered[1]["mechanism"] = "square_wave"
    with pytest.raises(InvalidParameter, match="attribute 'age': a numeric attribute runs one of"):
        from_config({**config, "params": {**params, "per_attribute": tampered}})
    # ... and the rest of its stored config must be what that name rebuilds to.
    tampered = [dict(p) for p in params["per_attribute"]]
    tampered[1]["epsilon"] = 1.5
    with pytest.raises(InvalidParameter, match="differ from what they rebuild to"):
        from_config({**config, "params": {**params, "per_attribute": tampered}})


def test_undeclared_digests_are_unchanged_and_a_declaration_leaves_only_its_choice() -> None:
    """The pinned digests (code before the change) still hold. A declared campaign's config is
    the undeclared one but for what the declaration chose: the age mechanism, the protocol and
    SMP's weights. Where the declaration picks what the worst case picks (epsilon 0.5: Duchi
    both ways, and SPL has no weights), the config and digest are the undeclared one's."""
    for cid, (body, digest) in PINNED.items():
        plain = campaign_from_request({"id": cid, **body})
        assert plain.digest == digest, cid
        declared = campaign_from_request({"id": cid, **_declared(body, "age", AGE)})
        assert "expected" not in json.dumps(declared.to_record())
        assert declared.mechanism_config["attributes"] == plain.mechanism_config["attributes"]
        assert declared.digest != plain.digest  # Piecewise, not Hybrid, at these epsilons
        at = list(body["attributes"]).index("age")
        ages = [
            c.mechanism_config["params"]["per_attribute"][at]["mechanism"]
            for c in (plain, declared)
        ]
        assert ages == ["hybrid", "piecewise"], cid
    body = {"epsilon": 0.5, "mechanism": "spl", "attributes": SEX_AGE}
    plain = campaign_from_request({"id": "low", **body})
    declared = campaign_from_request({"id": "low", **_declared(body, "age", AGE)})
    assert declared.mechanism_config == plain.mechanism_config
    assert declared.digest == plain.digest


BAD = [
    ({"mean": 95.0, "sd": 1.0}, "outside the bounds"),
    ({"mean": 38.0, "sd": 50.0}, "expected sd must be in [0, 33.0454]"),
    ({"mean": 38.0, "sd": -1.0}, "expected sd must be in [0, 33.0454]"),
    ({"mean": 38.0}, "must be {'mean': m, 'sd': s}"),
    ([38.0, 13.0], "must be {'mean': m, 'sd': s}"),
    ({"mean": True, "sd": 13.0}, "finite numbers"),
]


@pytest.mark.parametrize(("expected", "words"), BAD)
def test_a_bad_declaration_is_refused_naming_the_attribute(expected: object, words: str) -> None:
    attributes = {"sex": SEX, "age": {"bounds": [17, 90], "expected": expected}}
    for protocol in ("spl", "smp", "auto"):
        with pytest.raises(InvalidParameter) as info:
            create(protocol, epsilon=2.0, attributes=attributes)
        assert str(info.value).startswith("attribute 'age': ") and words in str(info.value)
    with pytest.raises(APIError) as refused:
        campaign_from_request({"id": "bad", "epsilon": 2.0, "attributes": attributes})
    assert refused.value.status == 400 and refused.value.code == "invalid_campaign"
    assert "attribute 'age': " in refused.value.message and words in refused.value.message


def test_a_declaration_in_the_wrong_place_is_refused_with_the_right_one() -> None:
    with pytest.raises(InvalidParameter, match="applies to a numeric attribute"):
        create(
            "smp",
            epsilon=2.0,
            attributes={"sex": {"domain": SEX, "expected": AGE}, "age": PLAIN_AGE},
        )
    with pytest.raises(InvalidParameter, match='"expected": {"mean": m, "sd": s}'):
        create("smp", epsilon=2.0, attributes=SEX_AGE, expected=AGE)
    with pytest.raises(APIError) as refused:
        campaign_from_request({"id": "x", "epsilon": 2.0, "attributes": SEX_AGE, "expected": AGE})
    assert "a numeric attribute declares its own values" in refused.value.message
    with pytest.raises(InvalidParameter, match="declare their values instead"):
        create("auto", epsilon=2.0, attributes=SEX_AGE, means={"age": "duchi"})


def test_the_openapi_create_schema_takes_the_declaration_the_stored_config_does_not() -> None:
    doc = openapi_document()
    body = {"id": "p", "epsilon": 2.0, "attributes": {"sex": SEX, "age": DECLARED_AGE}}
    validate(doc, "CampaignCreate", body)
    with pytest.raises(jsonschema_rs.ValidationError):
        validate(doc, "CampaignCreate", _declared(body, "age", {"mean": 38.6, "sd": -1}))
    with pytest.raises(jsonschema_rs.ValidationError):
        validate(doc, "CampaignCreate", _declared(body, "age", {"mean": 38.6}))
    stored = campaign_from_request(body).mechanism_config
    validate(doc, "MechanismConfig", stored)
    with pytest.raises(jsonschema_rs.ValidationError):
        validate(doc, "MechanismConfig", {**stored, "attributes": body["attributes"]})
    numeric = doc["components"]["schemas"]["CampaignCreate"]["properties"]["expected"]["oneOf"][1]
    declared = doc["components"]["schemas"]["CampaignCreate"]["properties"]["attributes"]
    in_attr = declared["additionalProperties"]["oneOf"][1]["properties"]["expected"]
    assert {k: v for k, v in in_attr.items() if k != "description"} == numeric


def test_end_to_end_through_a_collector_and_a_device(tmp_path: Path) -> None:
    """POST the declared campaign (201, the config holds Piecewise and no declaration), a bad
    declaration (400 naming the attribute), reports from a rebuilt mechanism estimate the
    mean within its standard error, a device (``TelemetryClient``) accepts the served config
    and its report is accepted; ``ldp campaign create --attributes`` with the declaration."""
    attributes = {"sex": SEX, "age": DECLARED_AGE}
    with running_collector(tmp_path) as srv:
        r = srv.post_campaign({"id": "person", "epsilon": 4.0, "attributes": attributes})
        assert r.status_code == 201, r.text
        camp = r.json()
        assert "expected" not in r.text
        assert camp["attributes"]["age"] == {"bounds": [17.0, 90.0]}
        assert camp["mechanism"]["mechanism"] == "smp"
        assert camp["mechanism"]["params"]["per_attribute"][1]["mechanism"] == "piecewise"
        url = f"{srv.url}/v1/campaigns/person"
        got = requests.get(url, headers=srv.headers("ingest"), timeout=10)
        assert got.json()["digest"] == camp["digest"]
        wide = {"sex": SEX, "age": {"bounds": [17, 90], "expected": {"mean": 38.6, "sd": 40}}}
        bad = srv.post_campaign({"id": "bad", "epsilon": 4.0, "attributes": wide})
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_campaign"
        assert "attribute 'age': expected sd must be in" in bad.json()["error"]["message"]

        mech = from_config(camp["mechanism"])
        assert isinstance(mech, MultiMechanism) and mech.mechanisms[1].name == "piecewise"
        rng = np.random.default_rng(3)
        n = 5000
        data = {
            "sex": rng.integers(0, 2, n),
            "age": np.clip(rng.normal(AGE["mean"], AGE["sd"], n), 17, 90),
        }
        assert srv.upload(camp, mech.encode_many(mech.perturb_many(data, rng=4)))["accepted"] == n
        answer = srv.estimates("person")
        (age,) = [a for a in answer["attributes"] if a["name"] == "age"]
        assert abs(age["mean"] - float(data["age"].mean())) <= 4.5 * age["std_error"]

        with TelemetryClient(
            srv.url, ingest_token=INGEST_TOKEN, state_dir=tmp_path / "device", campaigns=["person"]
        ) as client:
            client.prefetch("person")
            assert client.report("person", {"sex": "F", "age": 41})
            assert client.flush(30)
            assert client.stats()["accepted"] == 1

        made = CliRunner().invoke(
            cli,
            [
                "campaign", "create", "cli-person", "--url", srv.url, "--token", ADMIN_TOKEN,
                "-e", "4", "--attributes", json.dumps(attributes), "--format", "json",
            ],
        )  # fmt: skip
        assert made.exit_code == 0, made.output
        item = json.loads(made.output)
        assert item["mechanism"]["params"] == camp["mechanism"]["params"]
        assert "expected" not in made.output
    assert dt.date.fromisoformat(camp["created"])

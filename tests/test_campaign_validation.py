"""``POST /v1/campaigns`` validation at its limits (``collector.campaigns.campaign_from_request``).

The figures are docs/HTTP_API.md's and the OpenAPI document's: a test that read the constants
back would pass whatever they became (mutation testing changed several unseen). Each limit is
checked on both sides, and the OpenAPI document is checked to state the same limits.
"""

from __future__ import annotations

from typing import Any

import pytest

from collector.campaigns import campaign_from_request
from collector.errors import APIError
from collector.openapi import openapi_document

BASE: dict[str, Any] = {"id": "c", "domain": ["a", "b"], "mechanism": "oue", "epsilon": 1.0}


def refused(body: dict[str, Any], **kwargs: Any) -> str:
    with pytest.raises(APIError) as caught:
        campaign_from_request(body, **kwargs)
    assert caught.value.status == 400 and caught.value.code == "invalid_campaign"
    return caught.value.message


def test_the_documented_defaults() -> None:
    campaign = campaign_from_request(BASE)
    assert (campaign.horizon_days, campaign.min_reports, campaign.window) == (30, 1, "day")
    assert campaign.retention_days == 90 and campaign.description == ""


def test_a_description_of_2000_characters_is_the_longest() -> None:
    assert len(campaign_from_request({**BASE, "description": "d" * 2000}).description) == 2000
    message = refused({**BASE, "description": "d" * 2001})
    assert "'description' must be a string of at most 2000 characters" in message


def test_min_reports_runs_from_one_to_a_trillion() -> None:
    assert campaign_from_request({**BASE, "min_reports": 1}).min_reports == 1
    assert campaign_from_request({**BASE, "min_reports": 10**12}).min_reports == 10**12
    for bad in (0, -1, 10**12 + 1, 1.5, True, "5"):
        message = refused({**BASE, "min_reports": bad})
        assert "'min_reports' must be an integer in [1, 1000000000000]" in message


def test_retention_may_equal_the_servers_ceiling_but_not_pass_it() -> None:
    at = campaign_from_request({**BASE, "retention_days": 60}, max_retention_days=60)
    assert at.retention_days == 60
    message = refused({**BASE, "retention_days": 61}, max_retention_days=60)
    assert "exceeds this server's ceiling LDP_MAX_RETENTION_DAYS=60" in message
    # Without retention_days the default is capped by the ceiling, never past it.
    assert campaign_from_request(BASE, max_retention_days=60).retention_days == 60


def test_a_missing_domain_says_what_to_give_instead() -> None:
    numeric = refused({"id": "c", "mechanism": "piecewise", "epsilon": 1.0})
    assert "'piecewise' is a numeric mechanism: give 'bounds': [low, high] instead" in numeric
    categorical = refused({"id": "c", "mechanism": "oue", "epsilon": 1.0})
    assert "(or 'bounds': [low, high] for a numeric campaign)" in categorical
    assert "is a numeric mechanism" not in categorical


def test_a_sketch_too_big_to_keep_names_what_to_shrink() -> None:
    pem = {"id": "c", "mechanism": "pem", "epsilon": 1.0, "max_length": 64}
    message = refused({**pem, "params": {"width": 4096, "depth": 64}})
    assert message.endswith("choose a smaller width or depth or max_length")
    cms = {"id": "c", "mechanism": "cms", "epsilon": 1.0, "max_length": 8}
    message = refused({**cms, "params": {"width": 4096, "depth": 1024}})
    assert message.endswith("choose a smaller width or depth")  # cms's size has no max_length


def test_the_openapi_document_states_the_same_limits() -> None:
    schema = openapi_document()["components"]["schemas"]["CampaignCreate"]["properties"]
    assert schema["description"]["maxLength"] == 2000
    assert (schema["horizon_days"]["default"], schema["horizon_days"]["maximum"]) == (30, 3660)
    assert (schema["min_reports"]["default"], schema["min_reports"]["maximum"]) == (1, 10**12)
    assert schema["retention_days"]["maximum"] == 36600
    assert "max(90, horizon_days)" in schema["retention_days"]["description"]
    assert schema["shuffler"]["maxLength"] == 2000
    long_url = "https://" + "s" * 1992
    assert campaign_from_request({**BASE, "shuffler": long_url}).shuffler == long_url
    assert "'shuffler' must be the http(s) URL" in refused({**BASE, "shuffler": long_url + "s"})


def test_the_resource_names_a_shuffler_only_when_there_is_one() -> None:
    """Devices send sealed reports through the campaign's shuffler when its resource names one
    (docs/SHUFFLE.md); a campaign without one has no such field, not a null."""
    url = "https://shuffler.example:8760"
    assert campaign_from_request({**BASE, "shuffler": url}).resource()["shuffler"] == url
    assert "shuffler" not in campaign_from_request(BASE).resource()

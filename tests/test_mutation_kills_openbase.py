"""Tests that kill surviving mutants of ``client_sdk/mechanisms/openended/base.py`` (issue 21).

The contract every open-domain mechanism shares: its abstract methods are enforced, its
capabilities, its report size in bytes, and the strict parser's messages naming the mechanism.
"""

from __future__ import annotations

import math

import pytest

from client_sdk.errors import InvalidReport
from client_sdk.mechanisms import create
from client_sdk.mechanisms.openended import CountMeanSketch
from client_sdk.mechanisms.openended.base import OpenDomainMechanism

ABSTRACT = {
    "params",
    "realised_epsilon",
    "report_bits",
    "_perturb_one",
    "_perturb_batch",
    "encode_many",
    "_check",
    "_decode_checked",
    "tally_size",
    "_counts",
    "output_distribution",
    "output_key",
}


@pytest.mark.parametrize("missing", sorted(ABSTRACT))
def test_a_mechanism_missing_part_of_the_contract_cannot_be_built(missing: str) -> None:
    assert OpenDomainMechanism.__abstractmethods__ == ABSTRACT
    incomplete = type(
        "Incomplete", (CountMeanSketch,), {missing: OpenDomainMechanism.__dict__[missing]}
    )
    with pytest.raises(TypeError, match=missing):
        incomplete(epsilon=1.0, max_length=4, width=8, depth=2)


@pytest.mark.parametrize("name", ["cms", "hcms", "pem"])
def test_capabilities_and_report_size(name: str) -> None:
    mech = create(name, epsilon=1.0, max_length=4, width=64, depth=4)
    assert mech.permanent_epsilon is None and mech.exact_support_size is None
    assert not mech.postprocessable and not mech.exact_channel and not mech.memoized
    assert mech.report_bytes == math.ceil(mech.report_bits / 8)
    expected = {"cms": 64 + 2, "hcms": 1 + 6 + 2, "pem": 64 + 2 + 2}[name]
    assert mech.report_bits == expected
    assert mech.report_bytes == -(-expected // 8)


@pytest.mark.parametrize("name", ["cms", "hcms", "pem"])
def test_a_bad_payload_is_refused_naming_the_mechanism(name: str) -> None:
    mech = create(name, epsilon=1.0, max_length=4, width=8, depth=2)
    for bad in ([], [99, 99, 99], "x", None):
        with pytest.raises(InvalidReport, match=rf"\(mechanism {name}\)$"):
            mech.check_payload(bad)


def test_the_constructor_takes_keyword_arguments_only() -> None:
    import inspect

    params = list(inspect.signature(OpenDomainMechanism.__init__).parameters.values())[1:]
    assert [p.name for p in params] == ["epsilon", "max_length"]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params)


@pytest.mark.parametrize("name", ["cms", "hcms", "pem"])
def test_payloads_a_list_an_iterator_and_the_batch_tally_alike(name: str) -> None:
    mech = create(name, epsilon=1.0, max_length=4, width=8, depth=2)
    batch = mech.perturb_many(["ab", "c", "dd"] * 40, rng=6)
    payloads = mech.encode_many(batch)
    tally = mech.tally(batch)
    assert tally.n == 120 and tally == mech.tally(payloads) == mech.tally(iter(payloads))
    assert tally == mech.tally(batch[:70]) + mech.tally(payloads[70:])

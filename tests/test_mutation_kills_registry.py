"""Tests that kill surviving mutants of ``client_sdk/mechanisms/registry.py`` (issue 21).

``compare`` (the ``auto`` choice): its stated reason quotes the chosen candidate's own criterion
and the best of the other usable ones; ``max_report_bytes`` must be an integer >= 1 and
excludes exactly the candidates whose reports are larger; with expected frequencies OLH's hash
range is the one optimal for them. ``create`` refuses an open-domain mechanism given a domain,
bounds or attributes.
"""

from __future__ import annotations

from typing import Any

import pytest

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms import create
from client_sdk.mechanisms.olh import optimal_hash_range
from client_sdk.mechanisms.registry import AUTO_CANDIDATES, compare
from client_sdk.mechanisms.subset import keeps_patterns


@pytest.mark.parametrize(
    ("epsilon", "k", "cap"),
    [(1.0, 20, None), (4.0, 14, None), (0.5, 3, None), (1.0, 20, 1), (3.0, 100, 3)],
)
def test_the_reason_quotes_the_chosen_and_the_next_best_criterion(
    epsilon: float, k: int, cap: int | None
) -> None:
    choice = compare(epsilon, k, max_report_bytes=cap)
    chosen = choice.chosen
    mine = next(c for c in choice.candidates if c.name == chosen.name)
    assert mine.mechanism is chosen
    assert choice.reason.startswith(
        f"{chosen.name} has the smallest estimator variance for epsilon={epsilon:g}, k={k}: "
        f"{mine.mean_variance:.4g} per report"
    )
    rivals = [c for c in choice.candidates if c.excluded is None and c.name != chosen.name]
    assert rivals
    best = min(rivals, key=lambda c: c.mean_variance)
    assert choice.reason.endswith(f"; next best {best.name} {best.mean_variance:.4g}")
    assert all(mine.mean_variance <= c.mean_variance + 1e-9 for c in rivals)


@pytest.mark.parametrize("cap", [0, -1, True, 1.5, "2"])
def test_a_report_cap_below_one_byte_or_not_an_integer_is_refused(cap: Any) -> None:
    with pytest.raises(InvalidParameter, match="max_report_bytes must be an integer >= 1"):
        compare(1.0, 20, max_report_bytes=cap)


@pytest.mark.parametrize("cap", [1, 2, 3, 7, 8, 100])
def test_the_cap_excludes_exactly_the_larger_reports(cap: int) -> None:
    choice = compare(1.0, 20, max_report_bytes=cap)
    assert [c.name for c in choice.candidates] == list(AUTO_CANDIDATES)
    for c in choice.candidates:
        assert c.mechanism is not None
        assert (c.excluded is not None) == (c.mechanism.report_bytes > cap), c
    assert choice.chosen.report_bytes <= cap
    assert create("auto", epsilon=1.0, domain=20, max_report_bytes=cap) == choice.chosen


@pytest.mark.parametrize("epsilon", [1.0, 4.0])
def test_with_expected_frequencies_olh_uses_the_hash_range_optimal_for_them(
    epsilon: float,
) -> None:
    k = 14
    expected = [0.5] + [0.5 / (k - 1)] * (k - 1)
    choice = compare(epsilon, k, expected=expected)
    olh = next(c for c in choice.candidates if c.name == "olh")
    assert olh.mechanism is not None
    assert olh.mechanism.params() == {"g": optimal_hash_range(epsilon, k, expected)}
    others = {c.name: c.mechanism for c in choice.candidates if c.name != "olh"}
    for name, mech in others.items():
        plain = create(name, epsilon=epsilon, domain=k)
        if name == "ss":  # auto's SS keeps its pattern counts where C(k, d) allows
            d = plain.d  # type: ignore[attr-defined]
            plain = create("ss", epsilon=epsilon, domain=k, d=d, patterns=keeps_patterns(k, d))
        assert mech is not None and mech == plain, name


@pytest.mark.parametrize(
    "extra",
    [{"domain": ["a", "b"]}, {"domain": 4}, {"bounds": (0, 1)}, {"attributes": {"a": ["x", "y"]}}],
)
@pytest.mark.parametrize("name", ["cms", "hcms", "pem"])
def test_an_open_domain_mechanism_takes_no_domain_bounds_or_attributes(
    name: str, extra: dict[str, Any]
) -> None:
    with pytest.raises(InvalidParameter, match="without domain, bounds or attributes"):
        create(name, epsilon=1.0, max_length=8, **extra)
    assert create(name, epsilon=1.0, max_length=8).name == name


@pytest.mark.parametrize("extra", [{"domain": ["a", "b"]}, {"domain": 4}, {"bounds": (0, 1)}])
@pytest.mark.parametrize("name", ["spl", "smp", "rsfd", "auto"])
def test_a_multi_attribute_mechanism_takes_no_domain_or_bounds(
    name: str, extra: dict[str, Any]
) -> None:
    attributes = {"colour": ["red", "green"], "size": ["S", "M", "L"]}
    with pytest.raises(InvalidParameter, match="give attributes"):
        create(name, epsilon=1.0, attributes=attributes, **extra)
    assert create(name, epsilon=1.0, attributes=attributes).kind == "multi"

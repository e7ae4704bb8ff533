"""The answer classes of ``aggregator.results`` are immutable dataclasses (issue 21).

They are the wire contract (``to_json`` serves them, ``json_schema`` publishes them), and a
cached answer is shared between requests: every class must be a dataclass in its own right (its
own fields in its constructor and schema, not only its base's) and frozen, so no code can change
an answer after it was computed. Mutation testing removed ``@dataclass`` or made one unfrozen
and nothing noticed.
"""

from __future__ import annotations

import dataclasses
import inspect

import pytest

from aggregator import results
from aggregator.results import (
    Atom,
    HistogramBin,
    Interval,
    OpenDomainEstimates,
    OpenValueEstimate,
    QuantileRow,
    TopKSummary,
)

CLASSES = [
    cls
    for _, cls in inspect.getmembers(results, inspect.isclass)
    if cls.__module__ == results.__name__
]


def test_the_module_defines_its_answer_classes() -> None:
    names = {cls.__name__ for cls in CLASSES}
    assert {"Interval", "FrequencyEstimates", "OpenDomainEstimates", "TopKSummary"} <= names
    assert len(CLASSES) >= 20


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_answer_class_is_its_own_frozen_dataclass(cls: type) -> None:
    # ``__dataclass_params__`` is inherited: look in the class's own namespace.
    params = cls.__dict__.get("__dataclass_params__")
    assert params is not None, f"{cls.__name__} is not decorated with @dataclass"
    assert params.frozen
    names = {f.name for f in dataclasses.fields(cls)}
    assert set(cls.__dict__.get("__annotations__", {})) <= names


def test_answers_reject_assignment() -> None:
    made = [
        Interval(level=0.95, low=1.0, high=2.0),
        TopKSummary(level=0.95, alpha=0.05, z=2.4, sigma0=10.0, threshold=24.0, values=[]),
        HistogramBin(low=0.0, high=1.0, center=0.5, frequency=0.2, ci_low=0.1, ci_high=0.3),
        Atom(value=3.0, frequency=0.2, ci_low=0.1, ci_high=0.3),
        QuantileRow(q=0.5, value=1.0, low=0.5, high=1.5),
        OpenValueEstimate(
            value="x", count=5.0, std_error=1.0, ci_low=3.0, ci_high=7.0, significant=True
        ),
    ]
    for answer in made:
        name = dataclasses.fields(answer)[0].name
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(answer, name, 0)


def test_an_open_domain_answer_takes_its_own_fields() -> None:
    answer = OpenDomainEstimates(
        campaign="c",
        from_=None,
        to=None,
        windows=["2026-11-01"],
        n=10,
        min_reports=1,
        mechanism="pem",
        params={},
        epsilon=1.0,
        realised_epsilon=1.0,
        level=0.95,
        max_length=8,
        discovers=True,
        top=10,
        discovered=[],
        threshold=None,
        candidates=[],
        candidate_z=None,
        trend=[],
        note="n",
    )
    assert answer.kind == "open_domain" and answer.max_length == 8 and answer.top == 10
    assert answer.reports_deleted == []

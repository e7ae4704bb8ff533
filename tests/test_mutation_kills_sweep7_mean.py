"""Mutants of the declared numeric values (``expected``) that the tests let through.

Found by mutation testing of the lines changed since d245125 (``client_sdk/mechanisms/numeric/
mean.py``: ``check_expected_values``, ``expected_variance``, ``choose_mean(expected=)``;
``client_sdk/mechanisms/multi/``: declared numeric attributes, stored mean mechanisms),
docs/MUTATION.md "Runs of the seventh sweep". Each test names the mutant it kills.
"""

from __future__ import annotations

from typing import Any

import pytest

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms.multi import MultiMechanism
from client_sdk.mechanisms.multi import create as create_multi
from client_sdk.mechanisms.multi.mechanism import optimal_weights

SEX_AGE = {"sex": ["F", "M"], "age": {"bounds": [17, 90]}}
AGE = {"mean": 38.6, "sd": 13.6}


def test_optimal_weights_without_declared_values_are_the_uniform_data_ones() -> None:
    """Kills ``[None] - len(mechs)`` (and ``** len``) in ``optimal_weights``: called without
    ``expected`` (its public default), the weights are those at uniform data, which
    ``weights="optimal"`` of an undeclared campaign computes with every component's ``None``."""
    best = create_multi("smp", epsilon=2.0, attributes=SEX_AGE, weights="optimal")
    assert best.weights is not None
    assert optimal_weights(best.mechanisms) == best.weights
    assert optimal_weights(best.mechanisms, [None, None]) == best.weights


@pytest.mark.parametrize(
    ("means", "words"),
    [
        ({"sex": "duchi"}, "attribute 'sex' is categorical"),
        ({"height": "duchi"}, "no attribute 'height'"),
    ],
)
def test_a_stored_mean_mechanism_for_no_numeric_attribute_is_refused(
    means: dict[str, str], words: str
) -> None:
    """Kills the check loop over ``means`` run zero times in ``MultiMechanism.__init__``: a
    mean mechanism named for a categorical attribute, or for none declared, was ignored."""
    for protocol in ("spl", "smp"):
        with pytest.raises(InvalidParameter, match=words):
            MultiMechanism(protocol, epsilon=2.0, attributes=SEX_AGE, means=means)
    named = MultiMechanism("spl", epsilon=2.0, attributes=SEX_AGE, means={"age": "duchi"})
    assert named.mechanisms[1].name == "duchi"


def test_smp_s_criterion_counts_one_device_s_sampling_term_at_uniform_weights() -> None:
    """Kills ``sampling_variance(m, 3, e)`` and ``(m, 1, e)`` in ``MultiMechanism._terms`` (and
    ``spread / spread`` in ``sampling_variance``): SMP's criterion at uniform sampling is the
    mean over the components of ``V_j / pi + s_j (1 / pi - 1)`` with ``s_j`` one device's
    sampling term, written out here: ``f (1 - f)`` per value of a categorical attribute of k
    values, at ``f = 1/k``, and ``(sd / (high - low))**2`` for a numeric one that declares its
    values."""
    from client_sdk.mechanisms.multi.mechanism import report_variance
    from client_sdk.mechanisms.numeric import ExpectedValues

    attributes = {"sex": ["F", "M", "X"], "age": {"bounds": [17, 90], "expected": AGE}}
    mech = create_multi("smp", epsilon=2.0, attributes=attributes)
    assert mech.weights is None and mech.d == 2
    declared = ExpectedValues(AGE["mean"], AGE["sd"])
    assert mech.declared == (None, declared)
    s = [(1 / 3) * (2 / 3), (AGE["sd"] / (90 - 17)) ** 2]
    v = [report_variance(mech.mechanisms[0]), report_variance(mech.mechanisms[1], declared)]
    pi = 1 / 2
    expected = sum(v[j] / pi + s[j] * (1 / pi - 1) for j in range(2)) / 2
    assert mech.variance_criterion() == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("protocol", ["spl", "rsfd"])
def test_only_smp_has_a_sampling_term(protocol: str) -> None:
    """Kills ``else -1.0`` for ``else 0.0`` in ``MultiMechanism._terms``: SPL's (and RS+FD's)
    reports carry every attribute, so no sampling term (``_terms``' contract). SPL's criterion
    takes ``s_j`` only as ``s_j (1 / pi - 1)`` with ``pi = 1`` and, with categorical pairs, as
    ``(V + s) - s``: the mutant moved it by a rounding of ``V - 1 + 1`` only."""
    attributes: dict[str, Any] = {"sex": ["F", "M"], "occ": ["a", "b", "c"]}
    if protocol == "spl":
        attributes = {**attributes, "age": {"bounds": [17, 90], "expected": AGE}}
    mech = create_multi(protocol, epsilon=2.0, attributes=attributes)
    variances, sampling = mech._terms()
    assert sampling == [0.0] * mech.d and len(variances) == mech.d
    assert mech.sampling_probabilities == (1.0,) * mech.d


@pytest.mark.parametrize("entry", ["duchi", ["duchi"], None, {"mechanism": 5}])
def test_a_stored_per_attribute_entry_that_is_no_object_is_refused(entry: object) -> None:
    """Kills ``isinstance(sub, Mapping)`` left out of ``_stored_means``: a config's
    ``per_attribute`` entry that is no object is refused as differing from the rebuilt
    mechanisms (an InvalidParameter), not read with ``.get`` (an AttributeError); and ``if
    True`` for ``isinstance(name, str) and ...``: an entry naming no mechanism by a string is
    not taken as a name (the rebuild chooses, and the entry differs from its choice)."""
    from client_sdk.mechanisms.multi import from_config

    config = create_multi("spl", epsilon=2.0, attributes=SEX_AGE).config()
    assert from_config(config).config() == config
    per_attribute = list(config["params"]["per_attribute"])
    per_attribute[1] = entry
    bad = {**config, "params": {**config["params"], "per_attribute": per_attribute}}
    with pytest.raises(InvalidParameter, match="per-attribute mechanisms differ"):
        from_config(bad)

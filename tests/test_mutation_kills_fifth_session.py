"""Kill tests for the survivors of the fifth session's mutation runs (docs/MUTATION.md).

* ``multi/mechanism.py``: every pair component of an SPL report is perturbed from its joint
  index (``j >= len(attributes)``, not only the first pair's), and the exact output law of a
  categorical pair is taken at the joint index ``ia * kb + ib``.
* ``longitudinal.py``: rappor's exact output law keeps each true bit with probability
  ``p* = a / 2**128`` (a Fraction, not a floor division to 0).
"""

from __future__ import annotations

from fractions import Fraction

from client_sdk.mechanisms import create
from client_sdk.mechanisms.multi import create as create_multi

ATTRS = {"a": ["x", "y"], "b": ["p", "q", "r"], "c": ["u", "v"]}


def test_every_pair_component_of_an_spl_report_is_perturbed_from_its_joint_index() -> None:
    mech = create_multi("spl", epsilon=3.0, attributes=ATTRS, pairs=[["a", "b"], ["a", "c"]])
    width = len(ATTRS)
    for record in ({"a": "y", "b": "r", "c": "v"}, {"a": "x", "b": "p", "c": "u"}):
        report = mech.perturb(record)
        assert len(report) == width + 2
        for j in (width, width + 1):  # both pair components: indices into the joint domain
            pair = mech.mechanisms[j]
            assert pair.check_payload(report[j]) is not None


def test_a_categorical_pairs_exact_law_is_at_the_joint_index() -> None:
    mech = create_multi("spl", epsilon=3.0, attributes=ATTRS, pairs=[["a", "b"]])
    width = len(ATTRS)
    pair = mech.mechanisms[width]
    for ia, ib in ((1, 2), (1, 0), (0, 2)):
        law = mech.output_distribution([ia, ib, 0])
        # The pair's marginal of the whole report's law is its own law at ia * 3 + ib.
        marginal: dict[object, Fraction] = {}
        for key, prob in law.items():
            marginal[key[width]] = marginal.get(key[width], Fraction(0)) + prob
        assert marginal == pair.output_distribution(ia * 3 + ib), (ia, ib)


def test_rappor_exact_law_keeps_each_true_bit_with_p_star() -> None:
    mech = create("rappor", epsilon=1.0, domain=["a", "b", "c"])
    law = mech.output_distribution(1)
    assert sum(law.values()) == 1
    kept = sum(prob for key, prob in law.items() if _bit(key, 1))
    assert kept == Fraction(
        mech._effective_numerator(mech.threshold_permanent, mech.threshold_instant),
        2**128,
    )
    assert abs(float(kept) - mech.p_star) < 1e-15 and 0.5 < kept < 1


def _bit(key: object, i: int) -> int:
    """Bit ``i`` of an output key (a tuple of bits or an integer bit mask)."""
    if isinstance(key, tuple):
        return int(key[i])
    assert isinstance(key, int)
    return (key >> i) & 1

"""Bad arguments and malformed reports get clear errors; parsers reject garbage."""

from __future__ import annotations

import base64
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from client_sdk.errors import InvalidParameter, InvalidReport, LDPError, ValueNotInDomain
from client_sdk.mechanisms import MECHANISMS, Tally, create, from_config

NAMES = ["grr", "sue", "oue", "olh", "hr", "ss"]
ALL = ["rr", *NAMES]


def build(name: str, epsilon: float = 1.0, k: int = 14):
    return create(name, epsilon=epsilon, domain=2 if name == "rr" else k)


@pytest.mark.parametrize("name", ALL)
@pytest.mark.parametrize(
    ("epsilon", "fragment"),
    [
        (0, "finite number > 0, got 0.0"),
        (-1.0, "finite number > 0, got -1.0"),
        (math.nan, "finite number > 0, got nan"),
        (math.inf, "finite number > 0, got inf"),
        ("1", "finite number > 0, got '1' (str)"),
        (True, "finite number > 0, got True"),
        (None, "needs epsilon"),
        (17.0, "must be <= 16"),
        (1e-13, "must be >= 1e-12"),
        (1e-17, "must be >= 1e-12"),
    ],
)
def test_bad_epsilon_is_refused_with_the_rule(name: str, epsilon: object, fragment: str) -> None:
    with pytest.raises(InvalidParameter, match="epsilon") as info:
        create(name, epsilon=epsilon, domain=2 if name == "rr" else 5)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("domain", "fragment"),
    [
        (["a", "b", "a"], "'a' appears more than once"),
        (["only"], "at least 2 values, got 1"),
        ([], "at least 2 values, got 0"),
        (1, "at least 2 values, got 1"),
        (["a", 3], "label #1 must be a non-empty string"),
        (["a", ""], "label #1 must be a non-empty string"),
        (["a", "x" * 201], "at most 200 allowed"),
        ("abc", "list of labels or a size k"),
    ],
)
@pytest.mark.parametrize("name", NAMES)
def test_bad_domain_is_refused(name: str, domain: object, fragment: str) -> None:
    with pytest.raises(InvalidParameter) as info:
        create(name, epsilon=1.0, domain=domain)
    assert fragment in str(info.value)


@pytest.mark.parametrize(("name", "limit"), [("oue", 4096), ("sue", 4096), ("ss", 4096)])
def test_absurd_report_sizes_are_refused_naming_the_limit(name: str, limit: int) -> None:
    with pytest.raises(InvalidParameter, match=f"at most {limit} domain values, got {limit + 1}"):
        create(name, epsilon=1.0, domain=limit + 1)


def test_rr_needs_a_binary_domain() -> None:
    with pytest.raises(InvalidParameter, match="at most 2 domain values, got 3"):
        create("rr", epsilon=1.0, domain=["a", "b", "c"])


def test_unknown_mechanism_lists_the_known_ones() -> None:
    with pytest.raises(InvalidParameter, match="unknown mechanism 'xyz'; known: rr, grr"):
        create("xyz", epsilon=1.0, domain=3)


def test_bad_mechanism_parameters() -> None:
    with pytest.raises(InvalidParameter, match="subset size d must be an integer in \\[1, 13\\]"):
        create("ss", epsilon=1.0, domain=14, d=14)
    with pytest.raises(InvalidParameter, match="hash range g"):
        create("olh", epsilon=1.0, domain=14, g=1)
    with pytest.raises(InvalidParameter, match="bad parameters for 'grr'"):
        create("grr", epsilon=1.0, domain=14, colour="red")
    with pytest.raises(InvalidParameter, match="p=0.75 implies epsilon"):
        create("rr-two-coin", epsilon=1.0, domain=2)
    with pytest.raises(InvalidParameter, match="max_report_bytes applies only to 'auto'"):
        create("oue", epsilon=1.0, domain=3, max_report_bytes=4)


@pytest.mark.parametrize("name", ALL)
def test_value_outside_the_domain_names_the_domain_size(name: str) -> None:
    mech = create(
        name, epsilon=1.0, domain=["Sales", "Tech"] if name == "rr" else ["Sales", "Tech", "Farm"]
    )
    with pytest.raises(ValueNotInDomain) as info:
        mech.perturb("Salez")
    assert f"({mech.k} values; did you mean 'Sales'?)" in str(info.value)
    with pytest.raises(ValueNotInDomain):
        mech.perturb(3)  # an index is not a label
    with pytest.raises(InvalidParameter, match=f"index must be in \\[0, {mech.k}\\)"):
        mech.perturb_index(mech.k)
    with pytest.raises(InvalidParameter, match="outside the domain"):
        mech.perturb_many(np.array([0, mech.k]))


def _malformed(name: str) -> list[object]:
    common: list[object] = [None, 1.5, True, {"a": 1}, "", [1, 2]]
    if name in ("grr", "rr", "hr"):
        return [*common, -1, 10**6, "3"]
    if name == "olh":
        return [*common, [1, 2], [0, 1, 1], [1, 2**31, 1], [1, 1, 99], [1, 1, 1, 1], ["1", 1, 1]]
    # bit vectors over k = 14: 2 bytes -> 4 base64 characters
    return [
        *common,
        "AAAAAA==",  # 4 bytes
        "@@@=",  # not base64
        base64.b64encode(bytes([0, 0xFF])).decode(),  # padding bits set
        3,
    ]


@pytest.mark.parametrize("name", ALL)
def test_malformed_wire_reports_are_refused(name: str) -> None:
    mech = build(name)
    for payload in _malformed(name):
        with pytest.raises(InvalidReport):
            mech.check_payload(payload)
        with pytest.raises(InvalidReport) as info:
            mech.decode_many([mech.perturb_index(0), payload])
        assert info.value.index == 1
        assert "report #1" in str(info.value)


def test_subset_report_with_the_wrong_number_of_values_is_refused() -> None:
    mech = create("ss", epsilon=1.0, domain=14)
    too_many = base64.b64encode(bytes([0xFF, 0])).decode()
    with pytest.raises(InvalidReport, match=f"exactly {mech.d} values, got 8"):
        mech.check_payload(too_many)
    with pytest.raises(InvalidReport, match="report #0"):
        mech.decode_many([too_many])


@pytest.mark.parametrize("name", ALL)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_reports_stay_in_the_output_space(name: str, data: st.DataObject) -> None:
    mech = build(name)
    index = data.draw(st.integers(0, mech.k - 1))
    seed = data.draw(st.integers(0, 2**32 - 1))
    payload = mech.perturb_index(index, rng=seed)
    assert mech.check_payload(payload) == payload
    assert mech.decode_many([payload]).shape[0] == 1


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=8,
)


@pytest.mark.parametrize("name", ALL)
@settings(max_examples=150, deadline=None)
@given(payload=JSONISH)
def test_parsers_accept_or_refuse_garbage_cleanly(name: str, payload: object) -> None:
    mech = build(name)
    try:
        mech.check_payload(payload)
    except InvalidReport:
        return
    # Whatever is accepted is a report the mechanism could have produced.
    assert mech.tally([payload]).n == 1


def test_every_error_derives_from_the_package_base() -> None:
    for exc in (InvalidParameter, InvalidReport, ValueNotInDomain):
        assert issubclass(exc, LDPError)
        assert issubclass(exc, ValueError)


@pytest.mark.parametrize("name", ALL)
def test_config_round_trip_and_digest(name: str) -> None:
    mech = build(name, epsilon=0.7)
    again = from_config(mech.config())
    assert again == mech and again.digest() == mech.digest()
    assert again.threshold_p if name in ("sue", "oue") else True
    assert create(name, epsilon=0.71, domain=mech.k).digest() != mech.digest()


def test_from_config_refuses_garbage() -> None:
    with pytest.raises(InvalidParameter, match="not a mechanism config"):
        from_config({"epsilon": 1})
    with pytest.raises(InvalidParameter, match="unknown mechanism"):
        from_config({"mechanism": "nope", "epsilon": 1, "domain": ["a", "b"]})


def test_tallies_add_and_refuse_mismatches() -> None:
    mech = create("oue", epsilon=1.0, domain=5)
    a = mech.tally(mech.perturb_many(np.arange(5), rng=1))
    b = mech.tally(mech.perturb_many(np.arange(5), rng=2))
    both = a + b
    assert both.n == 10 and np.array_equal(both.support, a.support + b.support)
    assert Tally.from_dict(both.to_dict()) == both
    with pytest.raises(InvalidParameter, match="cannot add tallies over 5 and 3"):
        a + Tally.empty(3)
    with pytest.raises(InvalidParameter, match="cannot add tallies over 3 and 5"):
        Tally.empty(3) + a
    with pytest.raises(InvalidParameter, match="support count"):
        Tally(1, np.array([2, 0]))


def test_registry_is_an_explicit_dict() -> None:
    assert {"rr", "grr", "sue", "oue", "olh", "hr", "ss"} <= set(MECHANISMS)
    for name, cls in MECHANISMS.items():
        assert cls.name == name


BASE64_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=@ é"


@settings(max_examples=200, deadline=None)
@given(
    k=st.sampled_from([3, 8, 14, 17, 42]),
    seed=st.integers(0, 2**32 - 1),
    mutations=st.lists(
        st.tuples(st.integers(0, 9), st.integers(0, 60), st.sampled_from(BASE64_CHARS)),
        max_size=3,
    ),
)
def test_vectorised_bitvector_decoding_agrees_with_the_per_report_parser(
    k: int, seed: int, mutations: list[tuple[int, int, str]]
) -> None:
    """The batch decoder accepts exactly what ``decode_one`` accepts, with the same bytes."""
    from client_sdk.mechanisms import bitvector

    mech = create("oue", epsilon=1.0, domain=k)
    payloads = mech.encode_many(mech.perturb_many(np.arange(10) % k, rng=seed))
    for row, pos, char in mutations:
        text = payloads[row]
        pos %= len(text) + 1
        payloads[row] = text[:pos] + char + text[pos + 1 :]
    expected_error = None
    expected = []
    for i, payload in enumerate(payloads):
        try:
            expected.append(bitvector.decode_one(payload, k))
        except InvalidReport:
            expected_error = i
            break
    if expected_error is None:
        rows = bitvector.decode_rows(payloads, k)
        assert rows.tobytes() == b"".join(expected)
    else:
        with pytest.raises(InvalidReport) as info:
            bitvector.decode_rows(payloads, k)
        assert info.value.index == expected_error


def _every_kind(epsilon: float) -> list:
    """One mechanism of every registered name and kind at ``epsilon``."""
    from client_sdk.mechanisms import NUMERIC_MECHANISMS, OPEN_MECHANISMS

    mechs = [build(name, epsilon, k=5) for name in (*sorted(MECHANISMS), "auto")]
    mechs += [create(n, epsilon=epsilon, bounds=(0, 10)) for n in sorted(NUMERIC_MECHANISMS)]
    mechs += [create(n, epsilon=epsilon, max_length=8) for n in sorted(OPEN_MECHANISMS)]
    return mechs


def test_the_smallest_epsilon_is_realised_by_every_mechanism_and_less_is_refused() -> None:
    # Below 2**-50 the thresholds' safety margin pushes e^eps under 1: grr, ss, square_wave and
    # the sketches then kept the true value *less* often than another value (a negative
    # realised epsilon, a ratio above the claim) and olh divided by zero.
    from client_sdk.mechanisms import MIN_EPSILON, NUMERIC_MECHANISMS, OPEN_MECHANISMS

    mechs = _every_kind(MIN_EPSILON)
    assert len(mechs) == len(MECHANISMS) + 1 + len(NUMERIC_MECHANISMS) + len(OPEN_MECHANISMS)
    for mech in mechs:
        assert 0 < mech.realised_epsilon <= MIN_EPSILON, mech.name
    below = math.nextafter(MIN_EPSILON, 0)
    for name in (*sorted(MECHANISMS), "auto"):
        with pytest.raises(InvalidParameter, match="must be >= 1e-12"):
            build(name, below, k=5)
    for name in sorted(NUMERIC_MECHANISMS):
        with pytest.raises(InvalidParameter, match="must be >= 1e-12"):
            create(name, epsilon=below, bounds=(0, 10))
    for name in sorted(OPEN_MECHANISMS):
        with pytest.raises(InvalidParameter, match="must be >= 1e-12"):
            create(name, epsilon=below, max_length=8)


def test_a_multi_attribute_split_below_the_smallest_epsilon_says_which_attribute() -> None:
    attributes = {"a": ["x", "y", "z"], "b": {"bounds": [0, 1]}}
    with pytest.raises(InvalidParameter, match="attribute 'a' would get epsilon 5e-13"):
        create("spl", epsilon=1e-12, attributes=attributes)
    assert create("spl", epsilon=2e-12, attributes=attributes).realised_epsilon <= 2e-12


def test_a_tally_refuses_counts_it_would_have_to_truncate() -> None:
    # Tally(3, [1.5, ...]) used to become [1, ...] silently, and 10**30 raised OverflowError.
    from client_sdk.mechanisms import NUMERIC_MECHANISMS, OPEN_MECHANISMS

    assert Tally(3, np.array([1.0, 2.0])) == Tally(3, [1, 2])  # whole floats are counts
    assert Tally(3, np.array([0.0, 3.0])) == Tally(3, [0, 3])  # both ends of [0, n]
    assert Tally(3, np.array([0, 3], dtype=np.uint16)).vector() == [0, 3]
    with pytest.raises(InvalidParameter, match="must be an integer"):
        Tally(3, np.array([1, 2], dtype="timedelta64[s]"))  # integers in storage only
    assert Tally(3, [np.uint8(1), 2]).vector() == [1, 2]
    for support, fragment in [
        ([1.5, 1], "whole number"),
        ([math.nan, 1], "whole number"),
        ([True, False], "must be an integer"),
        (["1", 1], "must be an integer"),
        ([10**30, 1], r"\[0, n\]"),
        ([4, 1], r"\[0, n\]"),
        ([-1, 1], r"\[0, n\]"),
    ]:
        with pytest.raises(InvalidParameter, match=fragment):
            Tally(3, support)
    for n in (3.5, True, 2**63, -1):
        with pytest.raises(InvalidParameter, match="n must be an integer"):
            Tally(n, [0, 0])  # type: ignore[arg-type]
    for name in (*sorted(MECHANISMS), "auto"):
        mech = build(name, k=3)
        k = 2 if name == "rr" else 3
        assert mech.tally_from(4, [1] * k).vector() == [1] * k
        for bad in ([1.5] * k, ["a"] * k, [10**30] * k):
            with pytest.raises(InvalidParameter):
                mech.tally_from(4, bad)
    for name in sorted(NUMERIC_MECHANISMS):
        mech = create(name, epsilon=1.0, bounds=(0, 10))
        size = len(mech.tally_fields)
        for n, bad in ((3, [1.5] * size), (3, "abc"), (3.7, [1] * size)):
            with pytest.raises(InvalidParameter):
                mech.tally_from(n, bad)  # type: ignore[arg-type]
    for name in sorted(OPEN_MECHANISMS):
        mech = create(name, epsilon=1.0, max_length=8)
        with pytest.raises(InvalidParameter, match="whole number"):
            mech.tally_from(3, [0.5] * mech.tally_size)
    multi = create("spl", epsilon=1.0, attributes={"a": ["x", "y"], "b": ["u", "v"]})
    good = multi.tally_from(2, multi.empty_tally().vector()[:-2] + [2, 2])
    assert good.n == 2
    with pytest.raises(InvalidParameter, match="carried count must be an integer"):
        multi.tally_from(2, multi.empty_tally().vector()[:-2] + [2.0, 2])


def test_a_number_beyond_the_float_range_is_clipped_like_infinity() -> None:
    mech = create("piecewise", epsilon=1.0, bounds=(0, 10))
    assert mech.clip(10**400) == 10.0 and mech.clip(-(10**400)) == 0.0
    assert mech.grid.round(10**400) == mech.grid.size and mech.grid.round(-(10**400)) == 0
    assert 0 <= mech.perturb(10**400) < mech.output_size


def test_a_keep_probability_is_refused_only_below_the_smallest_epsilon() -> None:
    from client_sdk.mechanisms import MIN_EPSILON

    assert create("rr", p=0.75, domain=2).epsilon == pytest.approx(math.log(3), rel=1e-12)
    assert create("sue", p=0.75, domain=4).epsilon == pytest.approx(2 * math.log(3), rel=1e-12)
    tiny = math.nextafter(0.5, 1)  # implies epsilon ~ 4e-16
    for name, k in (("rr", 2), ("sue", 4)):
        with pytest.raises(InvalidParameter, match="below the smallest epsilon"):
            create(name, p=tiny, domain=k)
    # Just above the floor is accepted: p with log(p / (1 - p)) = 2 MIN_EPSILON.
    p = 1 / (1 + math.exp(-2 * MIN_EPSILON))
    assert create("rr", p=p, domain=2).epsilon >= MIN_EPSILON

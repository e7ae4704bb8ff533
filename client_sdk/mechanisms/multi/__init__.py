"""Several attributes per device under one epsilon (issue 17; docs/MECHANISMS.md §22).

mech = create("auto", epsilon=1.0, attributes={"occupation": labels, "age": {"bounds": [17, 90]}})
report = mech.perturb({"occupation": "Sales", "age": 37})     # one device, OS randomness
tally = mech.tally(mech.perturb_many(columns, rng=7))          # exact, mergeable
# aggregator.estimate(mech, tally) -> per-attribute Estimate / MeanEstimate

Protocols: ``spl`` (split epsilon), ``smp`` (sample one attribute), ``rsfd`` (random sampling
plus fake data, categorical); ``auto`` picks the one with the smallest variance criterion.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from client_sdk.errors import InvalidParameter
from client_sdk.mechanisms.multi.mechanism import (
    PROTOCOLS,
    RSFD_ORACLES,
    Attribute,
    MultiBatch,
    MultiMechanism,
    MultiTally,
    optimal_weights,
    report_variance,
    rsfd_variance,
    sampling_variance,
)
from client_sdk.mechanisms.validation import config_parts

#: Names ``create`` accepts for a multi-attribute mechanism (``kind == "multi"``).
MULTI_MECHANISMS = (*PROTOCOLS, "auto")


@dataclass(frozen=True)
class ProtocolChoice:
    """What ``auto`` chose, and every candidate's criterion (None: not applicable)."""

    chosen: MultiMechanism
    criteria: dict[str, float | None]

    @property
    def reason(self) -> str:
        rows = ", ".join(
            f"{k} {'n/a' if v is None else format(v, '.4g')}" for k, v in self.criteria.items()
        )
        means = "".join(
            f"; {name}: {choice.chosen.name} by {choice.criterion}"
            for name, choice in self.chosen.mean_choices.items()
            if choice.expected is not None
        )
        return (
            f"{self.chosen.name} has the smallest per-report variance averaged over the "
            f"{'attributes and pairs' if self.chosen.pairs else 'attributes'} at "
            f"epsilon={self.chosen.epsilon:g} ({rows}){means}"
        )


def compare_protocols(
    *,
    epsilon: float,
    attributes: Mapping[str, Any],
    pairs: Iterable[Sequence[str]] | None = None,
) -> ProtocolChoice:
    """Build SPL, SMP (sampling each component with its optimal probability:
    :func:`optimal_weights`, or with categorical pairs the weights minimising the pair-aware
    criterion) and (all categorical) RS+FD with their best per-attribute mechanisms and pick
    the smallest :meth:`MultiMechanism.variance_criterion` (with pairs: over the attributes,
    combined with their pairs' margins, and the pairs' joint tables); ties go to the earlier
    of ``PROTOCOLS``. A numeric attribute that declares ``"expected": {"mean": m, "sd": s}``
    gets the mean mechanism of smallest variance averaged over such values and counts that
    variance, and their variance as SMP's sampling term, instead of the worst case and a
    uniform value's (docs/MECHANISMS.md §22). Deterministic."""
    criteria: dict[str, float | None] = {}
    best: MultiMechanism | None = None
    best_value = math.inf
    for protocol in PROTOCOLS:
        weights = "optimal" if protocol == "smp" else None
        try:
            mech = MultiMechanism(
                protocol, epsilon=epsilon, attributes=attributes, pairs=pairs, weights=weights
            )
        except InvalidParameter:
            if protocol == "rsfd":
                criteria[protocol] = None
                continue
            raise
        value = criteria[protocol] = mech.variance_criterion()
        if best is None or round(value, 12) < round(best_value, 12):
            best, best_value = mech, value
    assert best is not None
    return ProtocolChoice(best, criteria)


def create(
    name: str,
    *,
    epsilon: float,
    attributes: Mapping[str, Any],
    pairs: Iterable[Sequence[str]] | None = None,
    oracle: str = "auto",
    weights: Sequence[int] | str | None = None,
    means: Mapping[str, str] | None = None,
) -> MultiMechanism:
    """A multi-attribute mechanism: ``name`` in ``spl``, ``smp``, ``rsfd`` or ``auto``.

    ``attributes``: name -> list of labels, or ``{"bounds": [low, high]}`` (optionally
    ``"grid"``). ``oracle``: the frequency oracle of the categorical attributes (``auto``: the
    registry's best at each attribute's epsilon; RS+FD: grr or oue). ``weights`` (SMP only):
    the components' integer sampling weights, or ``"optimal"`` (what ``auto`` uses: those
    minimising the criterion, :func:`optimal_weights` without categorical pairs); default
    uniform. A numeric attribute may declare ``"expected": {"mean": m, "sd": s}``: its mean
    mechanism is then the one of smallest variance averaged over such values (else the worst
    case), and ``auto`` weighs it by that; the declaration is not part of :meth:`config`.
    ``means`` (what a stored config fixes, :func:`from_config`): per numeric attribute its
    mean mechanism by name.
    """
    if name == "auto":
        if oracle != "auto" or weights is not None:
            raise InvalidParameter("'auto' chooses the oracles and weights too: give neither")
        if means is not None:
            raise InvalidParameter(
                "'auto' chooses the numeric attributes' mean mechanisms too: declare their "
                'values instead ("expected" in an attribute\'s spec)'
            )
        return compare_protocols(epsilon=epsilon, attributes=attributes, pairs=pairs).chosen
    if name not in PROTOCOLS:
        raise InvalidParameter(
            f"unknown multi-attribute mechanism {name!r}; known: {', '.join(MULTI_MECHANISMS)}"
        )
    return MultiMechanism(
        name,
        epsilon=epsilon,
        attributes=attributes,
        pairs=pairs,
        oracle=oracle,
        weights=weights,
        means=means,
    )


def _stored_means(attributes: object, per_attribute: object) -> dict[str, str] | None:
    """Per numeric attribute, the mean mechanism a config's ``per_attribute`` names (in the
    attributes' layout order): ``auto`` chose it at creation, perhaps by values the campaign
    declared and the config does not hold, so a device rebuilds it by name. None when the
    config has no such list (the rebuild then chooses by the worst case, as before)."""
    if not isinstance(attributes, Mapping) or not isinstance(per_attribute, list):
        return None
    out = {}
    for (attr, spec), sub in zip(attributes.items(), per_attribute, strict=False):
        if isinstance(spec, Mapping) and "bounds" in spec and isinstance(sub, Mapping):
            name = sub.get("mechanism")
            if isinstance(name, str) and isinstance(attr, str):
                out[attr] = name
    return out


def from_config(config: Mapping[str, Any]) -> MultiMechanism:
    """Rebuild from :meth:`MultiMechanism.config` (the per-attribute choices are checked)."""
    name, epsilon, attributes, params = config_parts(
        config, "attributes", "a multi-attribute", splat=False
    )
    order = params.get("order")
    if order is not None:  # the layout's order, which a JSON store may have sorted away
        if (
            not isinstance(attributes, Mapping)
            or not isinstance(order, list)
            or not all(isinstance(a, str) for a in order)
            or sorted(order) != sorted(map(str, attributes))
        ):
            raise InvalidParameter("config's attribute order names other attributes")
        attributes = {attr: attributes[attr] for attr in order}
    means = _stored_means(attributes, params.get("per_attribute")) if name != "auto" else None
    mech = create(
        name,
        epsilon=epsilon,
        attributes=attributes,
        pairs=params.get("pairs"),
        oracle=params.get("oracle", "auto"),
        weights=params.get("weights"),
        means=means,
    )
    if "per_attribute" in params and params["per_attribute"] != mech.params()["per_attribute"]:
        raise InvalidParameter("config's per-attribute mechanisms differ from what they rebuild to")
    return mech


__all__ = [
    "Attribute",
    "MULTI_MECHANISMS",
    "MultiBatch",
    "MultiMechanism",
    "MultiTally",
    "PROTOCOLS",
    "ProtocolChoice",
    "RSFD_ORACLES",
    "compare_protocols",
    "create",
    "from_config",
    "optimal_weights",
    "report_variance",
    "rsfd_variance",
    "sampling_variance",
]

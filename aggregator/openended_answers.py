"""Open-domain answers of the estimate service (issue 16, docs/MECHANISMS.md §24).

Called by :func:`aggregator.service.estimate_range` for mechanisms of kind ``"open_domain"``.
The window tallies (sketches of exact integers) are summed and handed to the open-domain
estimators' public API; this module only lays their results out as the typed
:class:`~aggregator.results.OpenDomainEstimates`:

* a discovery mechanism (``pem``): ``aggregator.discover(mech, tally, top=k)``, the heavy
  hitters largest first, each with its count, standard error, interval and significance, and
  the discovery's threshold ``z * sigma0``;
* any open-domain mechanism, when the query names ``candidates``:
  ``aggregator.estimate(mech, tally, candidates=[...])``, each candidate's count in the order
  given (a frequency oracle, ``cms`` or ``hcms``, can only answer this way).

Privacy: computed from tallies of perturbed reports and public mechanism parameters only; a
candidate string is the analyst's question, never a device's value.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from aggregator.errors import NotEnoughReports
from aggregator.results import (
    DiscoveryThreshold,
    OpenDomainEstimates,
    OpenDomainTrendWindow,
    OpenValueEstimate,
)
from aggregator.service import EstimateQuery, header, sum_tallies
from client_sdk.errors import InvalidParameter

#: Discoveries listed when the query does not say (``EstimateQuery.top_k``).
DEFAULT_TOP = 10
#: Most discoveries one answer lists.
MAX_TOP = 200
#: Most candidate strings one query may ask about.
MAX_CANDIDATES = 500

#: What the answer's ``note`` says.
DISCOVERY_NOTE = (
    "discovered: the heavy hitters the prefix-extending walk finds, counts pooled over the "
    "levels that identify each string (selected by the same reports, so counts near the "
    "threshold carry a winner's-curse bias); candidates: unbiased counts of the strings asked "
    "about, their collisions with each other removed"
)
ORACLE_NOTE = (
    "this mechanism is a frequency oracle: it cannot discover heavy hitters, only count the "
    "candidate strings asked about (unbiased, their collisions with each other removed)"
)


def _finite(x: Any) -> float | None:
    """``x`` as a float, or None where no report measured it (infinite): JSON has no
    infinity, and a bare ``Infinity`` breaks standard parsers."""
    value = float(x)
    return value if math.isfinite(value) else None


def _row(item: Any) -> OpenValueEstimate:
    return OpenValueEstimate(
        value=str(item.value),
        count=float(item.count),
        std_error=_finite(item.std_error),
        ci_low=_finite(item.ci_low),
        ci_high=_finite(item.ci_high),
        significant=bool(item.significant),
    )


def check_candidates(candidates: Any) -> tuple[str, ...]:
    """``candidates`` as a tuple of strings (at most :data:`MAX_CANDIDATES`), or a clear error."""
    if isinstance(candidates, (str, bytes)) or not isinstance(candidates, (list, tuple)):
        raise InvalidParameter("candidates must be a list of strings")
    if len(candidates) > MAX_CANDIDATES:
        raise InvalidParameter(
            f"at most {MAX_CANDIDATES} candidates per query, got {len(candidates)}"
        )
    for c in candidates:
        if not isinstance(c, str):
            raise InvalidParameter(f"a candidate is a string, got {type(c).__name__}")
    return tuple(candidates)


def open_domain_answer(
    mechanism: Any, selected: Mapping[str, Any], q: EstimateQuery
) -> OpenDomainEstimates:
    """Discoveries and candidate counts over the selected windows (see the module doc)."""
    import aggregator

    top = DEFAULT_TOP if q.top_k is None else q.top_k
    if isinstance(top, bool) or not isinstance(top, int) or not 1 <= top <= MAX_TOP:
        raise InvalidParameter(f"top must be an integer in [1, {MAX_TOP}], got {top!r}")
    candidates = check_candidates(q.candidates)
    total = sum_tallies(mechanism, selected)
    need = max(1, q.min_reports)
    if total.n < need:
        raise NotEnoughReports(total.n, need)
    discovers = bool(getattr(mechanism, "discovers", False))
    discovered: list[OpenValueEstimate] = []
    threshold = None
    if discovers:
        found = aggregator.discover(mechanism, total, top=top, level=q.level)
        discovered = [_row(i) for i in found.items]
        threshold = DiscoveryThreshold(
            level=float(found.level),
            alpha=float(found.alpha),
            z=_finite(found.z),
            sigma0=_finite(found.sigma0),
            threshold=_finite(found.threshold),
            candidates_tested=int(found.candidates_tested),
        )
    counted: list[OpenValueEstimate] = []
    candidate_z = None
    if candidates:
        est = aggregator.estimate(mechanism, total, candidates=list(candidates), level=q.level)
        counted = [_row(i) for i in est.items]
        candidate_z = float(est.z)  # finite: a z for the reports there are
    trend = [OpenDomainTrendWindow(w, int(t.n)) for w, t in selected.items()] if q.trend else []
    return OpenDomainEstimates(
        **header(mechanism, list(selected), total.n, q),
        max_length=int(mechanism.max_length),
        discovers=discovers,
        top=top,
        discovered=discovered,
        threshold=threshold,
        candidates=counted,
        candidate_z=candidate_z,
        trend=trend,
        note=DISCOVERY_NOTE if discovers else ORACLE_NOTE,
    )

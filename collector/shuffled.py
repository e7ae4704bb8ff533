"""The central guarantee stated beside the estimates of a campaign sent through a shuffler.

``central_fields(campaign, body)`` gives ``central_epsilon`` and ``central_delta`` for an
estimate body of ``aggregator.estimate_windows`` when the campaign names a shuffler, else
nothing: each window is one shuffled release of its reports at the mechanism's realised ε0
(docs/MECHANISMS.md §21), and the windows of the range compose (``central_over_windows``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aggregator.amplification import central_over_windows
from collector.campaigns import Campaign


def central_fields(campaign: Campaign, body: Mapping[str, Any]) -> dict[str, float]:
    """``{"central_epsilon", "central_delta"}`` for a shuffled campaign; ``{}`` otherwise."""
    if not getattr(campaign, "shuffler", None):  # also page previews of a bare config
        return {}
    trend = body.get("trend") or []
    counts = [int(row.get("n") or 0) for row in trend] or [int(body.get("n") or 0)]
    eps, delta = central_over_windows(campaign.mechanism.realised_epsilon, counts)
    return {"central_epsilon": eps, "central_delta": delta}

"""What the on-device budget and the never-blocking ``report`` cost: ``report`` latency.

Run: .venv/bin/python bench/sdk_privacy.py [--calls N]

No collector is needed: a campaign config is written into the client's cache as the collector
would serve it, and the "collector" is a socket that accepts connections and never answers
(issue 13's reproducer). Prints, per case, p50/p99/max of one ``client.report`` call in us:

  budget, 1 campaign     default PrivacyBudget: each report composes the campaign's and the
                         device's charges in the period (basic, advanced, Kairouz) before the
                         outbox insert; per-report epsilon 0.01 so thousands fit the budget
  budget, 20 campaigns   the same with charges spread over 20 campaigns (device total)
  unlimited budget       PrivacyBudget.unlimited(): the charge is recorded, no bound computed
  not ready              a campaign not on the device: ``report`` returns NotSent at once while
                         the background fetch waits on the silent socket (before: 10 s block)
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import tempfile
import time
from pathlib import Path

from client_sdk import NotSent, PrivacyBudget, TelemetryClient
from client_sdk.config_cache import CACHE_DIR
from client_sdk.mechanisms import create

LABELS = [f"label-{i:02d}" for i in range(14)]


def cache_campaign(state: Path, campaign: str, epsilon: float) -> None:
    mech = create("grr", epsilon=epsilon, domain=LABELS)
    body = {
        "id": campaign,
        "digest": "0" * 64,
        "window": "day",
        "horizon_days": 30,
        "mechanism": mech.config(),
    }
    (state / CACHE_DIR).mkdir(parents=True, exist_ok=True)
    (state / CACHE_DIR / f"{campaign}.json").write_text(json.dumps({"etag": None, "body": body}))


def measure(client: TelemetryClient, campaigns: list[str], calls: int) -> list[float]:
    samples = []
    for i in range(calls):
        campaign = campaigns[i % len(campaigns)]
        start = time.perf_counter_ns()
        result = client.report(campaign, LABELS[i % len(LABELS)])
        samples.append((time.perf_counter_ns() - start) / 1000)
        if not result and result.reason != "not_ready":  # type: ignore[union-attr]
            raise SystemExit(f"unexpected refusal: {result}")
    return samples


def row(name: str, samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
    return (
        f"{name:<22} {statistics.median(ordered):>9.1f} {p99:>9.1f} {ordered[-1]:>10.1f}"
        f" {len(ordered):>7}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    args = parser.parse_args()
    with socket.socket() as silent, tempfile.TemporaryDirectory() as tmp:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        print(f"{'case':<22} {'p50 us':>9} {'p99 us':>9} {'max us':>10} {'calls':>7}")
        cases = [
            ("budget, 1 campaign", 1, PrivacyBudget()),
            ("budget, 20 campaigns", 20, PrivacyBudget()),
            ("unlimited budget", 1, PrivacyBudget.unlimited()),
        ]
        for name, n, budget in cases:
            state = Path(tmp) / name.replace(" ", "-").replace(",", "")
            campaigns = [f"c{i}" for i in range(n)]
            for campaign in campaigns:
                cache_campaign(state, campaign, 0.01)
            with TelemetryClient(
                url,
                ingest_token="bench",
                state_dir=state,
                budget=budget,
                reports_per_window=None,
                flush_interval=3600,
                close_timeout=0,
            ) as client:
                print(row(name, measure(client, campaigns, args.calls)), flush=True)
                spent = client.privacy_total()
                print(f"{'':<22} device spent {spent.epsilon:.3g} ({spent.bound})")
        with TelemetryClient(
            url, ingest_token="bench", state_dir=Path(tmp) / "nr", close_timeout=0
        ) as client:
            samples = measure(client, ["never-fetched"], min(args.calls, 200))
            assert isinstance(client.report("never-fetched", LABELS[0]), NotSent)
            print(row("not ready", samples))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

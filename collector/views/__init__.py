"""One small blueprint per resource."""

from collector.views import campaigns, estimates, health, reports

BLUEPRINTS = (campaigns.bp, reports.bp, estimates.bp, health.bp)

__all__ = ["BLUEPRINTS"]

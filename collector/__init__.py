"""The collector service: campaigns, report ingest, storage and the analyst endpoints."""

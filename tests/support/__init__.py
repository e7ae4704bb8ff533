"""Shared test helpers (a real ``ldp serve`` subprocess on a free loopback port)."""

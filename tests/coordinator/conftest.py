"""Fixtures of the coordinator tests; they are defined in tests/support."""

from support.coordinators import clock  # noqa: F401

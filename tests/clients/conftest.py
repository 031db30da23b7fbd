"""Fixtures for the real-client compatibility tests (tests/clients/)."""

from __future__ import annotations

import pytest



@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """On a failing client test, attach the tail of the shared broker's log to the report."""
    outcome = yield
    report = outcome.get_result()
    if report.failed and call.when in ("call", "teardown"):
        broker = getattr(item, "funcargs", {}).get("shared_broker")
        if broker is not None:
            report.sections.append(("kipper broker log (tail)",
                                    f"{broker.log_path}\n{broker.log_tail(60)}"))


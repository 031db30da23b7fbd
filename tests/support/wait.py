"""Polling until a condition holds."""

from __future__ import annotations

import time


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.05):
    """The first truthy value of ``predicate()``; TimeoutError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value is not None and value is not False:
            return value
        time.sleep(interval)
    raise TimeoutError("condition not met in time")

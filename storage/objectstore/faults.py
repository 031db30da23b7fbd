"""Fault injection: error rates, slow requests and outage windows, switchable at runtime.

Faults are applied in the client, before a request is sent, so they work the same against
the embedded server, MinIO or AWS. A fault spec is a JSON object:

    {"fault": "errors", "op": "put", "rate": 0.2}           fail 20% of PUT-kind requests
    {"fault": "slow", "op": "get", "rate": 0.1, "delay_ms": 2000}
    {"fault": "outage", "for_s": 10, "after_s": 0, "mode": "fail"}   or mode "hang"
    {"fault": "clear"}

"op" is one of put, get, delete, list or all (the default). A rate of 0 removes the fault.
An outage fails every request at once ("fail") or holds it for the read timeout and then
fails it ("hang"), like a store that accepts connections and never answers.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from .names import KINDS

ALL = "all"
# Where a node serves its faults over HTTP (storage.objectstore.admin).
ADMIN_PATH = "/admin/s3-faults"
OUTAGE_MODES = ("fail", "hang")


class InjectedFault(Exception):
    """A request failed on purpose; the client treats it like a 503 or a timeout."""


@dataclass(frozen=True)
class _Slow:
    rate: float
    delay_s: float


@dataclass(frozen=True)
class _Outage:
    start: float
    end: float
    mode: str


class FaultInjector:
    def __init__(self, rng: random.Random | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self._rng = rng or random.Random()
        self._clock = clock
        self._error_rates: dict[str, float] = {}
        self._slow: dict[str, _Slow] = {}
        self._outages: list[_Outage] = []

    def apply_fault(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """Apply one fault spec (see the module doc); return the resulting state."""
        if not isinstance(spec, Mapping):
            raise ValueError("a fault spec is a JSON object")
        fault = spec.get("fault")
        if fault == "clear":
            self._error_rates.clear()
            self._slow.clear()
            self._outages.clear()
        elif fault == "errors":
            self._set(self._error_rates, _op(spec), _rate(spec))
        elif fault == "slow":
            rate = _rate(spec)
            slow = _Slow(rate, _non_negative(spec, "delay_ms") / 1000) if rate else None
            self._set(self._slow, _op(spec), slow)
        elif fault == "outage":
            mode = spec.get("mode", "fail")
            if mode not in OUTAGE_MODES:
                raise ValueError(f"outage mode must be one of {', '.join(OUTAGE_MODES)}")
            start = self._clock() + _non_negative(spec, "after_s", default=0)
            self._outages.append(_Outage(start, start + _non_negative(spec, "for_s"), mode))
        else:
            raise ValueError(f"unknown fault {fault!r}: use errors, slow, outage or clear")
        return self.show()

    def show(self) -> dict[str, Any]:
        now = self._clock()
        self._outages = [o for o in self._outages if o.end > now]
        return {
            "errors": dict(self._error_rates),
            "slow": {op: {"rate": s.rate, "delay_ms": s.delay_s * 1000} for op, s in self._slow.items()},
            "outages": [
                {"starts_in_s": max(0.0, o.start - now), "ends_in_s": o.end - now, "mode": o.mode}
                for o in self._outages
            ],
        }

    async def before_request(self, kind: str, read_timeout_s: float) -> None:
        """Fail, hold or let through one request of this kind, as the faults say."""
        now = self._clock()
        for outage in self._outages:
            if outage.start <= now < outage.end:
                if outage.mode == "hang":
                    await asyncio.sleep(read_timeout_s)
                    raise InjectedFault("injected outage: read timeout")
                raise InjectedFault("injected outage: connection refused")
        rate = self._error_rates.get(kind, self._error_rates.get(ALL, 0.0))
        if rate and self._rng.random() < rate:
            raise InjectedFault(f"injected error on {kind}: 503 SlowDown")
        slow = self._slow.get(kind) or self._slow.get(ALL)
        if slow and self._rng.random() < slow.rate:
            await asyncio.sleep(slow.delay_s)

    @staticmethod
    def _set(table: dict[str, Any], op: str, value: Any) -> None:
        if value:
            table[op] = value
        else:
            table.pop(op, None)


def _op(spec: Mapping[str, Any]) -> str:
    op = spec.get("op", ALL)
    if op != ALL and op not in KINDS:
        raise ValueError(f"op must be one of {', '.join(KINDS)} or {ALL}")
    return op


def _rate(spec: Mapping[str, Any]) -> float:
    rate = spec.get("rate")
    if not isinstance(rate, (int, float)) or not 0 <= rate <= 1:
        raise ValueError("rate must be a number between 0 and 1")
    return float(rate)


def _non_negative(spec: Mapping[str, Any], name: str, default: float | None = None) -> float:
    value = spec.get(name, default)
    if not isinstance(value, (int, float)) or value < 0:
        raise ValueError(f"{name} must be a non-negative number")
    return float(value)

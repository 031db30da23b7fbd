"""Coalescing byte ranges of one object into as few GET requests as is worth it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence


@dataclass
class Span:
    """One GET: bytes [start, end) of the object, covering the requested ranges `members`."""

    start: int
    end: int
    members: list[int] = field(default_factory=list)


def coalesce(ranges: Sequence[tuple[int, int]], gap: int) -> list[Span]:
    """Group (start, length) ranges into spans, each read with one GET.

    Ranges are taken by start offset; one joins the current span when it begins at most
    `gap` bytes after the span ends (overlaps included). Empty ranges need no request and
    belong to no span.
    """
    for start, length in ranges:
        if start < 0 or length < 0:
            raise ValueError(f"invalid byte range (start={start}, length={length})")
    spans: list[Span] = []
    for index in sorted(range(len(ranges)), key=lambda i: ranges[i][0]):
        start, length = ranges[index]
        if length == 0:
            continue
        end = start + length
        if spans and start - spans[-1].end <= gap:
            spans[-1].end = max(spans[-1].end, end)
            spans[-1].members.append(index)
        else:
            spans.append(Span(start, end, [index]))
    return spans

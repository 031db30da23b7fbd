"""The lines kipper's processes print on stdout once they listen, and their one parser.

``kipper broker|controller`` prints ``node_line`` and, with ``--metrics-listener``, the
metrics line; the embedded S3 server prints ``storage.objectstore.embedded.LISTENING_LINE``
and its URL. ``kipper cluster up``, the bench scripts and the tests learn ports from them.
"""

from __future__ import annotations

import contextlib
import errno
import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from storage.objectstore.embedded import LISTENING_LINE as S3_LISTENING_LINE

METRICS_LISTENING_LINE = "kipper metrics listening on "
_NODE = re.compile(r"kipper (?P<role>broker|controller) (?P<node_id>\d+) listening on "
                   r"(?P<host>[\d.]+):(?P<port>\d+)(?: listeners (?P<listeners>\S+))?")


@dataclass(frozen=True)
class NodeListening:
    role: str
    node_id: int
    host: str
    port: int
    # Every listener, name -> host:port as bound (the first is host:port above).
    listeners: dict[str, str] = field(default_factory=dict)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


def node_line(role: str, node_id: int, host: str, port: int,
              listeners: list[str] | None = None) -> str:
    """``listeners``: each as NAME://host:port."""
    line = f"kipper {role} {node_id} listening on {host}:{port}"
    return line + f" listeners {','.join(listeners)}" if listeners else line


def node_listening(line: str | None) -> NodeListening | None:
    """The broker or controller ready line, or None if ``line`` is not one."""
    match = _NODE.search(line or "")
    if match is None:
        return None
    listeners = dict(entry.split("://", 1) for entry in (match["listeners"] or "").split(",")
                     if entry)
    return NodeListening(match["role"], int(match["node_id"]), match["host"], int(match["port"]),
                         listeners)


def metrics_url(line: str | None) -> str | None:
    """The URL of a ``--metrics-listener`` line, or None if ``line`` is not one."""
    return _url_after(METRICS_LISTENING_LINE, line)


def s3_url(line: str | None) -> str | None:
    """The endpoint URL of the embedded S3 server's ready line, or None."""
    return _url_after(S3_LISTENING_LINE, line)


def _url_after(prefix: str, line: str | None) -> str | None:
    if not line or not line.startswith(prefix):
        return None
    return line[len(prefix):].strip()


class AddressInUse(Exception):
    """A listener's port is taken; kipper prints this one line instead of a traceback."""

    def __init__(self, address: str, flag: str) -> None:
        super().__init__(f"cannot listen on {address}: address already in use; choose a free port "
                         f"with {flag} (kipper cluster up: --base-port, --metrics-base-port)")


@contextlib.contextmanager
def binding(address: str, flag: str) -> Iterator[None]:
    """Around a bind of the listener set by `flag`: a taken port raises AddressInUse."""
    try:
        yield
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            raise AddressInUse(address, flag) from None
        raise

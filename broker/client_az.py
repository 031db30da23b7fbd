"""Where a client is: the AZ brokers route it by (KIP-392 follower fetching, KIP-1181 diskless
routing) and count its bytes in (broker.traffic).

A client names its AZ in one of two ways, and the first one present wins:

1. ``client.rack``, which consumers send in their Fetch requests (v11+, KIP-392 ``rack_id``);
2. an ``az=<zone>`` token in ``client.id`` (e.g. ``myapp,az=az2``): the only way a producer,
   or any Metadata request, carries an AZ, since neither has a rack field.

A client that names neither is served by the broker it asks and counted as ``unknown``.
"""

from __future__ import annotations

import re

_AZ_TOKEN = re.compile(r"(?:^|[,; ])az=([^,; ]+)")


def az_from_client_id(client_id: str | None) -> str | None:
    """The zone of an ``az=<zone>`` token, e.g. in ``myapp,az=az2`` or ``myapp;az=az2``."""
    match = _AZ_TOKEN.search(client_id or "")
    return match.group(1) if match else None


def client_az(client_id: str | None, rack_id: str | None = None) -> str | None:
    """The client's AZ: its ``rack_id`` (client.rack) if it sent one, else the ``az=`` token
    of its client id, else None."""
    return rack_id or az_from_client_id(client_id)

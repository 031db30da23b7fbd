"""kipper's internal APIs: request/response pairs only kipper brokers send each other.

They travel on the Kafka port in ordinary Kafka frames (request header v1, response
header v0), under API keys far above Kafka's own so they can never collide with a future
Kafka API, and they are not advertised in ApiVersions. Their bodies are one JSON document
(int32 length + UTF-8): the payloads are kipper's own records (batch coordinates,
coordinator commands), which no Kafka schema describes. docs/internal-apis.md lists them.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import json
import secrets
import struct
from dataclasses import dataclass, field
from typing import Any, ClassVar

_LENGTH = struct.Struct(">i")


class InternalApiKey(enum.IntEnum):
    # Append one request record of the diskless control plane (storage/diskless/
    # control_plane.py: commit a WAL file, delete records, retention, ...) to the batch
    # coordinator's log, answered with the result of applying it. Sent to the coordinator.
    DISKLESS_COORDINATOR_APPEND = 9000
    # A node proving it belongs to the cluster, once per connection, before anything else
    # (docs/internal-apis.md "Who may call them"): the challenge answers a fresh nonce,
    # the proof is an HMAC of it keyed by the cluster secret, so the secret never travels.
    BROKER_CHALLENGE = 9001
    BROKER_PROOF = 9002
    # A call to the owner of a share partition (KIP-932: acquire, acknowledge, release, and
    # the share-group offset admin calls; broker/share_owners.py), from the broker serving
    # the consumer's ShareFetch / ShareAcknowledge or the group's coordinator. Sent to the
    # leader of the share partition's __share_group_state partition.
    SHARE_PARTITION_CALL = 9003
    # A partition leader asking the active controller to record the next storage span of
    # a partition switching storage mode live, once it sealed the old one at the boundary
    # offset (replication/storage_switch.py, docs/mode-switch.md).
    STORAGE_SPAN = 9004
    # Commit ranges of object storage to shared partitions' streams (KIP-1183,
    # storage/shared/stream.py), checked against their leadership. Sent to the active
    # controller by the partitions' leaders.
    SHARED_STREAM_COMMIT = 9005


@dataclass(frozen=True, slots=True)
class JsonBody:
    """The body of every internal request and response."""

    # Read by protocol.framing, like a kio schema's flag: internal bodies have no tagged
    # fields, so their headers are the non-flexible ones.
    __flexible__: ClassVar[bool] = False
    value: Any


def read_json_body(buf: bytes | memoryview, position: int) -> tuple[JsonBody, int]:
    (length,) = _LENGTH.unpack_from(buf, position)
    start = position + _LENGTH.size
    if length < 0 or start + length > len(buf):
        raise ValueError(f"JSON body of {length} bytes runs past the end of the frame")
    return JsonBody(json.loads(bytes(buf[start:start + length]))), start + length


def write_json_body(out: bytearray, body: JsonBody) -> None:
    raw = json.dumps(body.value, separators=(",", ":")).encode()
    out += _LENGTH.pack(len(raw))
    out += raw


def is_internal(api_key: int) -> bool:
    return api_key in InternalApiKey._value2member_map_


def new_challenge() -> str:
    return secrets.token_hex(32)


@dataclass(frozen=True, slots=True)
class ClusterCredentials:
    """What a node proves its membership of the cluster with."""

    node_id: int
    cluster_secret: str = field(repr=False)

    def proof(self, challenge: str) -> str:
        """The answer to ``challenge``: only a holder of the secret can compute it, and it
        is good for that challenge (one connection) only."""
        message = f"{challenge}:{self.node_id}".encode()
        return hmac.new(self.cluster_secret.encode(), message, hashlib.sha256).hexdigest()

    def accepts(self, challenge: str, node_id: int, proof: str) -> bool:
        """Whether ``proof`` is node ``node_id``'s answer to ``challenge`` under our secret."""
        expected = ClusterCredentials(node_id, self.cluster_secret).proof(challenge)
        return hmac.compare_digest(expected, proof)

"""Requests only brokers of this cluster may send, and how a connection proves it is one.

The Kafka listener serves clients and brokers alike. A broker's ``NodeClient`` opens every
connection with BROKER_CHALLENGE (this node answers a fresh nonce) and BROKER_PROOF (the
peer's HMAC of the nonce keyed by the cluster secret, protocol.internal): the secret never
travels and a recorded proof is good for no other connection. Until a connection has
proved it, a broker-only request on it is not executed: the connection is closed, as Kafka
closes one that fails authentication, and the attempt is logged once, with the peer.

Broker-only requests are what lets a peer change the cluster's state without a client's
rules: kipper's internal APIs (the batch coordinator's append can delete a diskless topic's
batches), the controller's APIs (registration, heartbeats with controlled shutdown, ISR
changes) and a follower's Fetch (``replica_id >= 0``: it moves the ISR and the high
watermark that acks=all waits for). Kafka guards the same with its CLUSTER_ACTION ACL.
"""

from __future__ import annotations

from typing import Any

from protocol.apis import ApiKey
from protocol.internal import ClusterCredentials, InternalApiKey, JsonBody, new_challenge

AUTHENTICATION_APIS = frozenset({InternalApiKey.BROKER_CHALLENGE, InternalApiKey.BROKER_PROOF})
BROKER_ONLY_APIS = frozenset({
    ApiKey.BROKER_REGISTRATION, ApiKey.BROKER_HEARTBEAT, ApiKey.ALTER_PARTITION,
    ApiKey.ALLOCATE_PRODUCER_IDS,
    ApiKey.FETCH_SNAPSHOT, ApiKey.VOTE, ApiKey.BEGIN_QUORUM_EPOCH, ApiKey.END_QUORUM_EPOCH,
    *(key for key in InternalApiKey if key not in AUTHENTICATION_APIS)})


def is_broker_only(api_key: int, body: Any) -> bool:
    # Fetch v15+ would carry the id in replica_state; kipper stops at v12.
    return api_key in BROKER_ONLY_APIS or (api_key == ApiKey.FETCH and body.replica_id >= 0)


class BrokerAuthentication:
    """One accepted connection's proof of membership: none until the peer gives it."""

    def __init__(self, credentials: ClusterCredentials) -> None:
        self._credentials = credentials
        self._challenge: str | None = None
        # The node the peer proved to be; None: a client (or not yet proved).
        self.node_id: int | None = None

    def answer(self, api_key: int, body: JsonBody) -> JsonBody | None:
        """The response to an authentication request, or None if the proof is wrong (or
        comes without a challenge first): the connection must then be closed."""
        if api_key == InternalApiKey.BROKER_CHALLENGE:
            self._challenge = new_challenge()
            return JsonBody({"challenge": self._challenge})
        challenge, self._challenge = self._challenge, None  # one proof per challenge
        try:
            node_id, proof = int(body.value["node_id"]), str(body.value["proof"])
            accepted = challenge is not None and self._credentials.accepts(challenge, node_id,
                                                                           proof)
        except (KeyError, TypeError, ValueError):  # TypeError: also a non-ASCII proof
            return None
        if not accepted:
            return None
        self.node_id = node_id
        return JsonBody({"error_code": 0})

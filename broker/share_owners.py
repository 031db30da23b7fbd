"""How a broker serving ShareFetch / ShareAcknowledge reaches a share partition's owner.

The owner of a share partition (group, topic id, partition) is the broker leading its
partition of ``__share_group_state`` (``coordinator.share.coordinator``): the only one that
decides which records are acquired by whom. The broker a consumer fetches from (the topic
partition's leader; for a diskless partition any broker of the consumer's AZ) asks the owner
which offsets to send, in-process when it is the owner, else with the internal API
SHARE_PARTITION_CALL (protocol.internal, docs/internal-apis.md), then reads and sends those
records itself, so the record bytes never leave the consumer's AZ for a diskless topic: only
the small acquisition calls cross.

While ownership moves (a broker killed, a restart) the calls are retried against the owner
the metadata names next, until the request's deadline.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TypeVar

from kio.schema.errors import ErrorCode

from coordinator.coordinator_log import CoordinatorLog
from coordinator.share.coordinator import AcquireRequest, AcquireResult, ShareCoordinator
from coordinator.share.records import SharePartitionKey
from coordinator.share.share_partition import AcknowledgementBatch, AcquiredRange
from protocol.internal import JsonBody

log = logging.getLogger(__name__)

# Errors after which the owner is looked up again: it moved, or is still loading.
_RETRIABLE = {ErrorCode.not_coordinator, ErrorCode.coordinator_load_in_progress,
              ErrorCode.coordinator_not_available}
RETRY_BACKOFF_S = 0.1
# How long a call keeps retrying when the request gives no deadline of its own.
DEFAULT_CALL_TIMEOUT_S = 10.0
# Sends a JSON body to (host, port) and returns the response body.
Result = TypeVar("Result")
RemoteCall = Callable[[str, int, JsonBody, float], Awaitable[JsonBody]]


class ShareOwners:
    def __init__(self, node_id: int, coordinator: ShareCoordinator, store: CoordinatorLog,
                 remote_call: RemoteCall) -> None:
        self.node_id = node_id
        self.coordinator = coordinator
        self.store = store
        self.remote_call = remote_call

    async def acquire(self, request: AcquireRequest, timeout_s: float) -> AcquireResult:
        return await self._call(
            request.key, timeout_s, lambda: self.coordinator.acquire(request), {
                "op": "acquire", "member": request.member_id,
                "max_records": request.max_records, "log_start": request.log_start_offset,
                "high_watermark": request.high_watermark},
            lambda body: AcquireResult(ErrorCode(body["error_code"]), tuple(
                AcquiredRange(*r) for r in body.get("ranges", ()))))

    async def acknowledge(self, key: SharePartitionKey, member_id: str,
                          batches: list[AcknowledgementBatch], timeout_s: float) -> ErrorCode:
        return await self._call(
            key, timeout_s, lambda: self.coordinator.acknowledge(key, member_id, batches), {
                "op": "acknowledge", "member": member_id,
                "batches": [[b.first_offset, b.last_offset, list(b.types)] for b in batches]},
            _error_code)

    async def return_unsent(self, key: SharePartitionKey, member_id: str,
                            unsent: list[range], timeout_s: float) -> None:
        async def local() -> ErrorCode:
            self.coordinator.return_unsent(key, member_id, unsent)
            return ErrorCode.none
        await self._call(key, timeout_s, local, {
            "op": "return_unsent", "member": member_id,
            "ranges": [[r.start, r.stop] for r in unsent]}, _error_code)

    async def release_member(self, keys: list[SharePartitionKey], member_id: str,
                             timeout_s: float) -> None:
        async def release(key: SharePartitionKey) -> None:
            async def local() -> ErrorCode:
                await self.coordinator.release_member([key], member_id)
                return ErrorCode.none
            await self._call(key, timeout_s, local, {"op": "release", "member": member_id},
                             _error_code)
        await asyncio.gather(*(release(key) for key in keys))

    async def start_offset(self, key: SharePartitionKey, timeout_s: float
                           ) -> tuple[ErrorCode, int | None]:
        """The share partition's start offset (None: the group has no state for it)."""
        async def local() -> tuple[ErrorCode, int | None]:
            error = self.coordinator.owner_error(key)
            return error or ErrorCode.none, self.coordinator.start_offset(key)
        return await self._call(key, timeout_s, local, {"op": "start_offset", "member": ""},
                                lambda body: (ErrorCode(body["error_code"]),
                                              body.get("start_offset")))

    async def reset_start_offset(self, key: SharePartitionKey, offset: int,
                                 timeout_s: float) -> ErrorCode:
        return await self._call(
            key, timeout_s, lambda: self.coordinator.reset_start_offset(key, offset),
            {"op": "reset", "member": "", "offset": offset}, _error_code)

    async def delete_state(self, key: SharePartitionKey, timeout_s: float) -> ErrorCode:
        return await self._call(key, timeout_s, lambda: self.coordinator.delete_state(key),
                                {"op": "delete", "member": ""}, _error_code)

    async def _call(self, key: SharePartitionKey, timeout_s: float,
                    local: Callable[[], Awaitable[Result]], remote: dict,
                    decode: Callable[[dict], Result]) -> Result:
        """``local()`` when this broker owns ``key``, else ``remote`` sent to the owner and
        its answer decoded; retried while the owner moves, until ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            result = await self._call_once(key, local, remote, decode, deadline)
            error = (result.error if isinstance(result, AcquireResult)
                     else result[0] if isinstance(result, tuple) else result)
            if error not in _RETRIABLE or time.monotonic() + RETRY_BACKOFF_S > deadline:
                return result
            await asyncio.sleep(RETRY_BACKOFF_S)

    async def _call_once(self, key: SharePartitionKey, local: Callable[[], Awaitable[Result]],
                         remote: dict, decode: Callable[[dict], Result],
                         deadline: float) -> Result:
        unavailable = {"error_code": int(ErrorCode.coordinator_not_available)}
        await self.store.ensure_topic()
        partition = self.store.partition_for(key.coordinator_key())
        if self.store.is_local_leader(partition):
            return await local()
        owner = self.store.coordinator_node(partition)
        if owner is None or owner.node_id == self.node_id:
            return decode(unavailable)
        body = {**remote, "group": key.group_id, "topic_id": str(key.topic_id),
                "partition": key.partition}
        try:
            response = await self.remote_call(owner.host, owner.port, JsonBody(body),
                                              max(deadline - time.monotonic(), 0.1))
        except (OSError, ConnectionError, TimeoutError) as e:
            log.debug("share partition owner %d unreachable: %r", owner.node_id, e)
            return decode(unavailable)
        return decode(response.value)


def _error_code(body: dict) -> ErrorCode:
    return ErrorCode(body["error_code"])


async def serve_remote_call(coordinator: ShareCoordinator, body: dict) -> dict:
    """The owner's side of SHARE_PARTITION_CALL: one call, answered with its error code
    (and the acquired ranges). Raises KeyError, TypeError or ValueError on a bad body."""
    key = SharePartitionKey(str(body["group"]), uuid.UUID(body["topic_id"]),
                            int(body["partition"]))
    member = str(body["member"])
    op = body["op"]
    if op == "acquire":
        result = await coordinator.acquire(AcquireRequest(
            key, member, int(body["max_records"]), int(body["log_start"]),
            int(body["high_watermark"])))
        return {"error_code": int(result.error),
                "ranges": [[r.first_offset, r.last_offset, r.delivery_count]
                           for r in result.ranges]}
    if op == "reset":
        return {"error_code": int(await coordinator.reset_start_offset(
            key, int(body["offset"])))}
    if op == "delete":
        return {"error_code": int(await coordinator.delete_state(key))}
    if op == "acknowledge":
        batches = [AcknowledgementBatch(int(first), int(last), tuple(int(t) for t in types))
                   for first, last, types in body["batches"]]
        return {"error_code": int(await coordinator.acknowledge(key, member, batches))}
    error = coordinator.owner_error(key)
    if error is not None:
        return {"error_code": int(error)}
    if op == "return_unsent":
        coordinator.return_unsent(key, member, [range(int(start), int(stop))
                                                for start, stop in body["ranges"]])
    elif op == "release":
        await coordinator.release_member([key], member)
    elif op == "start_offset":
        return {"error_code": int(ErrorCode.none),
                "start_offset": coordinator.start_offset(key)}
    else:
        raise ValueError(f"unknown share partition call {op!r}")
    return {"error_code": int(ErrorCode.none)}


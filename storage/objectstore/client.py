"""The async S3 client both KIP engines share.

One aiobotocore client (one connection pool) per ObjectStore, and one ObjectStore per
broker process. Every request goes through ``_request``, which applies injected faults
and the latency profile, retries what is worth retrying and accounts for each attempt.
Retries are ours rather than botocore's so that every attempt is counted, and the whole
operation is bounded by ``request_timeout_s``: botocore's read timeout applies per socket
read and per attempt, so a store that accepts connections and never answers would hold a
caller for attempts x read timeout.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, AsyncIterator, Awaitable, Callable, Iterable, Sequence, TypeVar

import aiobotocore.session
from aiobotocore.config import AioConfig
from botocore.exceptions import BotoCoreError, ClientError, HTTPClientError, IncompleteReadError
from botocore.exceptions import ConnectionError as BotoConnectionError

from ..log import KafkaStorageError
from .accounting import Accounting
from .config import ObjectStoreConfig
from .faults import FaultInjector, InjectedFault
from .latency import LatencyModel
from .missing import MissingObjects
from .names import OPERATION_KINDS, WAL_BUCKET, fast_bucket
from .ranges import coalesce

if TYPE_CHECKING:
    from .embedded import EmbeddedS3

log = logging.getLogger(__name__)

T = TypeVar("T")

# S3 error codes that mean "try again later" whatever their HTTP status.
_RETRYABLE_CODES = frozenset({
    "SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded",
    "TooManyRequests", "RequestTimeout", "InternalError", "ServiceUnavailable",
})
# DeleteObjects takes at most this many keys.
_DELETE_BATCH = 1000


class ObjectStoreError(KafkaStorageError):
    """An S3 request failed for good; `code` is the S3 error code when there is one."""

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.code = code


class ObjectNotFound(ObjectStoreError):
    """The key (or bucket) does not exist; ``key`` is set by the reads (GetObject)."""

    def __init__(self, message: str, code: str | None = None, bucket: str | None = None,
                 key: str | None = None) -> None:
        super().__init__(message, code)
        self.bucket = bucket
        self.key = key


class ObjectStoreUnavailable(ObjectStoreError):
    """Every attempt failed with a retryable error (throttling, 5xx, timeouts, outage), or
    the operation did not finish within ``request_timeout_s``."""


@dataclass(frozen=True, slots=True)
class ObjectInfo:
    key: str
    size: int
    last_modified: datetime


class ObjectStore:
    def __init__(self, config: ObjectStoreConfig | None = None) -> None:
        self.config = config or ObjectStoreConfig()
        self.accounting = Accounting(self.config.az)
        # What the engines' reads found missing (they know which partition needed it).
        self.missing = MissingObjects()
        # One stream for latency, fault and backoff draws: seeded, a run repeats exactly.
        self._rng = random.Random(self.config.seed)
        self.faults = FaultInjector(self._rng)
        self._latency = LatencyModel(self.config.latency_profile, self._rng)
        self._embedded: EmbeddedS3 | None = None
        self._exit_stack = contextlib.AsyncExitStack()
        self._client: Any = None
        self.endpoint_url: str | None = None

    async def start(self) -> None:
        credentials = (self.config.access_key, self.config.secret_key)
        self.endpoint_url = self.config.endpoint_url
        if self.endpoint_url is None:
            # Imported only when needed: a broker using MinIO or AWS never loads moto.
            from . import embedded

            self._embedded = embedded.EmbeddedS3()
            self.endpoint_url = self._embedded.start()
            credentials = (embedded.ACCESS_KEY, embedded.SECRET_KEY)
        botocore_config = AioConfig(
            connect_timeout=self.config.connect_timeout_s,
            read_timeout=self.config.read_timeout_s,
            max_pool_connections=self.config.max_pool_connections,
            retries={"total_max_attempts": 1},
            s3={"addressing_style": self.config.addressing_style},
            # Checksums only where S3 requires them: MinIO and LocalStack versions differ
            # in the newer checksum headers, and the SigV4 signature already hashes payloads.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        self._client = await self._exit_stack.enter_async_context(
            aiobotocore.session.get_session().create_client(
                "s3",
                region_name=self.config.region,
                endpoint_url=self.endpoint_url,
                aws_access_key_id=credentials[0],
                aws_secret_access_key=credentials[1],
                config=botocore_config,
            )
        )
        # Applied last so that an outage's "after_s" counts from when the store is ready (a
        # loaded machine can take a second to build the client).
        for spec in self.config.faults:
            self.faults.apply_fault(spec)

    async def close(self) -> None:
        await self._exit_stack.aclose()
        self._client = None
        if self._embedded is not None:
            self._embedded.stop()
            self._embedded = None

    async def __aenter__(self) -> ObjectStore:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # Buckets

    async def create_bucket(self, bucket: str) -> None:
        """Create the bucket; one that this account already owns is fine."""
        params: dict[str, Any] = {"Bucket": bucket}
        if self.config.region != "us-east-1":
            params["CreateBucketConfiguration"] = {"LocationConstraint": self.config.region}

        async def send() -> tuple[None, int]:
            await self._client.create_bucket(**params)
            return None, 0

        try:
            await self._request("CreateBucket", bucket, send)
        except ObjectStoreError as error:
            if error.code != "BucketAlreadyOwnedByYou":
                raise

    async def ensure_buckets(self, azs: Iterable[str]) -> list[str]:
        """Create kipper-wal and kipper-fast-<az> for each AZ if missing; return their names."""
        buckets = [WAL_BUCKET, *(fast_bucket(az) for az in azs)]
        await asyncio.gather(*(self.create_bucket(bucket) for bucket in buckets))
        return buckets

    # Objects

    async def put(self, bucket: str, key: str, data: bytes | bytearray | memoryview) -> None:
        """Upload one object, in parts when it is larger than the multipart threshold."""
        if len(data) > self.config.multipart_threshold:
            await self._put_multipart(bucket, key, memoryview(data))
            return
        body = bytes(data) if isinstance(data, memoryview) else data

        async def send() -> tuple[None, int]:
            await self._client.put_object(Bucket=bucket, Key=key, Body=body)
            return None, len(body)

        await self._request("PutObject", bucket, send)

    async def get(self, bucket: str, key: str) -> bytes:
        """The whole object."""
        return await self._get(bucket, key, byte_range=None)

    async def get_range(self, bucket: str, key: str, start: int, length: int) -> bytes:
        """`length` bytes of the object from `start`; the range must lie within the object."""
        return (await self.get_ranges(bucket, key, [(start, length)]))[0]

    async def get_ranges(
        self, bucket: str, key: str, ranges: Sequence[tuple[int, int]], gap: int | None = None
    ) -> list[bytes]:
        """The bytes of each (start, length) range, in the order asked.

        Ranges at most `gap` bytes apart (default: config.coalesce_gap) are read with one
        GET; the spans are read concurrently.
        """
        spans = coalesce(ranges, self.config.coalesce_gap if gap is None else gap)
        span_data = await asyncio.gather(
            *(self._get(bucket, key, byte_range=(span.start, span.end)) for span in spans)
        )
        result = [b""] * len(ranges)
        for span, data in zip(spans, span_data):
            view = memoryview(data)
            for index in span.members:
                start, length = ranges[index]
                result[index] = bytes(view[start - span.start:start - span.start + length])
        return result

    async def delete(self, bucket: str, keys: Iterable[str]) -> None:
        """Delete the keys, up to 1000 per DeleteObjects request; missing keys are fine."""
        keys = list(keys)
        for first in range(0, len(keys), _DELETE_BATCH):
            await self._delete_batch(bucket, keys[first:first + _DELETE_BATCH])

    async def list_objects(
        self, bucket: str, prefix: str = "", page_size: int = 1000
    ) -> AsyncIterator[ObjectInfo]:
        """Objects whose key starts with `prefix`, in key order, one request per page."""
        params: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "MaxKeys": page_size}
        while True:
            async def send() -> tuple[dict[str, Any], int]:
                return await self._client.list_objects_v2(**params), 0

            page = await self._request("ListObjectsV2", bucket, send)
            for item in page.get("Contents", []):
                yield ObjectInfo(item["Key"], item["Size"], item["LastModified"])
            if not page.get("IsTruncated"):
                return
            params["ContinuationToken"] = page["NextContinuationToken"]

    # Internals

    async def _get(self, bucket: str, key: str, byte_range: tuple[int, int] | None) -> bytes:
        """The object, or bytes [start, end) of it."""
        params = {"Bucket": bucket, "Key": key}
        if byte_range is not None:
            params["Range"] = f"bytes={byte_range[0]}-{byte_range[1] - 1}"

        async def send() -> tuple[bytes, int]:
            response = await self._client.get_object(**params)
            async with response["Body"] as body:
                data = await body.read()
            return data, len(data)

        try:
            data = await self._request("GetObject", bucket, send)
        except ObjectNotFound as error:
            raise ObjectNotFound(f"{bucket}/{key} does not exist", code=error.code,
                                 bucket=bucket, key=key) from error
        if byte_range is not None and len(data) != byte_range[1] - byte_range[0]:
            raise ObjectStoreError(
                f"{bucket}/{key} ends before byte {byte_range[1]} (read {len(data)} bytes "
                f"from {byte_range[0]})"
            )
        return data

    async def _delete_batch(self, bucket: str, keys: list[str]) -> None:
        async def send() -> tuple[list[dict[str, Any]], int]:
            response = await self._client.delete_objects(
                Bucket=bucket, Delete={"Objects": [{"Key": k} for k in keys], "Quiet": True})
            return response.get("Errors", []), 0

        failed = await self._request("DeleteObjects", bucket, send)
        if failed:
            first = failed[0]
            raise ObjectStoreError(
                f"could not delete {len(failed)} object(s) from {bucket}, e.g. "
                f"{first.get('Key')}: {first.get('Message')}",
                code=first.get("Code"),
            )

    async def _put_multipart(self, bucket: str, key: str, data: memoryview) -> None:
        async def create() -> tuple[str, int]:
            response = await self._client.create_multipart_upload(Bucket=bucket, Key=key)
            return response["UploadId"], 0

        upload_id = await self._request("CreateMultipartUpload", bucket, create)
        part_size = self.config.multipart_part_size
        slots = asyncio.Semaphore(self.config.multipart_concurrency)

        async def upload_part(number: int, offset: int) -> dict[str, Any]:
            async with slots:
                # Copied only once a slot is free, so at most `concurrency` parts are in memory.
                chunk = bytes(data[offset:offset + part_size])

                async def send() -> tuple[str, int]:
                    response = await self._client.upload_part(
                        Bucket=bucket, Key=key, UploadId=upload_id, PartNumber=number, Body=chunk)
                    return response["ETag"], len(chunk)

                return {"PartNumber": number, "ETag": await self._request("UploadPart", bucket, send)}

        async def complete(parts: list[dict[str, Any]]) -> tuple[None, int]:
            await self._client.complete_multipart_upload(
                Bucket=bucket, Key=key, UploadId=upload_id, MultipartUpload={"Parts": parts})
            return None, 0

        tasks = [
            asyncio.create_task(upload_part(number, offset))
            for number, offset in enumerate(range(0, len(data), part_size), start=1)
        ]
        try:
            parts = await asyncio.gather(*tasks)
            await self._request("CompleteMultipartUpload", bucket, lambda: complete(parts))
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self._abort_multipart(bucket, key, upload_id)
            raise

    async def _abort_multipart(self, bucket: str, key: str, upload_id: str) -> None:
        async def send() -> tuple[None, int]:
            await self._client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload_id)
            return None, 0

        try:
            await self._request("AbortMultipartUpload", bucket, send)
        except ObjectStoreError as error:
            # The parts stay billed until a lifecycle rule removes them; nothing more to do here.
            log.warning("could not abort multipart upload of %s/%s: %s", bucket, key, error)

    async def _request(
        self, operation: str, bucket: str, send: Callable[[], Awaitable[tuple[T, int]]]
    ) -> T:
        """Send one S3 request with retries, all within config.request_timeout_s; `send`
        returns (result, payload bytes)."""
        timeout_s = self.config.request_timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                return await self._attempts(operation, bucket, send)
        except TimeoutError as error:
            raise ObjectStoreUnavailable(
                f"{operation} on {bucket} did not finish within {timeout_s:g} s",
                code="RequestTimeout") from error

    async def _attempts(
        self, operation: str, bucket: str, send: Callable[[], Awaitable[tuple[T, int]]]
    ) -> T:
        kind = OPERATION_KINDS[operation]
        attempt = 1
        while True:
            started = time.perf_counter()
            try:
                await self.faults.before_request(kind, self.config.read_timeout_s)
                await self._latency.delay(kind, bucket)
                result, nbytes = await send()
            except asyncio.CancelledError:
                # Abandoned (the operation's timeout, or the caller's): sent all the same.
                self.accounting.record(
                    operation, bucket, nbytes=0, seconds=time.perf_counter() - started, error=True)
                raise
            except (ClientError, BotoCoreError, InjectedFault, asyncio.TimeoutError, OSError) as error:
                self.accounting.record(
                    operation, bucket, nbytes=0, seconds=time.perf_counter() - started, error=True)
                if not _is_retryable(error):
                    raise _translate(error, operation, bucket) from error
                if attempt == self.config.max_attempts:
                    raise ObjectStoreUnavailable(
                        f"{operation} on {bucket} failed {attempt} time(s), last: {error}",
                        code=_error_code(error),
                    ) from error
                await asyncio.sleep(self._backoff_s(attempt))
                attempt += 1
            else:
                self.accounting.record(
                    operation, bucket, nbytes=nbytes, seconds=time.perf_counter() - started, error=False)
                return result

    def _backoff_s(self, attempt: int) -> float:
        # Full jitter spreads the retries of many requests throttled at once.
        cap = min(self.config.backoff_max_s, self.config.backoff_base_s * 2 ** (attempt - 1))
        return self._rng.uniform(0, cap)


def _error_code(error: Exception) -> str | None:
    if isinstance(error, ClientError):
        return error.response.get("Error", {}).get("Code")
    return None


def _is_retryable(error: Exception) -> bool:
    if isinstance(error, ClientError):
        status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        return status >= 500 or status == 429 or _error_code(error) in _RETRYABLE_CODES
    # Connection, timeout and truncated-response errors; not e.g. ParamValidationError.
    return isinstance(error, (
        InjectedFault, HTTPClientError, BotoConnectionError, IncompleteReadError,
        asyncio.TimeoutError, OSError,
    ))


def _translate(error: Exception, operation: str, bucket: str) -> ObjectStoreError:
    code = _error_code(error)
    message = f"{operation} on {bucket}: {error}"
    if code in ("NoSuchKey", "NoSuchBucket", "404"):
        return ObjectNotFound(message, code=code)
    return ObjectStoreError(message, code=code)

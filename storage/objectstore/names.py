"""Names shared by the object-store modules: buckets, their AZs, and S3 operations."""

from __future__ import annotations

import re

WAL_BUCKET = "kipper-wal"
FAST_BUCKET_PREFIX = "kipper-fast-"
REGIONAL = "regional"

# S3 bucket names are 3-63 lowercase letters, digits, dots and hyphens.
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def fast_bucket(az: str) -> str:
    """The per-AZ bucket active-tiered topics upload to (emulates S3 Express One Zone)."""
    name = FAST_BUCKET_PREFIX + az
    if not _BUCKET_NAME.match(name):
        raise ValueError(f"AZ {az!r} gives the invalid bucket name {name!r}")
    return name


def bucket_az(bucket: str) -> str:
    """The AZ a bucket lives in: its suffix for a fast bucket, "regional" otherwise."""
    if bucket.startswith(FAST_BUCKET_PREFIX):
        return bucket[len(FAST_BUCKET_PREFIX):]
    return REGIONAL


# Every S3 operation the client sends, by the kind that latency profiles and fault
# specs are written in terms of.
OPERATION_KINDS = {
    "PutObject": "put",
    "CreateMultipartUpload": "put",
    "UploadPart": "put",
    "CompleteMultipartUpload": "put",
    "AbortMultipartUpload": "put",
    "CreateBucket": "put",
    "GetObject": "get",
    "DeleteObjects": "delete",
    "ListObjectsV2": "list",
}
KINDS = ("put", "get", "delete", "list")

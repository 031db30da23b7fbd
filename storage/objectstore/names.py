"""Names shared by the object-store modules: buckets, their AZs, and S3 operations."""

from __future__ import annotations

import hashlib
import re

WAL_BUCKET = "kipper-wal"
FAST_BUCKET_PREFIX = "kipper-fast-"
REGIONAL = "regional"

# S3 bucket names: 3-63 characters, lowercase letters, digits, dots and hyphens, starting and
# ending with a letter or digit, no ".." and none of AWS's reserved suffixes.
_BUCKET_NAME = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
# An AZ used as it is: lowercase words joined by single hyphens. Such a name never holds
# "--", which is what keeps it apart from a derived one (below).
_PLAIN_AZ = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
_HASH_CHARS = 8


def fast_bucket(az: str) -> str:
    """The per-AZ bucket active-tiered topics upload to (emulates S3 Express One Zone).

    Any rack string Kafka accepts as ``broker.rack`` gives a valid bucket name, and two
    racks never share one: a plain name (``az1``, ``use1-az2``) is used as it is
    (``kipper-fast-az1``); any other (``RACK0``, ``us_east/1a``, a long one) is lowercased,
    every run of other characters becomes one hyphen, it is cut to fit, and ``--`` plus a
    hash of the whole rack string is appended (``kipper-fast-rack0--<8 hex>``)."""
    name = FAST_BUCKET_PREFIX + az
    if _PLAIN_AZ.match(az) and _is_valid_bucket_name(name):
        return name
    digest = hashlib.sha256(az.encode()).hexdigest()[:_HASH_CHARS]
    room = 63 - len(FAST_BUCKET_PREFIX) - len("--") - _HASH_CHARS
    readable = re.sub(r"[^a-z0-9]+", "-", az.lower())[:room].strip("-")
    return f"{FAST_BUCKET_PREFIX}{readable}--{digest}"


def _is_valid_bucket_name(name: str) -> bool:
    return (bool(_BUCKET_NAME.match(name)) and ".." not in name
            and not name.endswith(_RESERVED_SUFFIXES))


def bucket_az(bucket: str) -> str:
    """The zone a bucket lives in, as its name says: the suffix of a fast bucket (the rack
    itself when ``fast_bucket`` used it as it is), "regional" otherwise."""
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

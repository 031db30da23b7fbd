"""The object-store layer both KIP engines share: an async S3 client with accounting,
latency profiles and fault injection. See docs/object-storage.md.

The embedded S3 server lives in storage.objectstore.embedded, which is not imported here:
moto loads only where it is used, and `python -m storage.objectstore.embedded` runs cleanly.
"""

from .accounting import Accounting
from .admin import FaultAdminServer, fault_admin_routes
from .client import ObjectInfo, ObjectNotFound, ObjectStore, ObjectStoreError, ObjectStoreUnavailable
from .config import ObjectStoreConfig
from .faults import FaultInjector
from .latency import LATENCY_PROFILES
from .names import REGIONAL, WAL_BUCKET, bucket_az, fast_bucket

__all__ = [
    "Accounting", "FaultAdminServer", "FaultInjector", "LATENCY_PROFILES", "ObjectInfo",
    "ObjectNotFound", "ObjectStore", "ObjectStoreConfig", "ObjectStoreError",
    "ObjectStoreUnavailable", "REGIONAL", "WAL_BUCKET", "bucket_az", "fast_bucket",
    "fault_admin_routes",
]

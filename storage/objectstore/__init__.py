"""The object-store layer both KIP engines share: an async S3 client with accounting,
latency profiles and fault injection. See docs/object-storage.md.

The names below are imported from their modules on first use, not with the package: the
embedded S3 server (storage.objectstore.embedded, `python -m`) is part of the package but
needs none of them, and importing the client (aiobotocore, the record codecs) took it
about half a second of CPU at every start, while the brokers starting with it want the CPU.
"""

from importlib import import_module

# Exported name -> the module of the package that defines it.
_EXPORTS = {
    "Accounting": "accounting",
    "FaultAdminServer": "admin", "fault_admin_routes": "admin",
    "ObjectInfo": "client", "ObjectNotFound": "client", "ObjectStore": "client",
    "ObjectStoreError": "client", "ObjectStoreUnavailable": "client",
    "ObjectStoreConfig": "config",
    "FaultInjector": "faults",
    "LATENCY_PROFILES": "latency",
    "REGIONAL": "names", "WAL_BUCKET": "names", "bucket_az": "names", "fast_bucket": "names",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value  # found directly from now on
    return value

"""Per-API request handlers; importing this package registers them all."""

from .registry import HANDLERS, RequestContext, handles

from . import (acls, admin, api_versions, configs, controller_apis,  # noqa: E402,F401
               describe_producers, diskless_coordinator, fetch, groups,  # (registration)
               log_dirs, metadata, offsets, produce, producer_id, replicas, transactions,
               sasl, share, txn_markers)

__all__ = ["HANDLERS", "RequestContext", "handles"]

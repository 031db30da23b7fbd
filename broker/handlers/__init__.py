"""Per-API request handlers; importing this package registers them all."""

from .registry import HANDLERS, RequestContext, handles

from . import (admin, api_versions, controller_apis, describe_producers,  # noqa: E402,F401
               diskless_coordinator, fetch, groups, log_dirs, metadata,  # (registration)
               offsets, produce, producer_id, replicas, transactions, txn_markers)

__all__ = ["HANDLERS", "RequestContext", "handles"]

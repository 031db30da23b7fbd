"""Per-API request handlers; importing this package registers them all."""

from .registry import HANDLERS, RequestContext, handles

from . import (acls, admin, api_versions, configs, consumer_groups,  # noqa: E402,F401
               controller_apis, describe_producers, diskless_coordinator,  # (registration)
               fetch, groups, log_dirs, metadata, offsets, produce, producer_id, replicas,
               sasl, share, transactions, txn_markers)

__all__ = ["HANDLERS", "RequestContext", "handles"]

"""Per-API request handlers; importing this package registers them all."""

from .registry import HANDLERS, RequestContext, handles

from . import (admin, api_versions, controller_apis, diskless_coordinator, fetch,  # noqa: E402,F401
               groups, metadata, offsets, produce, producer_id, transactions)  # (registration)

__all__ = ["HANDLERS", "RequestContext", "handles"]

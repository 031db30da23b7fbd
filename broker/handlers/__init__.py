"""Per-API request handlers; importing this package registers them all."""

from .registry import HANDLERS, RequestContext, handles

from . import (admin, api_versions, fetch, groups, metadata, offsets,  # noqa: E402,F401
               produce, producer_id)  # (registration)

__all__ = ["HANDLERS", "RequestContext", "handles"]

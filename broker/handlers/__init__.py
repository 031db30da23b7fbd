"""Per-API request handlers; importing this package registers them all."""

from .registry import HANDLERS, RequestContext, handles

from . import admin, api_versions, controller_apis, fetch, metadata, offsets, produce  # noqa: E402,F401  (registration)

__all__ = ["HANDLERS", "RequestContext", "handles"]

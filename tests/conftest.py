"""Fixtures every test directory may use; they are defined in tests/support."""

from support.diskless import diskless_cluster  # noqa: F401
from support.js import js_client, kafkajs  # noqa: F401
from support.processes import broker_factory, shared_broker  # noqa: F401
from support.s3 import object_store, pausable_s3, s3_endpoint, s3_prefix  # noqa: F401
from support.tiered import tiered_cluster  # noqa: F401
from support.topics import topic_name  # noqa: F401

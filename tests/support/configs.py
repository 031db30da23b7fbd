"""Configs changed and described with confluent-kafka's AdminClient."""

from __future__ import annotations

from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   ResourceType)


def alter(bootstrap: str, resource_type: ResourceType, name: str, validate_only: bool = False,
          **changes: tuple[AlterConfigOpType, str | None]) -> None:
    """IncrementalAlterConfigs of one resource, each config named with ``_`` for ``.``;
    raises KafkaException."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [ConfigEntry(key.replace("_", "."), value, incremental_operation=op)
               for key, (op, value) in changes.items()]
    resource = ConfigResource(resource_type, name, incremental_configs=entries)
    admin.incremental_alter_configs([resource], validate_only=validate_only)[resource].result(30)


def describe(bootstrap: str, resource_type: ResourceType, name: str) -> dict[str, ConfigEntry]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(resource_type, name)
    # librdkafka always asks for synonyms.
    return admin.describe_configs([resource])[resource].result(30)

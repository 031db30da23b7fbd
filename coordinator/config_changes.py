"""Config changes as IncrementalAlterConfigs (KIP-339) and AlterConfigs ask for them, applied
to a resource's explicit configs."""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from storage.config import InvalidConfig


class ConfigOp(enum.IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True)
class ConfigChange:
    name: str
    op: ConfigOp
    value: str | None


def changed_configs(current: dict[str, str], changes: Sequence[ConfigChange], replace: bool,
                    list_default: Callable[[str], str | None]) -> dict[str, str]:
    """The explicit configs once ``changes`` are applied. ``replace``: AlterConfigs' legacy
    semantics, where the request's configs become all of the resource's (every change a SET).
    ``list_default(name)``: the default of a list config, None for others (APPEND and
    SUBTRACT start from the default when the config is unset, as Kafka's)."""
    configs = {} if replace else dict(current)
    for change in changes:
        if change.op == ConfigOp.DELETE:
            configs.pop(change.name, None)
            continue
        if change.value is None:
            raise InvalidConfig(f"Null value not supported for {change.op.name} of {change.name}")
        if change.op == ConfigOp.SET:
            configs[change.name] = change.value
            continue
        default = list_default(change.name)
        if default is None:
            raise InvalidConfig(f"Config value {change.op.name.lower()} is not allowed for "
                                f"config key {change.name}: it is not a list")
        items = _items(configs.get(change.name, default))
        given = _items(change.value)
        if change.op == ConfigOp.APPEND:
            for item in given:
                if item not in items:
                    items.append(item)
        else:
            items = [item for item in items if item not in given]
        configs[change.name] = ",".join(items)
    return configs


def _items(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]

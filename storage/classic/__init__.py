"""The classic storage engine: Kafka's local segmented log."""

from .log import ClassicLog, UnexpectedAppendOffset

__all__ = ["ClassicLog", "UnexpectedAppendOffset"]

"""The diskless batch coordinator (KIP-1164), implementing storage/diskless's ControlPlane:

- ``batch_state``: the state machine, applying request records to SQLite;
- ``batch_coordinator``: the replicated coordinator every broker runs over the topic
  ``__diskless-metadata`` (append on the leader, apply everywhere, answer queries locally);
- ``housekeeping``: retention, topic deletion, object GC and merging, on the leader;
- ``checkpoints``: the state copied to object storage, so the log need not be kept whole.
"""

from .batch_coordinator import (
    BatchCoordinator,
    CoordinatorUnavailable,
    MetadataLogReplica,
    NotCoordinator,
)
from .batch_state import BatchCoordinatorState
from .checkpoints import CheckpointSettings, CheckpointStore
from .housekeeping import Housekeeping, HousekeepingSettings

__all__ = ["BatchCoordinator", "BatchCoordinatorState", "CheckpointSettings", "CheckpointStore",
           "CoordinatorUnavailable", "Housekeeping", "HousekeepingSettings", "MetadataLogReplica",
           "NotCoordinator"]

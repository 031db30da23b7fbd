"""Share groups (KIP-932), split as Kafka's are.

- ``membership``: share groups on the group coordinator: heartbeats, member epochs, sessions.
- ``assignor``: the rack-aware share assignor (a partition may go to many members).
- ``service``: ``ShareGroups``, what the request handlers call for membership; the manager
  is one of the group coordinator's kinds (``coordinator.group.kind``).
- ``group_records``: the group's record in ``__consumer_offsets`` (its share partitions
  with state).
- ``share_partition``: one share partition's acquisition state (locks, delivery counts).
- ``coordinator``: ``ShareCoordinator``, owner of share partitions, persisted in
  ``__share_group_state`` (``records``: the records' format).
"""

"""Share groups (KIP-932), split as Kafka's are.

- ``membership``: share groups on the group coordinator: heartbeats, member epochs, sessions.
- ``assignor``: the rack-aware share assignor (a partition may go to many members).
- ``service``: ``ShareGroups``, what the request handlers call for membership.
- ``share_partition``: one share partition's acquisition state (locks, delivery counts).
- ``coordinator``: ``ShareCoordinator``, owner of share partitions, persisted in
  ``__share_group_state`` (``records``: the records' format).
"""

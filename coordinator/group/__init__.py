"""The group coordinator, split as Kafka's is.

- ``service``: ``GroupCoordinator``, what the request handlers call.
- ``classic``: the classic group protocol and its rebalance state machine.
- ``consumer``: the KIP-848 consumer group protocol (ConsumerGroupHeartbeat); its group in
  ``consumer_group``, its records in ``consumer_records``, revoke-before-assign in
  ``reconciliation``, the server-side assignors in ``assignors`` (rack-aware through
  ``rack_aware``).
- ``kind``: what every kind of group answers the service (the registry of group kinds).
- ``offsets``: committed offsets.
- ``loader``: which ``__consumer_offsets`` partitions are served, and replaying them.
- ``state``: a group and its members; ``records``: the records' on-disk format.
- ``coordinator.coordinator_log``: the contract over ``__consumer_offsets`` they use.
- ``timer``: the clock and timers, real or manual.
"""

"""The group coordinator, split as Kafka's is.

- ``service``: ``GroupCoordinator``, what the request handlers call.
- ``classic``: the classic group protocol and its rebalance state machine.
- ``offsets``: committed offsets.
- ``loader``: which ``__consumer_offsets`` partitions are served, and replaying them.
- ``state``: a group and its members; ``records``: the records' on-disk format.
- ``coordinator.coordinator_log``: the contract over ``__consumer_offsets`` they use.
- ``timer``: the clock and timers, real or manual.
"""

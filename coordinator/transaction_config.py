"""Settings of the transaction coordinator and its ``__transaction_state`` topic.

Names and meanings are Kafka's broker settings (``transaction.max.timeout.ms`` is
``max_timeout_ms`` here, ``transaction.state.log.num.partitions`` is
``state_log_num_partitions``, and so on), with Kafka's defaults.
"""

from __future__ import annotations

from dataclasses import dataclass

from .internal_topic import TRANSACTION_STATE_TOPIC, InternalTopic


@dataclass(frozen=True)
class TransactionConfig:
    state_log_num_partitions: int = 50
    # Lowered to the live broker count when the topic is created (on the first
    # FindCoordinator for a transaction), where Kafka would refuse until 3 are up.
    state_log_replication_factor: int = 3
    state_log_segment_bytes: int = 100 * 1024 * 1024
    # The longest transaction.timeout.ms a producer may ask for.
    max_timeout_ms: int = 900_000
    # A transactional id idle this long is forgotten (a tombstone in the log).
    transactional_id_expiration_ms: int = 7 * 24 * 3600 * 1000
    abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    remove_expired_transaction_cleanup_interval_ms: int = 3600 * 1000
    # Between two attempts to write a marker or a completed transaction that failed.
    retry_backoff_ms: int = 100

    def state_topic(self) -> InternalTopic:
        return InternalTopic(TRANSACTION_STATE_TOPIC, self.state_log_num_partitions,
                             self.state_log_replication_factor, self.state_log_segment_bytes)

"""Every metric family /metrics exports, declared once: its name, type, labels, meaning and
where it appears. docs/metrics.md is generated from this list (``python -m
broker.config_docs --write``), the broker's own collectors (broker/broker_metrics.py) build
their families from it, and tests/system/test_metrics.py checks that a live broker exports
exactly these names, so the list cannot drift from the code.

Names follow Prometheus conventions: ``kipper_`` prefix, base units (``_seconds``,
``_bytes``), counters end in ``_total`` in the exposition (the name here omits it, as
prometheus_client does). The process collector's families keep their standard
``process_`` names, which existing dashboards and alerts expect.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

Kind = Literal["counter", "gauge", "histogram"]

# Where a family appears.
EVERY_NODE = "every node"
BROKER = "every broker"
CONTROLLER = "the controller node"
OBJECT_STORE = "brokers with an object store (active-tiered, diskless)"
DISKLESS = "brokers with an object store (diskless engine)"
ACTIVE_TIERED = "brokers leading or following active-tiered partitions"
GROUP_COORDINATOR = "the coordinator of each consumer group"


@dataclass(frozen=True, slots=True)
class MetricSpec:
    name: str  # as exported, without the _total of a counter
    kind: Kind
    help: str
    labels: tuple[str, ...] = ()
    where: str = BROKER
    # A family of names sharing this prefix, made from a snapshot's keys (see `help`).
    is_prefix: bool = False

    def family(self) -> Metric:
        types = {"counter": CounterMetricFamily, "gauge": GaugeMetricFamily,
                 "histogram": HistogramMetricFamily}
        return types[self.kind](self.name, self.help, labels=list(self.labels))

    @property
    def samples(self) -> tuple[str, ...]:
        """The sample names this family puts in the exposition."""
        if self.kind == "counter":
            return (f"{self.name}_total",)
        if self.kind == "histogram":
            return tuple(f"{self.name}_{suffix}" for suffix in ("bucket", "sum", "count"))
        return (self.name,)


# Requests (broker/connection.py).
REQUEST_SECONDS = MetricSpec(
    "kipper_request_seconds", "histogram",
    "Time from reading a request to its response being ready, per API (Kafka's "
    "RequestMetrics TotalTimeMs without the send); its _count is the request rate",
    ("api",), EVERY_NODE)
CONNECTIONS = MetricSpec(
    "kipper_connections", "gauge", "Open client and broker connections",
    where=EVERY_NODE)
FAILED_AUTHENTICATIONS = MetricSpec(
    "kipper_failed_authentications", "counter",
    "Connections refused at authentication: failed TLS handshakes and SASL exchanges "
    "(Kafka's failed-authentication-total)", where=EVERY_NODE)
RESPONSE_MEMORY_USED = MetricSpec(
    "kipper_response_memory_used_bytes", "gauge",
    "Bytes held for clients: a request's frame and its response's bound while it runs, "
    "then the response until sent; reading stops at kipper_response_memory_limit_bytes",
    where=EVERY_NODE)
RESPONSE_MEMORY_LIMIT = MetricSpec(
    "kipper_response_memory_limit_bytes", "gauge",
    "max_queued_response_bytes: the broker-wide limit of request and response bytes held",
    where=EVERY_NODE)
EVENT_LOOP_LAG = MetricSpec(
    "kipper_event_loop_lag_seconds", "histogram",
    "How late the event loop ran a timer (sampled every 0.1 s): time the broker could not "
    "serve anything", where=EVERY_NODE)

# Segment files kept open (storage/classic/open_files.py).
OPEN_SEGMENT_FILES = MetricSpec(
    "kipper_log_open_segment_files", "gauge",
    "Classic log segments whose file is open; at most the budget, a quarter of the open-file "
    "limit (1,024 at least) below it", where=EVERY_NODE)
SEGMENT_FILES_CLOSED_IDLE = MetricSpec(
    "kipper_log_segment_files_closed_idle", "counter",
    "Segment files closed for the budget, the least recently used first (reopened on next "
    "use): a high rate means more partitions are busy than the open-file limit allows",
    where=EVERY_NODE)

# Fetch sessions (KIP-227, replication/fetch_session.py).
FETCH_SESSIONS = MetricSpec(
    "kipper_fetch_sessions", "gauge",
    "Incremental fetch sessions this broker holds (at most "
    "max_incremental_fetch_session_cache_slots; Kafka's NumIncrementalFetchSessions)",
    where=EVERY_NODE)
FETCH_SESSION_EVICTIONS = MetricSpec(
    "kipper_fetch_session_evictions", "counter",
    "Sessions evicted for new ones (Kafka's IncrementalFetchSessionEvictionsPerSec)",
    where=EVERY_NODE)
FETCH_REQUESTS = MetricSpec(
    "kipper_fetch_requests", "counter",
    "Fetch requests by session kind: none (no session), full (creating one), incremental, "
    "or the session error they were answered with", ("session",), EVERY_NODE)

# Topics (broker/handlers/produce.py, fetch.py).
TOPIC_BYTES_IN = MetricSpec(
    "kipper_topic_bytes_in", "counter",
    "Record bytes appended by producers, per topic (Kafka's BytesInPerSec)", ("topic",))
TOPIC_RECORDS_IN = MetricSpec(
    "kipper_topic_records_in", "counter",
    "Records appended by producers, per topic (Kafka's MessagesInPerSec)", ("topic",))
TOPIC_BYTES_OUT = MetricSpec(
    "kipper_topic_bytes_out", "counter",
    "Record bytes sent to consumers, per topic; follower fetches excluded (Kafka's "
    "BytesOutPerSec)", ("topic",))
REPLICATION_BYTES_OUT = MetricSpec(
    "kipper_replication_bytes_out", "counter",
    "Record bytes sent to follower replicas (Kafka's ReplicationBytesOutPerSec)")

# Partitions (replication/).
PARTITIONS = MetricSpec(
    "kipper_partitions", "gauge",
    "Partitions this broker hosts (leader or follower; every diskless one)")
LEADER_PARTITIONS = MetricSpec(
    "kipper_leader_partitions", "gauge",
    "Partitions this broker leads (classic and active-tiered; diskless ones have no leader)")
UNDER_REPLICATED = MetricSpec(
    "kipper_under_replicated_partitions", "gauge",
    "Partitions this broker leads whose ISR is smaller than their replica set (alert: > 0)")
UNDER_MIN_ISR = MetricSpec(
    "kipper_under_min_isr_partitions", "gauge",
    "Partitions this broker leads whose ISR is below min.insync.replicas: acks=all produce "
    "fails (alert: > 0)")
AT_MIN_ISR = MetricSpec(
    "kipper_at_min_isr_partitions", "gauge",
    "Partitions this broker leads whose ISR equals min.insync.replicas: one more failure "
    "stops acks=all produce")
ISR_SHRINKS = MetricSpec(
    "kipper_isr_shrinks", "counter",
    "ISR shrinks of partitions this broker leads (its own AlterPartition, or the controller "
    "dropping a fenced broker's replica)")
ISR_EXPANDS = MetricSpec(
    "kipper_isr_expands", "counter",
    "ISR expands of partitions this broker leads (a follower caught up)")
OFFLINE_PARTITIONS = MetricSpec(
    "kipper_offline_partitions", "gauge",
    "Partitions without a live leader, counted by the controller (0 elsewhere; alert: > 0)",
    where=EVERY_NODE)
ACTIVE_CONTROLLER = MetricSpec(
    "kipper_active_controller", "gauge",
    "1 on the node that runs the controller, else 0 (alert: sum over nodes != 1)",
    where=EVERY_NODE)

# Consumer groups (coordinator/group/).
CONSUMER_GROUP_LAG = MetricSpec(
    "kipper_consumer_group_lag", "gauge",
    "Records between a group's committed offset and the partition's high watermark, "
    "computed at scrape time", ("group", "topic", "partition"), GROUP_COORDINATOR)
CONSUMER_GROUP_COMMITTED_OFFSET = MetricSpec(
    "kipper_consumer_group_committed_offset", "gauge",
    "A group's committed offset", ("group", "topic", "partition"), GROUP_COORDINATOR)

# The log cleaner of classic and active-tiered logs (storage/log_cleaner.py; Kafka's
# LogCleaner and LogCleanerManager gauges). Diskless topics are compacted by the batch
# coordinator's housekeeping: kipper_diskless_housekeeping_compaction*_total.
LOG_CLEANER_BYTES_READ = MetricSpec(
    "kipper_log_cleaner_bytes_read", "counter",
    "Bytes the log cleaner read (offset map and rewrite passes)")
LOG_CLEANER_BYTES_WRITTEN = MetricSpec(
    "kipper_log_cleaner_bytes_written", "counter",
    "Bytes of cleaned segments the log cleaner wrote")
LOG_CLEANER_RECORDS_REMOVED = MetricSpec(
    "kipper_log_cleaner_records_removed", "counter",
    "Records the log cleaner removed (superseded, expired tombstones, aborted, markers)")
LOG_CLEANER_CLEANINGS = MetricSpec(
    "kipper_log_cleaner_cleanings", "counter",
    "Cleanings of a log, abandoned ones included")
LOG_CLEANER_FAILURES = MetricSpec(
    "kipper_log_cleaner_failures", "counter",
    "Cleanings that failed with an error; the worker goes on (where Kafka's cleaner thread "
    "dies: its DeadThreadCount; alert: increasing)")
LOG_CLEANER_MAX_DIRTY_RATIO = MetricSpec(
    "kipper_log_cleaner_max_dirty_ratio", "gauge",
    "The highest dirty ratio among compacted logs at the cleaner's last look (Kafka's "
    "max-dirty-percent, as a fraction)")
LOG_CLEANER_MAX_COMPACTION_DELAY = MetricSpec(
    "kipper_log_cleaner_max_compaction_delay_seconds", "gauge",
    "The longest a compacted log's first dirty record has been past max.compaction.lag.ms "
    "at the cleaner's last look (Kafka's max-compaction-delay-secs; alert: growing)")
LOG_CLEANER_TIME_SINCE_LAST_RUN = MetricSpec(
    "kipper_log_cleaner_time_since_last_run_seconds", "gauge",
    "Time since the last cleaning ended (0 before the first; Kafka's time-since-last-run-ms)")
LOG_CLEANER_LAST_CLEAN_SECONDS = MetricSpec(
    "kipper_log_cleaner_last_clean_seconds", "gauge",
    "Duration of the last cleaning (Kafka's max-clean-time-secs)")
LOG_CLEANER_BUFFER_UTILIZATION = MetricSpec(
    "kipper_log_cleaner_buffer_utilization_ratio", "gauge",
    "The share of the offset map (log_cleaner_dedupe_buffer_size) the last cleaning filled "
    "(Kafka's max-buffer-utilization-percent, as a fraction)")
LOG_CLEANER_RECOPY_RATIO = MetricSpec(
    "kipper_log_cleaner_recopy_ratio", "gauge",
    "Bytes written over bytes read by the last cleaning (Kafka's cleaner-recopy-percent, as "
    "a fraction)")
LOG_CLEANER_FAMILIES = (
    LOG_CLEANER_BYTES_READ, LOG_CLEANER_BYTES_WRITTEN, LOG_CLEANER_RECORDS_REMOVED,
    LOG_CLEANER_CLEANINGS, LOG_CLEANER_FAILURES, LOG_CLEANER_MAX_DIRTY_RATIO,
    LOG_CLEANER_MAX_COMPACTION_DELAY, LOG_CLEANER_TIME_SINCE_LAST_RUN,
    LOG_CLEANER_LAST_CLEAN_SECONDS, LOG_CLEANER_BUFFER_UTILIZATION, LOG_CLEANER_RECOPY_RATIO,
)

# Network accounting by AZ (broker/traffic.py).
NETWORK_BYTES = MetricSpec(
    "kipper_network_bytes", "counter",
    "Kafka frame bytes on connections this broker accepted (each byte counted once "
    "cluster-wide)", ("local_az", "peer_az", "class", "direction"), EVERY_NODE)
NETWORK_CLIENT_BYTES = MetricSpec(
    "kipper_network_client_bytes", "counter",
    "Kafka frame bytes on connections this broker opened to other kipper nodes",
    ("local_az", "peer_az", "class", "direction"), EVERY_NODE)

# Object storage (storage/objectstore/).
_OBJECT_LABELS = ("operation", "bucket", "caller_az", "bucket_az")
OBJECT_STORE_FAMILIES = (
    MetricSpec("kipper_objectstore_requests", "counter",
               "S3 requests sent, failed ones included", _OBJECT_LABELS, OBJECT_STORE),
    MetricSpec("kipper_objectstore_errors", "counter", "S3 requests that failed",
               _OBJECT_LABELS, OBJECT_STORE),
    MetricSpec("kipper_objectstore_bytes", "counter",
               "Object bytes uploaded (writes) or downloaded (reads)", _OBJECT_LABELS,
               OBJECT_STORE),
    MetricSpec("kipper_objectstore_request_seconds", "histogram",
               "S3 request latency, added profile delay included", _OBJECT_LABELS,
               OBJECT_STORE),
    MetricSpec("kipper_objectstore_missing_object_reads", "counter",
               "Reads that found an object the logs point to missing (lost data)",
               ("bucket",), OBJECT_STORE),
)

# The diskless engine (broker/diskless_metrics.py).
DISKLESS_UPLOAD_SECONDS = MetricSpec(
    "kipper_diskless_wal_upload_seconds", "histogram",
    "Time to PUT one WAL object (successful uploads)", where=DISKLESS)
DISKLESS_COMMIT_SECONDS = MetricSpec(
    "kipper_diskless_wal_commit_seconds", "histogram",
    "Time for the batch coordinator to commit one WAL object's batches", where=DISKLESS)
DISKLESS_DOWNLOAD_SECONDS = MetricSpec(
    "kipper_diskless_read_cache_download_seconds", "histogram",
    "Time to GET the ranges a read missed in the read cache, per object", where=DISKLESS)
# These five, and the rest of the DISKLESS_SNAPSHOT prefix, are made from /metrics.json's
# "diskless" section by broker/diskless_metrics.py.
DISKLESS_READ_CACHE_HITS = MetricSpec(
    "kipper_diskless_read_cache_hits", "counter", "Batch ranges read from the read cache",
    where=DISKLESS)
DISKLESS_READ_CACHE_MISSES = MetricSpec(
    "kipper_diskless_read_cache_misses", "counter",
    "Batch ranges the read cache did not hold (read from object storage)", where=DISKLESS)
DISKLESS_READ_CACHE_HIT_RATE = MetricSpec(
    "kipper_diskless_read_cache_hit_rate", "gauge",
    "Hits / (hits + misses) since the broker started; for a recent ratio use the rates of "
    "the two counters", where=DISKLESS)
DISKLESS_EMPTY_OBJECTS = MetricSpec(
    "kipper_diskless_coordinator_empty_objects", "gauge",
    "WAL objects no live batch points to: awaiting garbage collection (deleted after "
    "diskless_object_delete_delay_ms)", where=DISKLESS)
DISKLESS_DEAD_BYTES = MetricSpec(
    "kipper_diskless_coordinator_dead_bytes", "gauge",
    "Bytes of WAL objects no live batch points to (rejected, removed, merged away)",
    where=DISKLESS)
DISKLESS_SNAPSHOT = MetricSpec(
    "kipper_diskless_", "gauge",
    "The other numbers of /metrics.json's \"diskless\" section, named "
    "kipper_diskless_<section>_<key>: counters (_total) for counts of events, e.g. "
    "kipper_diskless_wal_uploads_total, kipper_diskless_wal_upload_failures_total, "
    "kipper_diskless_wal_hedged_puts_total (second PUTs of slow WAL objects) and "
    "kipper_diskless_wal_hedged_put_wins_total, "
    "kipper_diskless_housekeeping_deleted_objects_total, and compaction's "
    "kipper_diskless_housekeeping_compactions_total, _compactions_refused_total, "
    "_compaction_bytes_before_total and _compaction_bytes_after_total (bytes of the batches "
    "rewritten or dropped, before and after); gauges for sizes and states, e.g. "
    "kipper_diskless_coordinator_db_bytes, kipper_diskless_coordinator_objects",
    where=DISKLESS, is_prefix=True)

# The active-tiered engine (storage/active_tiered/metrics.py).
ACTIVE_TIERED_STEP_SECONDS = MetricSpec(
    "kipper_active_tiered_step_seconds", "histogram",
    "Duration of each step of the acks=all path: upload_wait, put (the upload), publish, "
    "download (a follower's), replicated", ("step",), ACTIVE_TIERED)
ACTIVE_TIERED_COUNTERS = MetricSpec(
    "kipper_active_tiered_", "counter",
    "One counter per number of /metrics.json's \"active_tiered\" section, e.g. "
    "kipper_active_tiered_uploads_total{bucket}, kipper_active_tiered_deleted_objects_total"
    "{bucket}, kipper_active_tiered_failed_downloads_total, "
    "kipper_active_tiered_fallback_bytes_total", where=ACTIVE_TIERED, is_prefix=True)

PROCESS_FAMILIES = (
    MetricSpec("process_cpu_seconds", "counter", "User and system CPU time", where=EVERY_NODE),
    MetricSpec("process_resident_memory_bytes", "gauge", "Resident memory (RSS)",
               where=EVERY_NODE),
    MetricSpec("process_virtual_memory_bytes", "gauge", "Virtual memory", where=EVERY_NODE),
    MetricSpec("process_open_fds", "gauge", "Open file descriptors (sockets and segment files)",
          where=EVERY_NODE),
    MetricSpec("process_max_fds", "gauge", "The limit of open file descriptors", where=EVERY_NODE),
    MetricSpec("process_start_time_seconds", "gauge", "Start time, seconds since the epoch",
          where=EVERY_NODE),
)

CATALOG: tuple[MetricSpec, ...] = (
    REQUEST_SECONDS, CONNECTIONS, FAILED_AUTHENTICATIONS, RESPONSE_MEMORY_USED,
    RESPONSE_MEMORY_LIMIT, EVENT_LOOP_LAG, OPEN_SEGMENT_FILES, SEGMENT_FILES_CLOSED_IDLE,
    FETCH_SESSIONS, FETCH_SESSION_EVICTIONS, FETCH_REQUESTS,
    TOPIC_BYTES_IN, TOPIC_RECORDS_IN, TOPIC_BYTES_OUT, REPLICATION_BYTES_OUT,
    PARTITIONS, LEADER_PARTITIONS, UNDER_REPLICATED, UNDER_MIN_ISR, AT_MIN_ISR,
    ISR_SHRINKS, ISR_EXPANDS, OFFLINE_PARTITIONS, ACTIVE_CONTROLLER,
    CONSUMER_GROUP_LAG, CONSUMER_GROUP_COMMITTED_OFFSET, *LOG_CLEANER_FAMILIES,
    NETWORK_BYTES, NETWORK_CLIENT_BYTES, *OBJECT_STORE_FAMILIES,
    DISKLESS_UPLOAD_SECONDS, DISKLESS_COMMIT_SECONDS, DISKLESS_DOWNLOAD_SECONDS,
    DISKLESS_READ_CACHE_HITS, DISKLESS_READ_CACHE_MISSES, DISKLESS_READ_CACHE_HIT_RATE,
    DISKLESS_EMPTY_OBJECTS, DISKLESS_DEAD_BYTES, DISKLESS_SNAPSHOT,
    ACTIVE_TIERED_STEP_SECONDS, ACTIVE_TIERED_COUNTERS, *PROCESS_FAMILIES,
)


def spec_of(name: str) -> MetricSpec | None:
    """The catalogue entry a family or sample name of the exposition belongs to, if any."""
    for spec in CATALOG:
        if not spec.is_prefix and (name == spec.name or name in spec.samples):
            return spec
    for spec in CATALOG:
        if spec.is_prefix and name.startswith(spec.name):
            return spec
    return None


def metrics_table(prefixes: tuple[str, ...] = ()) -> str:
    """The catalogue as a Markdown table (a generated block of docs/metrics.md)."""
    rows = ["| metric | type | labels | where | meaning |", "|---|---|---|---|---|"]
    for spec in CATALOG:
        if prefixes and not spec.name.startswith(prefixes):
            continue
        name = f"`{spec.name}*`" if spec.is_prefix else f"`{spec.samples[0]}`"
        if spec.kind == "histogram" and not spec.is_prefix:
            name = f"`{spec.name}` (`_bucket`, `_sum`, `_count`)"
        labels = ", ".join(f"`{label}`" for label in spec.labels)
        rows.append(f"| {name} | {spec.kind} | {labels} | {spec.where} | "
                    f"{spec.help} |")
    return "\n".join(rows) + "\n"

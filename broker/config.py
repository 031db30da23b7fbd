"""Broker configuration: defaults < TOML file < KIPPER_* environment < command-line flags.

Every setting is declared once, below, with its description and (if it has one) its flag:
``BrokerConfig``, the ``kipper broker`` / ``kipper controller`` flags (broker/cli.py), the
``KIPPER_<NAME>`` environment variables and the settings table of README.md
(``python -m broker.config_docs --write``) are all derived from these declarations.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from storage.config import STORAGE_MODES
from storage.objectstore import WAL_BUCKET
from storage.objectstore.latency import LATENCY_PROFILES, LatencyModel

ENV_PREFIX = "KIPPER_"


@dataclass(frozen=True)
class Flag:
    """How a setting is given on the command line."""

    name: str
    # True: `kipper controller` takes it too (it describes the node, not the partitions it
    # serves); False: only `kipper broker` does.
    every_node: bool = False
    metavar: str | None = None
    choices: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Setting:
    """One broker setting as the CLI and the docs see it."""

    name: str
    kind: str  # the field's annotation, e.g. "int", "Path | None"
    default: Any
    doc: str
    flag: Flag | None

    @property
    def env_var(self) -> str:
        return ENV_PREFIX + self.name.upper()


def setting(default: Any, doc: str, *, flag: Flag | None = None, secret: bool = False) -> Any:
    """A BrokerConfig field with its description and optional command-line flag; a
    ``secret`` (a password, a key) is left out of the config's repr, so it is never logged."""
    metadata = {"doc": doc, "flag": flag}
    if isinstance(default, dict):  # dataclasses refuse mutable defaults: each config a copy
        return field(default_factory=lambda: dict(default), metadata=metadata, repr=not secret)
    return field(default=default, metadata=metadata, repr=not secret)


@dataclass
class BrokerConfig:
    node_id: int = setting(0, "Id of this node, unique in the cluster.",
                           flag=Flag("--node-id", every_node=True))
    listener: str = setting(
        "127.0.0.1:9092", "host:port to bind; port 0 picks a free port (the bound port is "
        "printed on the ready line and advertised).", flag=Flag("--listener", every_node=True))
    advertised_listener: str | None = setting(
        None, "host:port given to clients and other nodes; none = the listener.",
        flag=Flag("--advertised-listener", every_node=True))
    listeners: str | None = setting(
        None, "Kafka's `listeners`: named endpoints, each with its security protocol, e.g. "
        "`CLIENT://:9093,INTERNAL://10.0.0.5:9094` (docs/security.md); none = "
        "`PLAINTEXT://` + `listener`. Port 0 picks a free port.",
        flag=Flag("--listeners", every_node=True))
    advertised_listeners: str | None = setting(
        None, "Kafka's `advertised.listeners`: what clients and other nodes are told, per "
        "listener name (Metadata answers with the endpoints of the listener the request came "
        "in on); none = `listeners` (or `PLAINTEXT://` + `advertised_listener`).",
        flag=Flag("--advertised-listeners", every_node=True))
    listener_security_protocol_map: str | None = setting(
        None, "Kafka's `listener.security.protocol.map`, e.g. `CLIENT:SASL_SSL,INTERNAL:SSL`; "
        "none = each protocol's name stands for itself (`SASL_SSL://...`).",
        flag=Flag("--listener-security-protocol-map", every_node=True))
    inter_broker_listener_name: str | None = setting(
        None, "Kafka's `inter.broker.listener.name`: the listener nodes connect to each other "
        "on (with TLS and SASL when it has them); none = the first listener.",
        flag=Flag("--inter-broker-listener-name", every_node=True))
    ssl_keystore_location: str | None = setting(
        None, "TLS listeners: PEM file with the node's private key and certificate chain "
        "(Kafka's `ssl.keystore.location` with `ssl.keystore.type=PEM`).")
    ssl_certificate_location: str | None = setting(
        None, "TLS listeners: PEM certificate chain, with `ssl_key_location` (instead of a "
        "keystore).")
    ssl_key_location: str | None = setting(None, "TLS listeners: PEM private key.")
    ssl_key_password: str | None = setting(
        None, "Password of an encrypted private key (`ssl.key.password`).", secret=True)
    ssl_truststore_location: str | None = setting(
        None, "PEM CA certificates: what client certificates (mTLS) and, for the node's own "
        "connections to other nodes, their certificates are checked against.")
    ssl_client_auth: str = setting(
        "none", "`ssl.client.auth` of TLS listeners: `required` (mTLS: the principal is the "
        "certificate's subject, mapped by `ssl_principal_mapping_rules`), `requested` or "
        "`none`.")
    ssl_enabled_protocols: str = setting("TLSv1.2,TLSv1.3", "`ssl.enabled.protocols`.")
    ssl_cipher_suites: str = setting(
        "", "`ssl.cipher.suites` (TLS 1.2 suites); empty = OpenSSL's defaults.")
    ssl_principal_mapping_rules: str = setting(
        "DEFAULT", "`ssl.principal.mapping.rules` (KIP-371): how a client certificate's "
        "subject becomes the principal, e.g. `RULE:^CN=(.*?),.*$/$1/,DEFAULT`.")
    ssl_endpoint_identification_algorithm: str = setting(
        "https", "The node's own TLS connections to other nodes check their host name "
        "against the certificate (`https`) or not (empty).")
    listener_ssl_settings: dict[str, str] = setting(
        {}, "TLS settings of one listener, under Kafka's names "
        "(`listener.name.<listener>.ssl.<setting>`, e.g. `\"listener.name.internal.ssl.client."
        "auth\" = \"required\"`), over the `ssl_*` settings: a TOML table, or JSON in the "
        "environment variable. Also how a SASL_SSL listener asks for client certificates.",
        secret=True)
    ssl_handshake_timeout_ms: int = setting(
        10_000, "A TLS handshake not finished in this time closes the connection.")
    sasl_enabled_mechanisms: str = setting(
        "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512", "`sasl.enabled.mechanisms` of SASL listeners: "
        "any of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER.")
    sasl_plain_users: dict[str, str] = setting(
        {}, "PLAIN users and their passwords, a table in the TOML file (`[sasl_plain_users]` "
        "`alice = \"secret\"`): PlainLoginModule's `user_<name>` options.", secret=True)
    sasl_plain_users_file: Path | None = setting(
        None, "PLAIN users in a properties file of JAAS-style `user_<name>=<password>` lines "
        "(with `sasl_plain_users`).")
    sasl_scram_bootstrap_users: dict[str, str] = setting(
        {}, "Users whose SCRAM-SHA-256 and SCRAM-SHA-512 credentials the controller writes "
        "to the metadata log at start if they have none (Kafka's `kafka-storage format "
        "--add-scram`): the first users of a SASL cluster, e.g. its admin and the brokers' "
        "own user. A TOML table, or JSON in the environment variable.", secret=True)
    sasl_mechanism_inter_broker_protocol: str = setting(
        "SCRAM-SHA-512", "The SASL mechanism nodes authenticate to each other with when the "
        "inter-broker listener uses SASL (`sasl.mechanism.inter.broker.protocol`).")
    inter_broker_sasl_username: str | None = setting(
        None, "The user nodes authenticate to each other as on a SASL inter-broker listener.")
    inter_broker_sasl_password: str | None = setting(
        None, "Its password (no flag: give it in the TOML file or the environment).",
        secret=True)
    sasl_oauthbearer_jwks_endpoint_url: str | None = setting(
        None, "OAUTHBEARER: the JWKS whose keys sign accepted tokens, an `https://` URL or a "
        "file (`file://` or a path) (`sasl.oauthbearer.jwks.endpoint.url`).")
    sasl_oauthbearer_expected_audience: str | None = setting(
        None, "OAUTHBEARER: comma-separated audiences a token's `aud` must include.")
    sasl_oauthbearer_expected_issuer: str | None = setting(
        None, "OAUTHBEARER: the `iss` a token must have.")
    sasl_oauthbearer_sub_claim_name: str = setting(
        "sub", "OAUTHBEARER: the claim that names the principal.")
    connections_max_reauth_ms: int = setting(
        0, "SASL sessions last at most this long (KIP-368): the client must re-authenticate "
        "(as the same principal) before sending more; 0 = no limit (Kafka's default).")
    rack: str | None = setting(
        None, "Availability zone of this node (Kafka's `broker.rack`): used by rack-aware "
        "placement, follower fetching (KIP-392), diskless routing (KIP-1181), the fast bucket "
        "of active-tiered topics and the AZ byte accounting.",
        flag=Flag("--rack", every_node=True))
    data_dir: Path = setting(Path("data/broker-0"), "Directory of this node's logs and state.",
                             flag=Flag("--data-dir", every_node=True))
    metrics_listener: str | None = setting(
        None, "host:port of the HTTP metrics endpoint (`/metrics`, `/metrics.json`, "
        "`/admin/s3-faults`); port 0 = any free port; none = no endpoint.",
        flag=Flag("--metrics-listener", every_node=True))
    loop_stall_log_ms: int = setting(
        0, "When the event loop is held this long by one piece of work, log where it is "
        "(broker.stall_watch: a stack per stall, for finding what holds a broker up); 0 = "
        "off. `kipper_event_loop_lag_seconds` counts the stalls either way.")
    controller: str | None = setting(
        None, "host:port of the controller, a quorum of one elsewhere; none (and no "
        "`controller_quorum_voters`) = this process runs it alone.", flag=Flag("--controller"))
    controller_quorum_voters: str = setting(
        "", "The controller quorum (KRaft, Kafka's `controller.quorum.voters`): "
        "`id@host:port,...`, each voter's inter-broker listener. A node named there runs a "
        "controller and votes; every node finds the active controller among them. Empty = "
        "see `controller`.", flag=Flag("--controller-quorum-voters", every_node=True))
    controller_quorum_fetch_timeout_ms: int = setting(
        1000, "A voter that heard nothing from the quorum's leader for this long (plus up to "
        "30 % at random) starts an election (Kafka's `controller.quorum.fetch.timeout.ms`, "
        "2000 there): with `controller_quorum_election_timeout_ms` it bounds how long the "
        "cluster has no active controller after the active one dies.")
    controller_quorum_election_timeout_ms: int = setting(
        300, "A candidate that did not win tries again after 1-2× this "
        "(`controller.quorum.election.timeout.ms`).")
    broker_role: bool = setting(
        True, "False for `kipper controller`: a controller-only node serving no partitions "
        "(set by the subcommand).")
    cluster_id: str = setting("kipper-cluster", "Cluster id returned in Metadata and "
                              "DescribeCluster responses.")
    cluster_secret: str | None = setting(
        None, "Shared by every node of the cluster: a connection must prove it holds it "
        "before it may send broker-only requests (kipper's internal APIs, the controller's "
        "APIs, follower fetches; docs/internal-apis.md). Give it in the TOML file or "
        "`KIPPER_CLUSTER_SECRET` (no flag: a command line is visible to every local user); "
        "`kipper cluster up` generates one per run. None = a random secret of this process "
        "alone: it serves itself, and no other node can join it.",
        secret=True)
    authorizer_enabled: bool = setting(
        False, "Check every request against the cluster's ACLs (Kafka's `authorizer.class.name` "
        "= StandardAuthorizer; docs/authorization.md). Off: every client may do anything, "
        "and CreateAcls/DescribeAcls/DeleteAcls answer SECURITY_DISABLED.")
    super_users: str = setting(
        "", "Principals allowed everything whatever the ACLs say, `;`-separated as Kafka's "
        "`super.users` (e.g. `User:admin;User:alice`). Brokers of the cluster always are.")
    allow_everyone_if_no_acl_found: bool = setting(
        False, "Allow an operation on a resource no ACL names (`allow.everyone.if.no.acl.found`"
        "); once an ACL names it, only what the ACLs allow is.")
    broker_session_timeout_ms: int = setting(
        9000, "The controller fences a broker that sent no heartbeat for this long and moves "
        "its leaderships.")
    broker_heartbeat_interval_ms: int = setting(
        2000, "How often a broker heartbeats to the controller (`broker.heartbeat.interval.ms`"
        "), at most a quarter of `broker_session_timeout_ms`; a change of its data "
        "directory's state (full, or not any more) is reported at once.")
    replica_lag_time_max_ms: int = setting(
        30_000, "A follower not caught up with the leader for this long leaves the ISR.")
    unclean_leader_election: bool = setting(
        False, "Broker-wide default of `unclean.leader.election.enable`: elect an out-of-sync "
        "replica when no in-sync one is alive.")
    auto_create_topics: bool = setting(
        True, "Create unknown topics named in Metadata requests that allow it "
        "(`auto.create.topics.enable`; on by default, as in Kafka).",
        flag=Flag("--auto-create-topics"))
    default_partitions: int = setting(
        1, "Partition count of topics created without one (`num.partitions`).",
        flag=Flag("--num-partitions"))
    default_replication_factor: int = setting(
        1, "Replication factor of topics created without one (`default.replication.factor`).")
    default_storage_mode: str = setting(
        "classic", "`kipper.storage.mode` of topics created without one.",
        flag=Flag("--default-storage-mode", choices=STORAGE_MODES))
    topic_defaults: dict[str, str] = setting(
        {}, "Broker-wide defaults of topic configs, given as a table in the TOML file (e.g. "
        "`[topic_defaults]` `\"retention.ms\" = \"3600000\"`).")
    max_request_bytes: int = setting(
        100 * 1024 * 1024, "Largest request frame accepted (`socket.request.max.bytes`).")
    connections_max_idle_ms: int = setting(
        600_000, "A client connection idle this long is closed (`connections.max.idle.ms`).")
    max_incremental_fetch_session_cache_slots: int = setting(
        1000, "Incremental fetch sessions (KIP-227) a broker keeps for consumers and "
        "followers (`max.incremental.fetch.session.cache.slots`); past it a new session "
        "takes an idle or less valuable one's slot, or the fetcher goes without.")
    fetch_max_bytes: int = setting(
        55 * 1024 * 1024, "Most record bytes one Fetch response carries, whatever the request "
        "asks (`fetch.max.bytes`).")
    connection_max_queued_response_bytes: int = setting(
        16 * 1024 * 1024, "Bytes a connection may hold (requests read and not yet answered, "
        "responses being built or not yet sent) before the broker stops reading its requests; "
        "a client that pipelines large requests or does not read its responses cannot grow "
        "the broker (one request at a time always goes through).")
    max_queued_response_bytes: int = setting(
        256 * 1024 * 1024, "The same bound over all connections: past it, a connection that "
        "already holds a response waits before its next request is read.")
    request_read_timeout_ms: int = setting(
        30_000, "A request whose bytes, once begun, take longer than this to arrive closes "
        "its connection (a slow or stalled client, e.g. slowloris, cannot hold it open).")
    transaction_state_log_num_partitions: int = setting(
        50, "Partitions of `__transaction_state`, created on the first FindCoordinator for a "
        "transaction (`transaction.state.log.num.partitions`; its replication factor is 3 "
        "lowered to the live brokers).")
    transaction_max_timeout_ms: int = setting(
        900_000, "Longest `transaction.timeout.ms` a producer may ask for "
        "(`transaction.max.timeout.ms`).")
    transactional_id_expiration_ms: int = setting(
        7 * 24 * 3600 * 1000, "A transactional id with no transaction for this long is "
        "forgotten (`transactional.id.expiration.ms`).")
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = setting(
        10_000, "How often transactions open longer than their timeout are aborted "
        "(`transaction.abort.timed.out.transaction.cleanup.interval.ms`).")
    transaction_remove_expired_transaction_cleanup_interval_ms: int = setting(
        3600 * 1000, "How often expired transactional ids are removed "
        "(`transaction.remove.expired.transaction.cleanup.interval.ms`).")
    transaction_version: int = setting(
        2, "The `transaction.version` feature level the cluster finalizes (what ApiVersions "
        "reports): 2 lets producers that speak it use transaction protocol version 2 "
        "(KIP-890: the epoch bumped at every transaction end, partitions added by their "
        "leaders), as a new Kafka 4.0 cluster; 0 or 1 keeps every producer on version 1. "
        "The request versions decide how a request is served, whatever the level.")
    log_retention_check_interval_ms: int = setting(
        300_000, "How often `retention.ms` / `retention.bytes` are applied, to the logs of "
        "every storage mode (`log.retention.check.interval.ms`).")
    log_flush_interval_ms: int = setting(
        1_000, "How often local logs are checked for an fsync due by `flush.ms`.")
    log_dir_reserved_bytes: int = setting(
        -1, "Free space of the data directory's file system that appends of data (topics "
        "not named `__*`) leave to the metadata log, consumer offsets and checkpoints: past "
        "it produce answers `KAFKA_STORAGE_ERROR` (until twice as much is free) while reads, "
        "DeleteRecords, retention and topic deletion go on, and a restart comes up. -1 = 5 % "
        "of the file system, at most 1 GiB; 0 = none (docs/cluster.md, \"A full disk\").")
    s3_endpoint: str | None = setting(
        None, "S3 endpoint URL of the object store (MinIO, LocalStack, AWS, or `kipper cluster "
        "up`'s embedded server); without one, active-tiered and diskless topics are refused.",
        flag=Flag("--s3-endpoint"))
    s3_access_key: str | None = setting(
        None, "S3 access key; none = botocore's credential chain (`AWS_ACCESS_KEY_ID`, "
        "`~/.aws`, instance role).", flag=Flag("--s3-access-key"))
    s3_secret_key: str | None = setting(None, "S3 secret key, with `s3_access_key`.",
                                        flag=Flag("--s3-secret-key"), secret=True)
    s3_latency_profile: str = setting(
        "none", "Latency profile added to every object-store request, so a laptop run shows "
        "cloud latencies (the profiles are in docs/object-storage.md; `none` adds nothing).", flag=Flag("--s3-latency-profile", choices=tuple(sorted(LATENCY_PROFILES))))
    s3_request_timeout_ms: int = setting(
        5_000, "Bounds every object-store operation, its retries included: a store that "
        "accepts connections and never answers fails the request after this long (diskless "
        "produce answers `KAFKA_STORAGE_ERROR`, active-tiered followers fetch from the "
        "leader) instead of holding it for retries x botocore's 30 s read timeout.")
    s3_key_prefix: str = setting(
        "", "Prepended to every object key this cluster writes, so clusters can share buckets.")
    diskless_append_commit_interval_ms: int = setting(
        250, "Diskless: the broker's WAL buffer (one for all its diskless partitions) is "
        "closed, uploaded and committed this long after its first batch, or sooner at "
        "`diskless_append_buffer_max_bytes`.")
    diskless_append_buffer_max_bytes: int = setting(
        8 * 1024 * 1024, "Diskless: the WAL buffer is closed once it holds this many bytes.")
    diskless_append_hedge_after_ms: int = setting(
        -1, "Diskless: hedged WAL uploads. When a WAL object's PUT has not answered this long "
        "after it was sent, a second PUT of the same object (same key, same bytes) is sent; "
        "the first to succeed completes the upload, the other is cancelled. Costs one more "
        "PUT per hedged object (`kipper_diskless_wal_hedged_puts_total`). -1 = never (one PUT "
        "per object); 0 = after the P95 of `s3_latency_profile`'s PUT to `kipper-wal` (a "
        "profile other than `none` needed); above 0: after this many ms.")
    diskless_append_commit_per_partition: bool = setting(
        False, "Diskless: commit each partition's batches of a WAL object as a commit request "
        "of its own (the naive per-partition fan-out, for comparison: as many commit RPCs "
        "and coordinator appends per WAL file as partitions in it) instead of one per "
        "object.")
    diskless_read_cache_max_bytes: int = setting(
        256 * 1024 * 1024, "Diskless: size of the LRU cache of WAL object ranges read "
        "(the uploading broker fills it too).")
    diskless_catch_up_timeout_ms: int = setting(
        5_000, "Diskless: ListOffsets, Fetch and DeleteRecords first bring this broker's copy "
        "of the batch coordinator's state up to what the coordinator has committed (so they "
        "see every acknowledged produce, through any broker); if that takes longer than this "
        "(coordinator unreachable), the partition answers OFFSET_NOT_AVAILABLE, which "
        "clients retry.")
    diskless_housekeeping_interval_ms: int = setting(
        5_000, "Diskless: how often the batch coordinator drops deleted topics, deletes and "
        "merges objects (coordinator/diskless/housekeeping.py); retention runs every "
        "`log_retention_check_interval_ms`.")
    diskless_object_delete_delay_ms: int = setting(
        60_000, "Diskless: an object with no live batch is deleted this long after it emptied, "
        "so reads that looked it up finish first.")
    diskless_orphan_grace_ms: int = setting(
        600_000, "Diskless: an object in the WAL bucket the coordinator never heard of (an "
        "upload whose commit never happened) is deleted once this old.")
    diskless_merge_max_object_bytes: int = setting(
        4 * 1024 * 1024, "Diskless (KIP-1165): broker-written objects smaller than this are "
        "merged, once there are `diskless_merge_min_objects` of them.")
    diskless_merge_min_objects: int = setting(
        8, "Diskless: the fewest small objects that are worth a merge.")
    diskless_merge_min_age_ms: int = setting(
        30_000, "Diskless: objects younger than this are not merged yet. Consumers at the "
        "tail read them meanwhile, from the brokers' read caches; a merge then would move "
        "their batches to an object no cache holds and make those reads GET it again.")
    shared_wal_interval_ms: int = setting(
        100, "Shared (KIP-1183): the broker's WAL buffer (one object for all the shared "
        "partitions it leads) is closed, uploaded and committed this long after its first "
        "records, or sooner at `shared_wal_max_bytes`.")
    shared_wal_max_bytes: int = setting(
        4 << 20, "Shared: the WAL buffer is closed once it holds this many bytes.")
    shared_data_object_interval_ms: int = setting(
        5000, "Shared: how often a leader copies each partition's committed WAL ranges into "
        "one data object of that partition, after which WAL objects no stream needs are "
        "deleted.")
    active_tiered_upload_interval_ms: int = setting(
        100, "Active-tiered (KIP-1176): the broker's WAL uploader closes and uploads one "
        "object with the new bytes of all its leader partitions this often, or sooner at "
        "`active_tiered_upload_max_bytes`.")
    active_tiered_upload_max_bytes: int = setting(
        4 << 20, "Active-tiered: the uploader closes its object once it holds this many "
        "bytes.")
    active_tiered_upload_timeout_ms: int = setting(
        2000, "Active-tiered: the leader abandons a WAL upload that has not finished in this "
        "time and retries it on the next tick; meanwhile followers fetch the records from it, "
        "so a hung object store slows acks=all to classic replication instead of stopping it.")
    active_tiered_download_timeout_ms: int = setting(
        2000, "Active-tiered: a follower that cannot get a WAL range (its bytes, or with the "
        "`topic` scheme its metadata) in this time asks the leader for the records instead.")
    auto_leader_rebalance_enable: bool = setting(
        True, "The controller moves leaderships back to their preferred replica (the first "
        "of a partition's replicas, when it is alive and in the ISR) once a broker leads "
        "too few of the partitions it prefers (`auto.leader.rebalance.enable`).")
    leader_imbalance_per_broker_percentage: int = setting(
        10, "Share of a broker's preferred partitions led elsewhere above which their "
        "leaderships move back (`leader.imbalance.per.broker.percentage`).")
    leader_imbalance_check_interval_seconds: int = setting(
        30, "How often the controller checks the leader imbalance "
        "(`leader.imbalance.check.interval.seconds`). Kafka waits 300 s; kipper's brokers "
        "restart in seconds and only an in-sync preferred replica takes leadership back, so "
        "a restarted broker stops idling within half a minute instead of five.")
    producer_id_expiration_ms: int = setting(
        86_400_000, "An idempotent producer that wrote nothing to a partition for this long "
        "and has no open transaction is forgotten there (`producer.id.expiration.ms`), so "
        "producer state does not grow with every producer that ever wrote; its next write "
        "starts anew.")
    producer_id_expiration_check_interval_ms: int = setting(
        600_000, "How often producer state is checked for expired producers "
        "(`producer.id.expiration.check.interval.ms`).")
    metadata_log_max_record_bytes_between_snapshots: int = setting(
        20 * 1024 * 1024, "The controller snapshots the cluster metadata (KIP-630) once this "
        "many bytes of records were applied since the last snapshot, the log a restart "
        "replays included (`metadata.log.max.record.bytes.between.snapshots`); restarts load "
        "the newest snapshot and the log after it, and the log below the older of two "
        "snapshots is deleted.")
    metadata_log_max_snapshot_interval_ms: int = setting(
        3_600_000, "…or once this long has passed since the last snapshot with records "
        "appended since (`metadata.log.max.snapshot.interval.ms`; 0 turns it off).")
    log_cleaner_threads: int = setting(
        1, "Log cleaner workers compacting the logs of `cleanup.policy=compact` topics "
        "(`log.cleaner.threads`; classic and active-tiered, docs/compaction.md).")
    log_cleaner_dedupe_buffer_size: int = setting(
        128 << 20, "Memory of the cleaner's key -> latest offset maps, shared by its workers "
        "(`log.cleaner.dedupe.buffer.size`; 24 bytes a key): a dirty section with more keys "
        "is cleaned in several passes.")
    log_cleaner_backoff_ms: int = setting(
        15_000, "How long a cleaner worker with no log to clean waits before looking again "
        "(`log.cleaner.backoff.ms`).")
    log_cleaner_io_max_bytes_per_second: float = setting(
        float("inf"), "Bytes per second the cleaner reads and writes, all workers together "
        "(`log.cleaner.io.max.bytes.per.second`; inf = unlimited).")
    offsets_topic_segment_bytes: int = setting(
        100 * 1024 * 1024, "`segment.bytes` of `__consumer_offsets` when it is created "
        "(`offsets.topic.segment.bytes`): the log cleaner compacts it segment by segment, "
        "never the active one.")
    group_consumer_heartbeat_interval_ms: int = setting(
        5_000, "How often a member of a KIP-848 consumer group heartbeats "
        "(`group.consumer.heartbeat.interval.ms`): it learns of partitions to revoke or take "
        "at its next heartbeat.")
    group_consumer_reconciling_heartbeat_interval_ms: int = setting(
        500, "kipper's own: the heartbeat interval a KIP-848 consumer group member is given "
        "while it still has partitions to revoke or to take, so a partition that changes "
        "member pauses about this long, not a whole heartbeat interval (set it to "
        "`group_consumer_heartbeat_interval_ms` for Kafka's behaviour).")
    group_consumer_session_timeout_ms: int = setting(
        45_000, "A KIP-848 consumer group member silent this long is removed and its "
        "partitions reassigned (`group.consumer.session.timeout.ms`).")
    group_consumer_assignors: str = setting(
        "uniform,range", "The server-side assignors KIP-848 consumer groups may ask for "
        "(`group.consumer.assignors`, comma-separated: `uniform`, `range`); the first is the "
        "default. Both are rack-aware when members set `client.rack`.")
    transaction_state_log_segment_bytes: int = setting(
        100 * 1024 * 1024, "`segment.bytes` of `__transaction_state` when it is created "
        "(`transaction.state.log.segment.bytes`).")
    # Share groups (KIP-932, docs/share-groups.md).
    group_share_record_lock_duration_ms: int = setting(
        30_000, "How long a share group member holds the records it was given before they "
        "go back for redelivery (`group.share.record.lock.duration.ms`).")
    group_share_delivery_count_limit: int = setting(
        5, "Deliveries of a record to share group members after which it is archived, not "
        "redelivered (`group.share.delivery.count.limit`).")
    group_share_partition_max_record_locks: int = setting(
        2000, "Records of one share partition in flight at most "
        "(`group.share.partition.max.record.locks`).")
    group_share_session_timeout_ms: int = setting(
        45_000, "A share group member that does not heartbeat for this long is removed "
        "(`group.share.session.timeout.ms`).")
    group_share_heartbeat_interval_ms: int = setting(
        5000, "Heartbeat interval given to share group members "
        "(`group.share.heartbeat.interval.ms`).")
    group_share_max_size: int = setting(
        200, "Members of one share group at most (`group.share.max.size`).")
    group_share_auto_offset_reset: str = setting(
        "latest", "Where a share group starts reading a partition it has no state for: "
        "`latest` or `earliest`, for share groups that do not set Kafka's "
        "`share.auto.offset.reset` group config themselves.")
    share_coordinator_state_topic_num_partitions: int = setting(
        10, "Partitions of `__share_group_state`, created when a share group first fetches "
        "(`share.coordinator.state.topic.num.partitions`; Kafka's default is 50).")
    capture_trace_dir: Path | None = setting(
        None, "Directory where the produce traffic received is written as a bench trace "
        "(bench/README.md); none = off.", flag=Flag("--capture-trace", metavar="DIR"))
    diskless_coordinator_checkpoint_interval_records: int = setting(
        10_000, "Diskless: the batch coordinator checkpoints its state to object storage "
        "once this many records were applied since the last checkpoint; a broker without a "
        "usable database restores the newest checkpoint and applies the log after it, and "
        "`__diskless-metadata` is deleted below the older of the two checkpoints kept.")
    diskless_coordinator_checkpoint_interval_ms: int = setting(
        600_000, "…or once this long has passed since the last checkpoint with records "
        "applied since.")

    @property
    def host_port(self) -> tuple[str, int]:
        return split_host_port(self.listener)

    def wal_hedge_after_s(self) -> float | None:
        """When the diskless WAL writer sends a second PUT of a slow object, None = never
        (``diskless_append_hedge_after_ms``)."""
        after_ms = self.diskless_append_hedge_after_ms
        if after_ms < 0:
            return None
        if after_ms > 0:
            return after_ms / 1000
        p95_s = LatencyModel(self.s3_latency_profile).quantile_s("put", WAL_BUCKET, 0.95)
        if p95_s is None:
            raise ValueError(
                "diskless_append_hedge_after_ms = 0 means the P95 of s3_latency_profile's PUT, "
                f"and profile {self.s3_latency_profile!r} has none: give the milliseconds")
        return p95_s


def settings() -> list[Setting]:
    """Every BrokerConfig setting in declaration order, with its description and flag."""
    return [Setting(f.name, f.type,
                    f.default_factory() if f.default_factory is not dataclasses.MISSING
                    else f.default,
                    f.metadata["doc"], f.metadata["flag"])
            for f in dataclasses.fields(BrokerConfig)]


def split_host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"listener {address!r} is not host:port")
    return host.strip("[]"), int(port)


def _coerce(kind: str, raw: Any) -> Any:
    """Convert a TOML/env/CLI value to the field's declared type (annotations are strings)."""
    if kind == "int":
        return int(raw)
    if kind == "float":
        return float(raw)
    if kind == "bool":
        return raw if isinstance(raw, bool) else str(raw).lower() in ("1", "true", "yes", "on")
    if kind in ("Path", "Path | None"):
        return Path(raw)
    if kind.startswith("dict"):
        if isinstance(raw, str):  # an environment variable: a JSON object
            raw = json.loads(raw)
        return {str(k): str(v) for k, v in dict(raw).items()}
    return None if raw is None else str(raw)


def load_config(config_file: Path | None = None, overrides: dict[str, Any] | None = None,
                environ: dict[str, str] | None = None) -> BrokerConfig:
    environ = os.environ if environ is None else environ
    declared = {s.name: s for s in settings()}
    values: dict[str, Any] = {}
    if config_file is not None:
        with open(config_file, "rb") as f:
            for key, raw in tomllib.load(f).items():
                name = key.replace("-", "_").replace(".", "_")
                if name not in declared:
                    raise ValueError(f"{config_file}: unknown broker setting {key!r}")
                values[name] = raw
    for name, declaration in declared.items():
        if declaration.env_var in environ:
            values[name] = environ[declaration.env_var]
    for name, raw in (overrides or {}).items():
        if raw is not None:
            values[name] = raw
    return BrokerConfig(**{name: _coerce(declared[name].kind, raw)
                           for name, raw in values.items()})

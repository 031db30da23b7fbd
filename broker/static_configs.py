"""This node's settings under Kafka's broker config names: the static level of the effective
configs (replication.dynamic_config) and what DescribeConfigs reports as STATIC_BROKER_CONFIG."""

from __future__ import annotations

from replication.broker_configs import TOPIC_SYNONYMS
from replication.cluster_metadata import MetadataImage
from replication.dynamic_config import DynamicConfigs

from .config import BrokerConfig

# What Kafka's authorizer.class.name names for the authorizer kipper implements.
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def _static_broker_configs(config: BrokerConfig) -> dict[str, str]:
    values = {
        "broker.id": config.node_id,
        "broker.rack": config.rack,
        "log.dirs": config.data_dir,
        "auto.create.topics.enable": str(config.auto_create_topics).lower(),
        "num.partitions": config.default_partitions,
        "default.replication.factor": config.default_replication_factor,
        "socket.request.max.bytes": config.max_request_bytes,
        "connections.max.idle.ms": config.connections_max_idle_ms,
        "fetch.max.bytes": config.fetch_max_bytes,
        "replica.lag.time.max.ms": config.replica_lag_time_max_ms,
        "log.retention.check.interval.ms": config.log_retention_check_interval_ms,
        "transaction.max.timeout.ms": config.transaction_max_timeout_ms,
        "producer.id.expiration.ms": config.producer_id_expiration_ms,
        "producer.id.expiration.check.interval.ms":
            config.producer_id_expiration_check_interval_ms,
        "kipper.cluster.secret": config.cluster_secret,
        "kipper.s3.secret.key": config.s3_secret_key,
        "kipper.default.storage.mode": config.default_storage_mode,
        "unclean.leader.election.enable": str(config.unclean_leader_election).lower(),
        "log.cleaner.threads": config.log_cleaner_threads,
        "log.cleaner.io.max.bytes.per.second": config.log_cleaner_io_max_bytes_per_second,
        "log.cleaner.dedupe.buffer.size": config.log_cleaner_dedupe_buffer_size,
        "log.cleaner.backoff.ms": config.log_cleaner_backoff_ms,
        "auto.leader.rebalance.enable": str(config.auto_leader_rebalance_enable).lower(),
        "leader.imbalance.per.broker.percentage": config.leader_imbalance_per_broker_percentage,
        "leader.imbalance.check.interval.seconds": config.leader_imbalance_check_interval_seconds,
        "listeners": config.listeners,
        "advertised.listeners": config.advertised_listeners,
        "listener.security.protocol.map": config.listener_security_protocol_map,
        "inter.broker.listener.name": config.inter_broker_listener_name,
        "ssl.keystore.location": config.ssl_keystore_location,
        "ssl.key.password": config.ssl_key_password,
        "ssl.truststore.location": config.ssl_truststore_location,
        "ssl.client.auth": config.ssl_client_auth,
        "ssl.enabled.protocols": config.ssl_enabled_protocols,
        "ssl.principal.mapping.rules": config.ssl_principal_mapping_rules,
        "sasl.enabled.mechanisms": config.sasl_enabled_mechanisms,
        "sasl.mechanism.inter.broker.protocol": config.sasl_mechanism_inter_broker_protocol,
        "kipper.inter.broker.sasl.password": config.inter_broker_sasl_password,
        "connections.max.reauth.ms": config.connections_max_reauth_ms,
        "authorizer.class.name": STANDARD_AUTHORIZER if config.authorizer_enabled else "",
        "super.users": config.super_users,
        "allow.everyone.if.no.acl.found": str(config.allow_everyone_if_no_acl_found).lower(),
    }
    return {name: str(value) for name, value in values.items() if value is not None}


def dynamic_configs(config: BrokerConfig, image: MetadataImage) -> DynamicConfigs:
    """The effective configs of this node over ``image``: ``[topic_defaults]`` entries count
    as their broker synonym (retention.ms as log.retention.ms) where the topic config has one."""
    static = _static_broker_configs(config)
    topic_only = {}
    for name, value in config.topic_defaults.items():
        synonyms = TOPIC_SYNONYMS.get(name)
        if synonyms:
            static[synonyms[0].name] = value
        else:
            topic_only[name] = value
    return DynamicConfigs(config.node_id, image, static, topic_only)

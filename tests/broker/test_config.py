"""`kipper broker` / `kipper controller` settings: the flags they accept, and the precedence
defaults < --config TOML < KIPPER_* environment < flags; `kipper cluster up`'s options in
docs/cluster.md."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from broker.cli import build_parser, config_from_args
from broker.config import BrokerConfig
from broker.static_configs import dynamic_configs
from replication.cluster_metadata import MetadataImage

NODE_FLAGS = {"--config", "--node-id", "--listener", "--advertised-listener", "--rack",
              "--data-dir", "--metrics-listener", "--listeners", "--advertised-listeners",
              "--listener-security-protocol-map", "--inter-broker-listener-name",
              "--controller-quorum-voters"}
BROKER_ONLY_FLAGS = {"--controller", "--auto-create-topics", "--no-auto-create-topics",
                     "--default-storage-mode",
                     "--num-partitions", "--s3-endpoint", "--s3-access-key", "--s3-secret-key",
                     "--s3-latency-profile", "--capture-trace"}


def flags_of(*command: str) -> set[str]:
    """The options of `kipper COMMAND...`, e.g. flags_of("cluster", "up")."""
    parser = build_parser()
    for name in command:
        parser = next(action for action in parser._actions
                      if isinstance(action, argparse._SubParsersAction)).choices[name]
    return {option for action in parser._actions
            for option in action.option_strings} - {"-h", "--help"}


def test_broker_and_controller_accept_their_flags():
    assert flags_of("broker") == NODE_FLAGS | BROKER_ONLY_FLAGS
    assert flags_of("controller") == NODE_FLAGS


def test_cluster_doc_names_every_cluster_up_option():
    """docs/cluster.md's option table is written by hand (its text says more than --help)."""
    table = (Path(__file__).resolve().parents[2] / "docs/cluster.md").read_text()
    assert {flag for flag in flags_of("cluster", "up") if f"| `{flag}" not in table} == set()


def test_defaults_then_file_then_environment_then_flags(tmp_path: Path):
    toml = tmp_path / "broker.toml"
    toml.write_text('node_id = 1\nrack = "az-file"\ndefault-partitions = 2\n'
                    'log-flush-interval-ms = 7\n[topic_defaults]\n"retention.ms" = 60000\n')
    environ = {"KIPPER_RACK": "az-env", "KIPPER_DEFAULT_PARTITIONS": "4",
               "KIPPER_AUTO_CREATE_TOPICS": "false"}
    args = build_parser().parse_args(["broker", "--config", str(toml), "--num-partitions", "8",
                                      "--capture-trace", "trace", "--s3-latency-profile", "aws"])
    config = config_from_args(args, environ)
    assert config == BrokerConfig(
        node_id=1, rack="az-env", default_partitions=8, log_flush_interval_ms=7,
        topic_defaults={"retention.ms": "60000"}, auto_create_topics=False,
        capture_trace_dir=Path("trace"), s3_latency_profile="aws")


def test_a_boolean_setting_has_a_flag_for_each_value():
    def auto_create(*flags: str, environ: dict[str, str] | None = None) -> bool:
        args = build_parser().parse_args(["broker", *flags])
        return config_from_args(args, environ or {}).auto_create_topics
    assert auto_create() is True  # Kafka's default
    assert auto_create("--no-auto-create-topics") is False
    assert auto_create("--auto-create-topics",
                       environ={"KIPPER_AUTO_CREATE_TOPICS": "false"}) is True


def test_controller_node_serves_no_partitions():
    args = build_parser().parse_args(["controller", "--node-id", "5", "--data-dir", "c"])
    assert config_from_args(args, {}) == BrokerConfig(node_id=5, data_dir=Path("c"),
                                                       broker_role=False)
    with pytest.raises(SystemExit):
        build_parser().parse_args(["controller", "--s3-endpoint", "http://127.0.0.1:9000"])


def test_an_unknown_file_setting_is_refused(tmp_path: Path):
    toml = tmp_path / "broker.toml"
    toml.write_text("no_such_setting = 1\n")
    args = build_parser().parse_args(["broker", "--config", str(toml)])
    with pytest.raises(ValueError, match="unknown broker setting 'no_such_setting'"):
        config_from_args(args, {})


def test_producer_expiration_settings_are_described_under_kafkas_names():
    configs = dynamic_configs(BrokerConfig(producer_id_expiration_ms=5_000), MetadataImage())
    assert configs.broker_value("producer.id.expiration.ms") == "5000"
    assert configs.broker_value("producer.id.expiration.check.interval.ms") == "600000"


def test_wal_hedge_delay_is_off_a_number_or_the_profiles_p95() -> None:
    assert BrokerConfig().wal_hedge_after_s() is None
    assert BrokerConfig(diskless_append_hedge_after_ms=120).wal_hedge_after_s() == 0.12
    assert BrokerConfig(diskless_append_hedge_after_ms=0, s3_latency_profile="s3-express"
                        ).wal_hedge_after_s() == pytest.approx(0.00816, abs=1e-5)
    with pytest.raises(ValueError, match="give the milliseconds"):
        BrokerConfig(diskless_append_hedge_after_ms=0).wal_hedge_after_s()

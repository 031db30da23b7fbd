"""Consumer groups and idempotent producers on diskless topics, with the unmodified
scenarios of tests/groups: members of each client come and go on a 6-partition diskless
topic (exactly once in total, committed offsets survive a kill -9 of every broker), and
idempotent producers whose Produce responses are dropped are deduplicated by the batch
coordinator."""

from __future__ import annotations

import pytest

from groups.harness import Member, kafkajs_member, python_member, run_group_scenario
from groups.proxy import ProduceDroppingProxy
from groups.test_consumer_groups import members  # noqa: F401  (fixture)
from groups.test_idempotent_producer import test_retried_batches_are_stored_once  # noqa: F401
from support import BrokerProcess, Cluster

CLIENTS = ["kafka-python", "aiokafka", "confluent-kafka", "kafkajs"]


class WholeCluster:
    """The cluster as the group scenario's "broker": its kill -9 takes every broker down."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.bootstrap = cluster.bootstrap

    def kill(self) -> None:
        for broker in self.cluster.brokers:
            broker.kill()

    def start(self) -> None:
        for broker in self.cluster.brokers:
            broker.start()


@pytest.mark.parametrize("client", CLIENTS)
def test_group_members_and_committed_offsets(client, diskless_cluster, topic_name, members,
                                             tmp_path, request):
    group = f"group-{topic_name}"
    if client == "kafkajs":
        request.getfixturevalue("kafkajs")
        spawn = kafkajs_member(diskless_cluster.bootstrap, topic_name, group, tmp_path)
    else:
        spawn = python_member(client, diskless_cluster.bootstrap, topic_name, group, tmp_path)

    def tracked(name: str) -> Member:
        members.append(spawn(name))
        return members[-1]

    run_group_scenario(WholeCluster(diskless_cluster), topic_name, tracked)


@pytest.fixture
def proxied_broker(broker_factory, s3_endpoint):
    """A one-broker diskless cluster reached only through a proxy that drops every third
    Produce response after the broker handled it."""
    proxy = ProduceDroppingProxy(drop_every=3)
    broker: BrokerProcess = broker_factory(
        "--advertised-listener", f"127.0.0.1:{proxy.port}", "--default-storage-mode", "diskless",
        "--s3-endpoint", s3_endpoint.url, "--s3-access-key", s3_endpoint.access_key,
        "--s3-secret-key", s3_endpoint.secret_key)
    proxy.start(broker.port)
    yield proxy, broker
    proxy.close()

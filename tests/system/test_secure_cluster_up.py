"""`kipper cluster up --security sasl-ssl|ssl`: a cluster whose every listener is secured
(brokers replicate to each other over it too), and the client.properties it writes, used
unchanged by confluent-kafka."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic, ResourceType

from bench.local_cluster import LocalCluster
from support.kcat import kcat


@pytest.mark.parametrize("security", ["sasl-ssl", "ssl"])
def test_secure_cluster_up_serves_its_client_properties(tmp_path, security):
    cluster = LocalCluster(tmp_path, brokers=2, extra_args=["--security", security]).start()
    try:
        config = cluster.client_config()
        assert config["security.protocol"] == security.upper().replace("-", "_")
        assert config["bootstrap.servers"] == cluster.bootstrap
        assert (cluster.client_properties.stat().st_mode & 0o777) == 0o600
        topic = f"secure-{uuid.uuid4().hex[:8]}"
        # RF=2: the follower fetches from the leader over the secured listener.
        admin = AdminClient(config)
        admin.create_topics([NewTopic(topic, 1, 2)])[topic].result(30)
        broker = ConfigResource(ResourceType.BROKER, "0")
        described = admin.describe_configs([broker])[broker].result(30)
        assert described["authorizer.class.name"].value.endswith("StandardAuthorizer")
        assert "User:admin" in described["super.users"].value
        assert described["listeners"].value.startswith(security.upper().replace("-", "_"))
        if security == "sasl-ssl":  # a secret: sensitive, its value never sent
            secret = described["kipper.inter.broker.sasl.password"]
            assert secret.is_sensitive and secret.value is None
        producer = Producer({**config, "acks": "all"})
        for i in range(10):
            producer.produce(topic, f"v-{i}".encode())
        assert producer.flush(30) == 0
        consumer = Consumer({**config, "group.id": "g", "auto.offset.reset": "earliest"})
        consumer.subscribe([topic])
        got = []
        for _ in range(60):
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                got.append(message.value().decode())
            if len(got) == 10:
                break
        consumer.close()
        assert got == [f"v-{i}" for i in range(10)]
        # kcat (Debian's librdkafka 2.0) reads the same file, as docs/security.md says.
        out = kcat("-F", str(cluster.client_properties), "-C", "-t", topic, "-o", "beginning",
                   "-e", "-q", "-c", "10")
        assert out.split() == got
    finally:
        cluster.stop()

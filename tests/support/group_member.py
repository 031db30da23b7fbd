"""One consumer-group member run by a real Python client, as its own process.

    python group_member.py {kafka-python|aiokafka|confluent-kafka} BOOTSTRAP TOPIC GROUP NAME

Subscribes with the client's defaults for a group (auto commit, which also commits on
rebalance and on close), and prints to stdout, one line each:

    assigned <partition>,<partition>,...    after every rebalance
    record <partition> <offset> <value>      for every record received
    closed                                  after SIGTERM, once the consumer has closed

The harness (groups.harness) reads these lines; tests/js/group_member.mjs is the kafkajs twin.
"""

from __future__ import annotations

import asyncio
import functools
import signal
import sys

# Short heartbeats make members notice rebalances quickly; 6 s is Kafka's minimum session.
HEARTBEAT_MS = 500
SESSION_MS = 6000
POLL_MS = 200


def say(line: str) -> None:
    print(line, flush=True)


def assigned(partitions) -> None:
    say("assigned " + ",".join(str(p) for p in sorted(partitions)))


def stop_on_sigterm() -> list[bool]:
    stopping = [False]
    signal.signal(signal.SIGTERM, lambda *_: stopping.__setitem__(0, True))
    return stopping


def run_kafka_python(bootstrap: str, topic: str, group: str, name: str) -> None:
    from kafka import ConsumerRebalanceListener, KafkaConsumer

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            pass

        def on_partitions_assigned(self, partitions):
            assigned(tp.partition for tp in partitions)

    stopping = stop_on_sigterm()
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id=name,
                             auto_offset_reset="earliest", enable_auto_commit=True,
                             heartbeat_interval_ms=HEARTBEAT_MS, session_timeout_ms=SESSION_MS)
    consumer.subscribe([topic], listener=Listener())
    while not stopping[0]:
        for messages in consumer.poll(timeout_ms=POLL_MS).values():
            for m in messages:
                say(f"record {m.partition} {m.offset} {m.value.decode()}")
    consumer.close()


def run_aiokafka(bootstrap: str, topic: str, group: str, name: str) -> None:
    from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener

    class Listener(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            pass

        def on_partitions_assigned(self, partitions):
            assigned(tp.partition for tp in partitions)

    async def consume() -> None:
        stopping = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopping.set)
        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id=name,
                                    auto_offset_reset="earliest", enable_auto_commit=True,
                                    heartbeat_interval_ms=HEARTBEAT_MS,
                                    session_timeout_ms=SESSION_MS)
        consumer.subscribe([topic], listener=Listener())
        await consumer.start()
        while not stopping.is_set():
            for messages in (await consumer.getmany(timeout_ms=POLL_MS)).values():
                for m in messages:
                    say(f"record {m.partition} {m.offset} {m.value.decode()}")
        await consumer.stop()

    asyncio.run(consume())


def run_confluent_kafka(bootstrap: str, topic: str, group: str, name: str,
                        rack: str | None = None, group_protocol: str = "classic") -> None:
    from confluent_kafka import Consumer

    stopping = stop_on_sigterm()
    # With the KIP-848 protocol the broker sets the heartbeat interval and session timeout.
    timeouts = ({"heartbeat.interval.ms": HEARTBEAT_MS, "session.timeout.ms": SESSION_MS}
                if group_protocol == "classic" else {})
    # A member in an AZ says so to the group (rack-aware assignment) and to the brokers.
    location = {} if rack is None else {"client.rack": rack, "client.id": f"{name},az={rack}"}
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": name,
                         "auto.offset.reset": "earliest", "enable.auto.commit": True,
                         "group.protocol": group_protocol, **timeouts, **location})
    consumer.subscribe([topic], on_assign=lambda _, partitions: assigned(
        tp.partition for tp in partitions))
    while not stopping[0]:
        m = consumer.poll(POLL_MS / 1000)
        if m is not None and m.error() is None:
            say(f"record {m.partition()} {m.offset()} {m.value().decode()}")
    consumer.close()


CLIENTS = {"kafka-python": run_kafka_python, "aiokafka": run_aiokafka,
           "confluent-kafka": run_confluent_kafka,
           # KIP-848: group.protocol=consumer, the broker assigns.
           "confluent-kafka-consumer-protocol": functools.partial(run_confluent_kafka,
                                                                  group_protocol="consumer")}

if __name__ == "__main__":
    client, *args = sys.argv[1:]
    CLIENTS[client](*args)
    say("closed")

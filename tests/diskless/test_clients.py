"""The five real clients' round trips of tests/clients (every codec, 10,000 records with
keys, headers and timestamps; offsets by timestamp), run on a 3-broker cluster whose topics
are diskless: produced through any broker, offsets from the batch coordinator, the stored
batches read back from the WAL objects."""

from clients.test_aiokafka import test_aiokafka_round_trip  # noqa: F401
from clients.test_confluent_kafka import test_confluent_kafka_round_trip  # noqa: F401
from clients.test_kafka_python import test_kafka_python_round_trip  # noqa: F401
from clients.test_kafkajs import test_kafkajs_round_trip  # noqa: F401
from clients.test_kcat import test_kcat_round_trip  # noqa: F401

"""bench.scale_bench's arithmetic: the event-loop lag P99 between two scrapes, which spread
ratios it judges, its command line, and its kafkajs producer against a broker."""

from __future__ import annotations

import pytest

from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from bench.scale_bench import (SECTIONS, Produced, kafkajs_produce, median_round, p99,
                               parse_args, spread_target)
from support.topics import create_topic


def test_p99_is_the_bucket_bound_reached_by_99_percent_of_the_new_samples():
    before = {0.001: 10, 0.01: 10, 0.05: 10, 0.1: 10, float("inf"): 10}
    after = {0.001: 60, 0.01: 108, 0.05: 109, 0.1: 110, float("inf"): 110}
    assert p99(before, after) == 0.05  # 99 of the 100 new samples are at most 50 ms
    assert p99(before, before) is None  # nothing observed in between


def test_a_spread_ratio_is_judged_only_where_the_clients_own_cpu_allows_the_target(
        monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    few = Produced(mb_per_s=100.0, client_cpu_s=2.0)
    # 1,000 MB for 8 client CPU seconds on 2 cores: at most 250 MB/s, a bound of 2.5x.
    judged = spread_target("sustained", 1000, few, Produced(40.0, 8.0))
    assert "2.50x" in judged.name and judged.value == 0.4 and judged.met is False
    assert spread_target("sustained", 1000, few, Produced(60.0, 8.0)).met is True
    # 20 MB for 1 CPU second: at most 40 MB/s whatever the brokers do, a bound of 0.4x.
    client_bound = spread_target("burst", 20, few, Produced(10.0, 1.0))
    assert client_bound.met is None and "client-bound" in client_bound.line()


def test_the_sustained_spread_is_judged_on_its_median_round():
    rounds = [(Produced(100.0, 1.0), Produced(58.0, 2.0)),
              (Produced(160.0, 1.0), Produced(53.0, 2.0)),
              (Produced(110.0, 1.0), Produced(50.0, 2.0))]
    assert median_round(rounds) == rounds[2]  # 0.58x, 0.33x, 0.45x
    assert median_round(rounds[:2]) == rounds[1]  # of two, the lower


def test_sections_and_sizes_come_from_the_command_line():
    args = parse_args(["--sections", "cluster,churn", "--partitions", "1000"])
    assert args.sections == ["cluster", "churn"] and args.partitions == 1000
    assert parse_args([]).sections == list(SECTIONS)
    with pytest.raises(SystemExit):
        parse_args(["--sections", "bogus"])


def test_the_kafkajs_producer_spreads_its_records_and_says_what_it_cost(
        shared_broker, kafkajs, topic_name):
    create_topic(shared_broker.bootstrap, topic_name, partitions=3)
    produced = kafkajs_produce(shared_broker.bootstrap, topic_name, 3, 0.1)
    records = int(0.1 * 1e6 / 1024)
    assert produced.client_cpu_s > 0 and produced.mb_per_s > 0
    admin = AdminClient({"bootstrap.servers": shared_broker.bootstrap})
    ends = admin.list_offsets({TopicPartition(topic_name, p): OffsetSpec.latest()
                               for p in range(3)})
    assert sorted(future.result(30).offset for future in ends.values()) == sorted(
        len(range(p, records, 3)) for p in range(3))  # record i to partition i % 3

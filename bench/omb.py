"""OpenMessaging Benchmark (OMB) workload files as input to `kipper bench synth`.

An OMB workload (``workloads/*.yaml`` of github.com/openmessaging/benchmark) says how many
topics and partitions to create, how many producers write to each topic, at what total
message rate, with what fixed message size, for how long. It maps onto the synthetic trace's
parameters: one producer per (topic, producer of that topic), a constant rate (no diurnal
sine, no bursts), uniform partition choice (every OMB key distributor spreads messages
evenly), the fixed message size, no compression and acks=all (the OMB Kafka driver's
defaults). What the trace cannot express (consumers, backlog, warm-up) is listed in
``OmbWorkload.unmapped`` so the CLI can say so; bench/README.md has the table.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import yaml

from bench.synth import SynthParams

KEY_DISTRIBUTORS = ("NO_KEY", "KEY_ROUND_ROBIN", "RANDOM_NANO")
REQUIRED = ("topics", "partitionsPerTopic", "messageSize", "producersPerTopic", "producerRate",
            "testDurationMinutes")
# Fields of OMB's Workload class the trace has no column or parameter for.
UNMAPPED = ("payloadFile", "subscriptionsPerTopic", "consumerPerSubscription",
            "consumerBacklogSizeGB", "backlogDrainRatio", "warmupDurationMinutes",
            "useRandomizedPayloads", "randomBytesRatio", "randomizedPayloadPoolSize")
KNOWN = ("name", "keyDistributor", *REQUIRED, *UNMAPPED)
# The OMB Kafka driver's producers batch for linger.ms=1 (driver-kafka/*.yaml): the records a
# producer sends to one partition within that window travel in one request.
LINGER_S = 0.001


class OmbWorkloadError(ValueError):
    """A file that is not a usable OMB workload; the message is one line naming the file."""


@dataclass(frozen=True)
class OmbWorkload:
    name: str
    topics: int
    partitions_per_topic: int
    message_size: int
    producers_per_topic: int
    # Messages per second over the whole workload (OMB divides it among the producers).
    producer_rate: float
    test_duration_minutes: float
    key_distributor: str = "NO_KEY"
    subscriptions_per_topic: int = 1
    consumers_per_subscription: int = 1
    consumer_backlog_size_gb: float = 0.0
    # Fields set in the file that the trace does not reproduce, with their values.
    unmapped: tuple[tuple[str, object], ...] = ()

    @property
    def producers(self) -> int:
        return self.topics * self.producers_per_topic

    @property
    def mb_per_s(self) -> float:
        return self.producer_rate * self.message_size / 1e6

    def synth_params(self, duration_s: float | None = None, azs: tuple[str, ...] = ("az1", "az2", "az3"),
                     seed: int = 1) -> SynthParams:
        """Synthetic-trace parameters that replay this workload (``duration_s`` overrides the
        workload's duration, e.g. to replay a minute of a 15-minute test)."""
        messages_per_producer_s = self.producer_rate / self.producers
        # One producer spreads its messages over its topic's partitions; what reaches one
        # partition in one linger window is one request.
        records = max(1.0, messages_per_producer_s * LINGER_S / self.partitions_per_topic)
        return SynthParams(
            producers=self.producers, topics=self.topics, partitions=self.partitions_per_topic,
            duration_s=duration_s if duration_s is not None else self.test_duration_minutes * 60,
            rate=messages_per_producer_s / records, zipf_s=0.0, mean_records=records,
            diurnal_amplitude=0.0, burst_probability=0.0, azs=azs, topic_prefix="omb",
            seed=seed, value_bytes=self.message_size, codec="none", acks=-1)


def parse_workload(text: str, source: str = "<workload>") -> OmbWorkload:
    """An OmbWorkload from a workload file's YAML text (raises OmbWorkloadError)."""
    def fail(reason: str) -> OmbWorkloadError:
        return OmbWorkloadError(f"{source}: not an OMB workload: {reason}")

    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise fail(f"invalid YAML{where}") from None
    if not isinstance(raw, dict):
        raise fail("expected a mapping of workload fields")
    unknown = sorted(str(k) for k in raw if k not in KNOWN)
    if unknown:
        raise fail(f"unknown field(s) {', '.join(unknown)}")
    missing = [k for k in REQUIRED if k not in raw]
    if missing:
        raise fail(f"missing field(s) {', '.join(missing)}")

    def number(key: str, minimum: float, integer: bool = True, default: float | None = None):
        value = raw.get(key, default)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                integer and not float(value).is_integer()) or not math.isfinite(value):
            raise fail(f"{key} must be {'an integer' if integer else 'a number'}, got {value!r}")
        if value < minimum:
            raise fail(f"{key} must be at least {minimum}, got {value!r}")
        return int(value) if integer else float(value)

    producer_rate = number("producerRate", 0, integer=False)
    if producer_rate == 0:
        raise fail("producerRate 0 (OMB's 'as fast as possible') has no rate to replay; "
                   "set the rate the run reached")
    key_distributor = raw.get("keyDistributor", "NO_KEY")
    if key_distributor not in KEY_DISTRIBUTORS:
        raise fail(f"keyDistributor {key_distributor!r} is not one of {', '.join(KEY_DISTRIBUTORS)}")
    return OmbWorkload(
        name=str(raw.get("name", Path(source).stem)),
        topics=number("topics", 1),
        partitions_per_topic=number("partitionsPerTopic", 1),
        # The replay stamps each value with its 8-byte send time; smaller messages cannot be sent.
        message_size=number("messageSize", 8),
        producers_per_topic=number("producersPerTopic", 1),
        producer_rate=producer_rate,
        test_duration_minutes=number("testDurationMinutes", 0, integer=False),
        key_distributor=key_distributor,
        subscriptions_per_topic=number("subscriptionsPerTopic", 0, default=1),
        consumers_per_subscription=number("consumerPerSubscription", 0, default=1),
        consumer_backlog_size_gb=number("consumerBacklogSizeGB", 0, integer=False, default=0),
        unmapped=tuple((k, raw[k]) for k in UNMAPPED if k in raw))


def read_workload(path: Path) -> OmbWorkload:
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as e:
        raise OmbWorkloadError(f"{path}: cannot read: {e.strerror}") from None
    return parse_workload(text, str(path))

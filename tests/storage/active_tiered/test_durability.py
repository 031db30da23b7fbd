"""Christo's failure scenarios from the KIP-1176 thread (digest section 4, items 1 and 2).

1. acks=all, the leader is killed after its local append and before the upload: in the
   default mode nothing was acknowledged yet (acks wait for followers to download and
   append), so no acknowledged record is lost.
2. With ``active.tiered.ack.on.upload=true`` acks come once the object is in the leader's
   single-AZ bucket. That bucket goes into an outage before any follower downloads, and the
   leader dies: acknowledged records are unavailable (they sit in the unreachable bucket).
   The default mode survives the same sequence: followers that cannot download fall back
   to the leader's records before anything is acknowledged.
"""

from __future__ import annotations

import asyncio
import os

import pytest

from support.dataset import segment_batches
from storage.objectstore import ObjectStore, fast_bucket
from support.clients import ConfluentWriter, consume_all
from support.wait import wait_until

from support.tiered import create_tiered_topic

pytestmark = pytest.mark.system
BATCH = 200
# Holds every S3 request of a client until the read timeout: nothing gets through.
BUCKET_OUTAGE = {"fault": "outage", "for_s": 600, "mode": "hang"}
# ... and the leader keeps waiting for them rather than abandon them after its upload
# timeout and let the followers fetch the records (what a hung store gets by default).
PATIENT_UPLOADS = {"KIPPER_ACTIVE_TIERED_UPLOAD_TIMEOUT_MS": "600000",
                   "KIPPER_S3_REQUEST_TIMEOUT_MS": "600000"}


def values(n: int) -> list[bytes]:
    return [os.urandom(512) for _ in range(n)]


def test_scenario_1_leader_killed_before_upload_loses_no_acked_record(make_cluster, topic_name):
    cluster = make_cluster(**PATIENT_UPLOADS)
    create_tiered_topic(cluster, topic_name)
    leader = cluster.leader_of(topic_name)
    writer = ConfluentWriter(cluster.bootstrap, linger_ms=5)
    writer.send(topic_name, *values(BATCH))
    writer.flush()
    assert len(writer.acked) == BATCH

    # From now on the leader's uploads never complete: what it appends stays local.
    cluster.fault(leader, BUCKET_OUTAGE)
    writer.send(topic_name, *values(BATCH))
    wait_until(lambda: sum(count for _, count, _ in segment_batches(
        cluster.brokers[leader].data_dir, topic_name)) == 2 * BATCH, timeout=30)
    writer.producer.poll(0.5)
    assert len(writer.acked) == BATCH, "acked before any follower could hold the records"
    cluster.brokers[leader].kill()

    writer.flush()  # the producer retries on the new leader
    new_leader = cluster.leader_of(topic_name)
    got = consume_all(cluster.bootstrap, topic_name, len(writer.acked))
    print(f"\nleader {leader} killed with {BATCH} records appended but not uploaded; "
          f"new leader {new_leader}; acked {len(writer.acked)}, failed {writer.failed}, "
          f"read back {len(got)}")
    assert set(writer.acked) <= set(got)
    assert len(got) == len(set(got))


@pytest.mark.parametrize("ack_on_upload", [True, False], ids=["ack-on-upload", "default"])
def test_scenario_2_bucket_outage_and_leader_loss(make_cluster, topic_name, s3_endpoint,
                                                  ack_on_upload):
    # With ack.on.upload the followers keep waiting for the bucket rather than fall back to
    # the leader's records within the default 2 s, so the leader dies before they have them
    # however slow this machine is.
    cluster = make_cluster(**({"KIPPER_ACTIVE_TIERED_DOWNLOAD_TIMEOUT_MS": "60000"}
                              if ack_on_upload else {}))
    create_tiered_topic(cluster, topic_name,
                        **{"active.tiered.ack.on.upload": str(ack_on_upload).lower()})
    leader = cluster.leader_of(topic_name)
    # The leader's bucket is out for everyone who would read it: its followers.
    for broker in cluster.brokers:
        if broker.node_id != leader:
            cluster.fault(broker.node_id, BUCKET_OUTAGE)

    writer = ConfluentWriter(cluster.bootstrap, linger_ms=5)
    sent = values(BATCH)
    writer.send(topic_name, *sent)
    writer.flush()
    assert len(writer.acked) == BATCH
    cluster.brokers[leader].kill()

    new_leader = cluster.leader_of(topic_name)
    got = consume_all(cluster.bootstrap, topic_name, BATCH, timeout=15)
    unavailable = [v for v in writer.acked if v not in set(got)]
    print(f"\nack.on.upload={ack_on_upload}: {len(writer.acked)} acked, leader {leader} killed, "
          f"new leader {new_leader} serves {len(got)}; {len(unavailable)} acked records "
          "unavailable")
    if not ack_on_upload:
        assert not unavailable
        return
    assert len(unavailable) == BATCH
    # They are not gone: the WAL object in the old leader's bucket holds them.
    prefix = cluster.brokers[0].env["KIPPER_S3_KEY_PREFIX"]
    bucket = fast_bucket(f"az{leader + 1}")

    async def objects() -> list[bytes]:
        async with ObjectStore(s3_endpoint.config()) as store:
            return [await store.get(bucket, info.key)
                    async for info in store.list_objects(bucket, prefix + "wal/")]
    stored = b"".join(asyncio.run(objects()))
    assert all(v in stored for v in unavailable)

"""LogGroupStore over a real __consumer_offsets log on disk: a load streams the partition
in chunks of at most one read (never the whole log at once), in offset order."""

import asyncio
from types import SimpleNamespace

from fastlog._codec import build_batch, validate_record_set
from fastlog.server.group.offsets import GROUP_METADATA_TOPIC, LogGroupStore
from tests.server.log.conftest import open_log


def _store_over(log):
    # The store reaches the log through the broker's replica manager; that lookup is all
    # it needs of a broker.
    broker = SimpleNamespace(replica_manager=SimpleNamespace(
        get_log=lambda topic, partition: log if topic == GROUP_METADATA_TOPIC else None))
    return LogGroupStore(broker)


async def _chunks(store, partition=0):
    return [chunk async for chunk in store.load(partition)]


def test_load_streams_the_partition_in_chunks_in_offset_order(tmp_path):
    log = open_log(tmp_path / f"{GROUP_METADATA_TOPIC}-0")
    expected = []
    for b in range(60):   # 60 batches of 50 records of ~1 KB: ~3 MB
        records = [(1000, b"key-%d-%d" % (b, i), b"v" * 1000) for i in range(50)]
        buf = bytearray(build_batch(records))
        log.append(buf, validate_record_set(buf), leader_epoch=0)
        expected += [(k, v) for _, k, v in records]
    store = _store_over(log)
    store.LOAD_CHUNK = 256 * 1024
    chunks = asyncio.run(_chunks(store))
    assert len(chunks) >= 3_000_000 // store.LOAD_CHUNK
    assert max(sum(len(k) + len(v) for k, v in c) for c in chunks) <= store.LOAD_CHUNK
    assert [kv for c in chunks for kv in c] == expected
    log.close()


def test_load_of_a_missing_partition_is_empty(tmp_path):
    assert asyncio.run(_chunks(_store_over(None))) == []

"""Log compaction (cleaner.py): latest value per key, offsets kept with gaps, tombstones
after delete.retention.ms, min.compaction.lag.ms, codecs kept, the dedupe bound (several
passes), reads racing a clean, crashes at each step of the swap, and a real broker read
by a real client."""

import os
import time

import pytest

from fastlog._codec import (
    BatchBuilder,
    build_control_batch,
    iter_records,
    scan_batches,
    validate_record_set,
)
from fastlog.server.log import InlineScheduler, Log, LogConfig, LogManager
from fastlog.server.log.checkpoint import OffsetCheckpointFile
from fastlog.server.log.cleaner import (
    CLEANER_OFFSET_CHECKPOINT,
    DIGEST_BYTES,
    MAP_ENTRY_BYTES,
    LogCleaner,
)
from fastlog.server.log.segment import CLEANED_SUFFIX, DELETED_SUFFIX, SWAP_SUFFIX
from fastlog.server.log.txn_index import AbortedTxn
from tests.server.log.conftest import read_all

HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS


def _config(**kw):
    kw.setdefault("segment_bytes", 500)
    kw.setdefault("cleanup_policy", ("compact",))
    kw.setdefault("file_delete_delay_ms", 0)
    return LogConfig(**kw)


def _manager(tmp_path, clock, config, dedupe=1 << 20):
    return LogManager([str(tmp_path / "data")], config, time_fn=clock,
                      scheduler=InlineScheduler(), cleaner_worker=InlineScheduler(),
                      dedupe_buffer_size=dedupe)


def put(log, pairs, ts, compression=0, producer=(-1, -1, -1)):
    """Append one batch of (key, value) records at timestamp ts."""
    b = BatchBuilder(compression, 0, producer[0], producer[1], producer[2])
    for k, v in pairs:
        b.append(ts, k, v)
    buf = bytearray(b.build())
    return log.append(buf, validate_record_set(buf), leader_epoch=0)


def records(log):
    """Every (offset, key, value) readable from the log start, via Log.read."""
    out = []
    for _, data in read_all(log):
        out += [(r.offset, r.key, r.value) for r in iter_records(data, 0)]
    return out


def latest(log):
    """key -> value of the last record per key (what compaction must keep)."""
    return {k: v for _, k, v in records(log)}


def fill(log, clock, rounds, keys, start_ts=None):
    """rounds x keys single-record batches, value = b'<key>@<round>'."""
    ts = int(clock() * 1000) if start_ts is None else start_ts
    for r in range(rounds):
        for k in range(keys):
            key = b"k%d" % k
            put(log, [(key, key + b"@%d" % r)], ts)


def clean_all(lm, max_passes=50):
    for _ in range(max_passes):
        if lm.clean_logs() is None:
            return
    raise AssertionError("cleaner never settled")


def test_latest_value_per_key_survives_offsets_kept_with_gaps(tmp_path, clock):
    lm = _manager(tmp_path, clock, _config())
    log = lm.get_or_create_log("c", 0)
    fill(log, clock, rounds=6, keys=5)
    before = records(log)
    want = latest(log)
    active = log.active_segment
    active_bytes = open(active.log_path, "rb").read()
    clean_all(lm)
    assert lm.cleaner.passes >= 1
    after = records(log)
    assert latest(log) == want
    # Offsets are the original ones, increasing, with gaps where older values went.
    original = {o: (k, v) for o, k, v in before}
    assert all(original[o] == (k, v) for o, k, v in after)
    offsets = [o for o, _, _ in after]
    assert offsets == sorted(offsets) and len(offsets) < len(before)
    assert offsets[-1] == before[-1][0]
    assert set(range(offsets[-1] + 1)) - set(offsets)  # gaps where older values were
    # Below the active segment each key appears once.
    inactive_keys = [k for o, k, _ in after if o < active.base_offset]
    assert len(inactive_keys) == len(set(inactive_keys))
    # The active segment is untouched.
    assert log.active_segment is active
    assert open(active.log_path, "rb").read() == active_bytes
    # The checkpoint is Kafka's offset checkpoint format, at the first uncleaned offset.
    ck = OffsetCheckpointFile(str(tmp_path / "data" / CLEANER_OFFSET_CHECKPOINT)).read()
    assert ck[("c", 0)] == active.base_offset
    lm.shutdown()


def test_fetch_at_a_compacted_offset_returns_the_next_batch(tmp_path, clock):
    lm = _manager(tmp_path, clock, _config())
    log = lm.get_or_create_log("c", 0)
    fill(log, clock, rounds=6, keys=5)
    clean_all(lm)
    kept = [o for o, _, _ in records(log)]
    gone = next(o for o in range(kept[-1]) if o not in kept)
    offset, got = gone, []
    while not got:  # as a consumer does: on from the next batch's offset
        info = log.read(offset, 1 << 20)
        data = b"".join(r.read() for r in info.regions)
        heads = scan_batches(data).batches
        assert heads[0].last_offset >= offset  # the batch after the gap (maybe empty)
        got = [r.offset for h in heads for r in iter_records(data, h.position)]
        offset = heads[-1].next_offset
    assert got[0] == min(o for o in kept if o > gone)
    lm.shutdown()


def test_tombstones_removed_only_after_delete_retention(tmp_path, clock):
    lm = _manager(tmp_path, clock, _config(delete_retention_ms=DAY_MS,
                                           min_cleanable_dirty_ratio=0.01))
    log = lm.get_or_create_log("c", 0)
    now = int(clock() * 1000)
    fill(log, clock, rounds=3, keys=4, start_ts=now)
    put(log, [(b"k1", None)], now)  # tombstone for k1
    fill(log, clock, rounds=1, keys=4, start_ts=now)
    put(log, [(b"k2", None)], now)
    fill(log, clock, rounds=3, keys=1, start_ts=now)  # k0 again: rolls past the tombstones
    clean_all(lm)
    vals = latest(log)
    assert vals[b"k2"] is None  # the tombstone is still there for consumers to see
    assert [k for _, k, v in records(log) if k == b"k2"] == [b"k2"]
    clock.advance_ms(DAY_MS + 1000)
    fill(log, clock, rounds=6, keys=1)  # new dirty data so that a pass runs
    clean_all(lm)
    vals = latest(log)
    assert b"k2" not in vals  # the expired tombstone went, and every older k2 with it
    assert vals[b"k1"] == b"k1@0"  # written again after its tombstone
    assert vals[b"k3"] == b"k3@0"
    lm.shutdown()


def test_min_compaction_lag_respected(tmp_path, clock):
    lm = _manager(tmp_path, clock, _config(min_compaction_lag_ms=HOUR_MS))
    log = lm.get_or_create_log("c", 0)
    fill(log, clock, rounds=6, keys=5)
    n = len(records(log))
    clean_all(lm)
    assert len(records(log)) == n and lm.cleaner.passes == 0
    clock.advance_ms(HOUR_MS + 1000)
    clean_all(lm)
    assert lm.cleaner.passes >= 1 and len(records(log)) < n
    lm.shutdown()


@pytest.mark.parametrize("codec", [1, 2, 3, 4])
def test_compressed_batch_rebuilt_with_same_codec(tmp_path, clock, codec):
    lm = _manager(tmp_path, clock, _config())
    log = lm.get_or_create_log("c", 0)
    ts = int(clock() * 1000)
    pairs = [(b"a", b"a0"), (b"b", b"b0"), (b"a", b"a1"), (b"c", b"c0"), (b"b", b"b1")]
    put(log, pairs, ts, compression=codec, producer=(7, 0, 0))
    put(log, [(b"x" * 400, b"roll")], ts)
    put(log, [(b"y", b"roll")], ts)
    clean_all(lm)
    seg = log.segments[0]
    data = open(seg.log_path, "rb").read()
    h = scan_batches(data, verify_crc=True).batches[0]
    assert h.compression == codec
    assert (h.base_offset, h.last_offset_delta, h.record_count) == (0, 4, 3)
    assert (h.producer_id, h.base_sequence) == (7, 0)
    assert [(r.offset, r.key, r.value) for r in iter_records(data, 0)] == [
        (2, b"a", b"a1"), (3, b"c", b"c0"), (4, b"b", b"b1")]
    lm.shutdown()


def test_producer_last_batch_kept_as_empty_batch(tmp_path, clock):
    lm = _manager(tmp_path, clock, _config())
    log = lm.get_or_create_log("c", 0)
    ts = int(clock() * 1000)
    put(log, [(b"a", b"1"), (b"a", b"2")], ts, producer=(9, 0, 0))
    put(log, [(b"a", b"3"), (b"a", b"4")], ts, producer=(9, 0, 2))
    for i in range(8):
        put(log, [(b"a", b"new%d" % i)], ts)  # supersedes every record of producer 9
    clean_all(lm)
    heads = [h for seg in log.segments[:-1]
             for h in scan_batches(open(seg.log_path, "rb").read()).batches]
    p9 = [h for h in heads if h.producer_id == 9]
    assert [(h.base_offset, h.last_offset_delta, h.record_count, h.base_sequence)
            for h in p9] == [(2, 1, 0, 2)]
    assert latest(log)[b"a"] == b"new7"
    lm.shutdown()


def test_dedupe_buffer_bound_cleans_in_several_passes(tmp_path, clock):
    slots = 8
    lm = _manager(tmp_path, clock, _config(segment_bytes=700, min_cleanable_dirty_ratio=0.01),
                  dedupe=slots * MAP_ENTRY_BYTES)
    log = lm.get_or_create_log("c", 0)
    fill(log, clock, rounds=3, keys=20)
    want = latest(log)
    checkpoints = []
    for _ in range(40):
        if lm.clean_logs() is None:
            break
        checkpoints.append(lm.cleaner.checkpoints[lm.log_dirs[0]][("c", 0)])
    assert len(checkpoints) >= 3  # 20 distinct dirty keys never fit 8 slots at once
    assert checkpoints == sorted(checkpoints)
    assert latest(log) == want
    inactive = [k for o, k, _ in records(log) if o < log.active_segment.base_offset]
    assert len(inactive) == len(set(inactive))
    lm.shutdown()


def test_read_racing_a_clean_sees_consistent_data(tmp_path, clock):
    lm = _manager(tmp_path, clock, _config(file_delete_delay_ms=60_000))
    log = lm.get_or_create_log("c", 0)
    log.scheduler = _Deferred()  # deletions wait, as file.delete.delay.ms makes them
    fill(log, clock, rounds=6, keys=5)
    snapshot = log.segments
    in_flight = log.read(0, 1 << 20)  # a fetch whose response is not written yet
    before = in_flight.regions[0].read()
    clean_all(lm)
    assert log.segments != snapshot
    # The in-flight regions still read the original bytes, CRCs intact.
    assert in_flight.regions[0].read() == before
    assert scan_batches(before, verify_crc=True).error is None
    # A read from the old snapshot's segments still works too.
    r = snapshot[0].read(0, 1 << 20)
    assert os.pread(r.file.fileno(), r.length, r.position) == before[:r.length]
    log.scheduler.run()
    lm.shutdown()


class _Deferred(InlineScheduler):
    def __init__(self):
        self.jobs = []

    def schedule(self, delay_s, fn, *args):
        self.jobs.append((fn, args))
        return super().submit(lambda: None)

    def run(self):
        for fn, args in self.jobs:
            fn(*args)


def _cleaned_but_not_swapped(tmp_path, clock):
    """A log and a finished cleaning pass whose .cleaned segments were not swapped in."""
    cfg = _config()
    d = tmp_path / "data" / "c-0"
    log = Log.open(str(d), cfg, time_fn=clock)
    fill(log, clock, rounds=6, keys=5)
    fill(log, clock, rounds=1, keys=2)
    want = latest(log)
    cleaner = LogCleaner(lambda: [(("c", 0), str(tmp_path / "data"), log)],
                         [str(tmp_path / "data")], worker=InlineScheduler(), time_fn=clock)
    task = cleaner.grab_filthiest_log()
    res = cleaner.clean(task)
    assert res.outputs
    return d, log, task, res, want


def _names(d, suffix):
    return sorted(n for n in os.listdir(d) if n.endswith(suffix))


def _reopen_and_check(d, clock, want, compacted):
    log = Log.open(str(d), _config(), time_fn=clock, clean_shutdown=False)
    assert not any(n.endswith((CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX))
                   for n in os.listdir(d))
    assert latest(log) == want
    offs = [o for o, _, _ in records(log)]
    assert offs == sorted(set(offs))
    for seg in log.segments:
        assert scan_batches(open(seg.log_path, "rb").read(), verify_crc=True).error is None
    dup = [k for o, k, _ in records(log) if o < log.active_segment.base_offset]
    assert (len(dup) == len(set(dup))) == compacted
    log.close()


def _rename(seg, old, new):
    for path in (seg.log_path, seg.offset_index.path, seg.time_index.path):
        base = path[: -len(old)] if old else path
        if os.path.exists(path):
            os.rename(path, base + new)


@pytest.mark.parametrize("step", ["cleaned", "some_swap", "all_swap", "old_deleted",
                                  "some_final"])
def test_crash_during_swap_recovers(tmp_path, clock, step):
    d, log, task, res, want = _cleaned_but_not_swapped(tmp_path, clock)
    outs = res.outputs
    for seg in outs:
        seg.close()
    log.close()
    # Replay the swap's file moves up to the crash point (Log.replace_segments' order).
    if step == "some_swap":
        _rename(outs[0], CLEANED_SUFFIX, SWAP_SUFFIX)
    if step in ("all_swap", "old_deleted", "some_final"):
        for seg in outs:
            _rename(seg, CLEANED_SUFFIX, SWAP_SUFFIX)
    if step in ("old_deleted", "some_final"):
        for seg in task.segments[: len(task.segments) // 2 + 1]:
            _rename(seg, "", DELETED_SUFFIX)
    if step == "some_final":
        for seg in task.segments:
            _rename(seg, "", DELETED_SUFFIX)
        swapped = [n.replace(CLEANED_SUFFIX, SWAP_SUFFIX) for n in
                   (outs[0].log_path, outs[0].offset_index.path, outs[0].time_index.path)]
        for p in swapped[:2]:  # the .log and .index of the first, not its .timeindex
            os.rename(p, p[: -len(SWAP_SUFFIX)])
    assert _names(d, ".log")  # the partition still has data files
    _reopen_and_check(d, clock, want, compacted=step not in ("cleaned", "some_swap"))


def test_swap_then_reopen(tmp_path, clock):
    d, log, task, res, want = _cleaned_but_not_swapped(tmp_path, clock)
    assert log.replace_segments(res.outputs, task.segments)
    assert latest(log) == want
    log.close()
    _reopen_and_check(d, clock, want, compacted=True)


def test_cleaning_is_voided_by_a_truncation(tmp_path, clock):
    d, log, task, res, want = _cleaned_but_not_swapped(tmp_path, clock)
    log.truncate_to(log.segments[1].base_offset + 1)
    cleaner = LogCleaner(lambda: [(("c", 0), str(tmp_path / "data"), log)],
                         [str(tmp_path / "data")], worker=InlineScheduler(), time_fn=clock)
    cleaner._job = (_done(res), task)
    cleaner._finish()
    assert cleaner.passes == 0
    assert not _names(d, CLEANED_SUFFIX)
    log.close()


def _done(result):
    from concurrent.futures import Future
    f = Future()
    f.set_result(result)
    return f


def test_delete_policy_only_logs_are_not_cleaned(tmp_path, clock):
    lm = _manager(tmp_path, clock, _config(cleanup_policy=("delete",)))
    log = lm.get_or_create_log("c", 0)
    fill(log, clock, rounds=6, keys=5)
    n = len(records(log))
    clean_all(lm)
    assert lm.cleaner.passes == 0 and len(records(log)) == n
    lm.shutdown()


def test_compacted_topic_on_a_real_broker(tmp_path):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    from fastlog.testing import BrokerProcess

    with BrokerProcess(tmp_path / "data", overrides={
            "log.cleaner.backoff.ms": "200", "num.partitions": "1"}) as b:
        admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=10000)
        admin.create_topics([NewTopic("compacted", 1, 1, topic_configs={
            "cleanup.policy": "compact", "segment.bytes": "1024",
            "min.cleanable.dirty.ratio": "0.01"})])
        admin.close()
        prod = KafkaProducer(bootstrap_servers=b.bootstrap, linger_ms=0)
        want = {}
        for r in range(20):
            for k in range(5):
                key, val = b"key%d" % k, b"value-%d-%d" % (k, r)
                prod.send("compacted", key=key, value=val).get(timeout=10)
                want[key] = val
        prod.close()
        total = 100
        tp = TopicPartition("compacted", 0)
        deadline = time.monotonic() + 20
        while True:
            cons = KafkaConsumer(bootstrap_servers=b.bootstrap, enable_auto_commit=False,
                                 consumer_timeout_ms=2000)
            cons.assign([tp])
            cons.seek_to_beginning(tp)
            got = [(m.offset, m.key, m.value) for m in cons]
            cons.close()
            seen = {}
            for _, k, v in got:
                seen[k] = v
            if len(got) < total // 2 or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert seen == want  # every key's latest value, read from the beginning
        assert len(got) < total // 2  # the older values were compacted away
        assert [o for o, _, _ in got] == sorted(o for o, _, _ in got)


def test_offset_map_memory_stays_within_the_dedupe_buffer():
    import tracemalloc

    from fastlog.server.log.cleaner import OffsetMap
    budget = 20_000 * MAP_ENTRY_BYTES
    m = OffsetMap(budget)
    # more distinct keys than fit, made while traced (the map keeps the short ones as they
    # are) as record_keys makes them: long keys (stored as digests) and the longest short
    # ones (kept as they are)
    def key(i):
        return (b"key-%d" % i).ljust(DIGEST_BYTES + 20 if i % 2 else DIGEST_BYTES - 1, b"-")

    tracemalloc.start()
    try:
        full = m.put_keys((((1 << 40) + i, key(i), False) for i in range(25_000)), 0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(m) == 20_000 and full == (1 << 40) + 20_000   # the map refuses the rest
    assert peak <= budget
    assert m.latest(key(0)) == 1 << 40 and m.latest(key(1)) == (1 << 40) + 1
    assert m.latest(key(20_001)) == -1


def test_follower_replicates_a_compacted_log(tmp_path, clock):
    """A follower fetching a cleaned leader log appends its batches (gaps, rebuilt and
    empty batches) with the leader's offsets, as the replica fetcher does."""
    lm = _manager(tmp_path, clock, _config())
    log = lm.get_or_create_log("c", 0)
    fill(log, clock, rounds=6, keys=5)
    ts = int(clock() * 1000)
    put(log, [(b"k0", b"x"), (b"k9", b"y"), (b"k0", b"z")], ts, compression=2)
    fill(log, clock, rounds=3, keys=3)
    clean_all(lm)
    follower = Log.open(str(tmp_path / "f" / "c-0"), _config(), time_fn=clock)
    for _, data in read_all(log):
        buf = bytearray(data)
        follower.append(buf, scan_batches(buf, verify_crc=True).batches, 0,
                        assign_offsets=False)
    assert follower.log_end_offset == log.log_end_offset
    assert records(follower) == records(log)
    follower.close()
    lm.shutdown()


def test_clean_on_the_cleaner_thread_while_the_loop_reads_and_appends(tmp_path, clock):
    """Real threads: the pass runs on the cleaner's IoWorker, the swap on the asyncio loop
    (via call_soon_threadsafe); reads and appends on the loop never see a broken log."""
    import asyncio

    lm = LogManager([str(tmp_path / "data")], _config(segment_bytes=4000), time_fn=clock)
    log = lm.get_or_create_log("c", 0)
    fill(log, clock, rounds=30, keys=20)
    want = latest(log)

    async def main():
        assert lm.clean_logs() is not None
        deadline = time.monotonic() + 20
        reads = 0
        while (lm.cleaner.busy or reads == 0) and time.monotonic() < deadline:
            assert latest(log) == want
            key = b"k%d" % (reads % 25)
            put(log, [(key, b"during-%d" % reads)], int(clock() * 1000))
            want[key] = b"during-%d" % reads
            reads += 1
            await asyncio.sleep(0.001)
        assert not lm.cleaner.busy
        return reads

    asyncio.run(main())
    assert lm.cleaner.passes >= 1
    assert latest(log) == want
    inactive = [k for o, k, _ in records(log) if o < log.active_segment.base_offset]
    assert len(inactive) == len(set(inactive))
    lm.shutdown()


def test_truncation_below_the_checkpoint_makes_the_log_dirty_again(tmp_path, clock):
    lm = _manager(tmp_path, clock, _config())
    log = lm.get_or_create_log("c", 0)
    fill(log, clock, rounds=6, keys=5)
    clean_all(lm)
    ck = lm.cleaner.checkpoints[lm.log_dirs[0]][("c", 0)]
    log.truncate_to(ck - 3)  # a follower's truncation below the cleaned point
    assert lm.cleaner.first_dirty_offset(("c", 0), lm.log_dirs[0], log) == log.log_start_offset
    lm.shutdown()


def test_compact_delete_policy_also_applies_retention(tmp_path, clock):
    cfg = _config(cleanup_policy=("compact", "delete"), retention_ms=HOUR_MS)
    lm = _manager(tmp_path, clock, cfg)
    log = lm.get_or_create_log("c", 0)
    fill(log, clock, rounds=6, keys=5)
    want = latest(log)
    clean_all(lm)
    assert lm.cleaner.passes >= 1 and latest(log) == want
    clock.advance_ms(2 * HOUR_MS)
    assert lm.cleanup_logs() >= 1  # retention removes old segments, latest values or not
    assert log.segments[0] is log.active_segment
    lm.shutdown()


def test_idempotent_producer_continues_after_its_batches_were_compacted_and_a_crash(
        tmp_path):
    """confluent-kafka's idempotent producer writes keys that another producer then
    overwrites; the cleaner empties its batches but keeps its last one (sequence kept).
    After a SIGKILL the broker rebuilds producer state from the cleaned log, and the same
    producer goes on without a sequence error."""
    from confluent_kafka import Producer
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import KafkaAdminClient, NewTopic

    from fastlog.testing import BrokerProcess

    def consume_all(bootstrap):
        tp = TopicPartition("idem", 0)
        cons = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                             consumer_timeout_ms=2000)
        cons.assign([tp])
        cons.seek_to_beginning(tp)
        got = [(m.offset, m.key, m.value) for m in cons]
        cons.close()
        return got

    with BrokerProcess(tmp_path / "data", overrides={
            "log.cleaner.backoff.ms": "200", "num.partitions": "1"}) as b:
        admin = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=10000)
        admin.create_topics([NewTopic("idem", 1, 1, topic_configs={
            "cleanup.policy": "compact", "segment.bytes": "1024",
            "min.cleanable.dirty.ratio": "0.01"})])
        admin.close()
        errors = []

        def report(err, _msg):
            if err is not None:
                errors.append(err)

        idem = Producer({"bootstrap.servers": b.bootstrap, "enable.idempotence": True,
                         "linger.ms": 0, "message.timeout.ms": 20000})
        for i in range(10):
            idem.produce("idem", key=b"k%d" % (i % 3), value=b"idem-%d" % i, on_delivery=report)
            idem.flush(10)
        other = KafkaProducer(bootstrap_servers=b.bootstrap, linger_ms=0)
        for i in range(60):
            other.send("idem", key=b"k%d" % (i % 3), value=b"other-%d" % i).get(timeout=10)
        other.close()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            got = consume_all(b.bootstrap)
            if not any(v.startswith(b"idem") for _, _, v in got):
                break  # every record of the idempotent producer was compacted away
            time.sleep(0.3)
        assert not any(v.startswith(b"idem") for _, _, v in got)
        b.kill()
        b.start()
        for i in range(10, 15):
            idem.produce("idem", key=b"k%d" % (i % 3), value=b"idem-%d" % i, on_delivery=report)
            idem.flush(20)
        assert errors == []
        latest_vals = {}
        for _, k, v in consume_all(b.bootstrap):
            latest_vals[k] = v
        assert latest_vals == {b"k0": b"idem-12", b"k1": b"idem-13", b"k2": b"idem-14"}


def test_max_compaction_lag_forces_a_pass_below_the_dirty_ratio(tmp_path, clock):
    import dataclasses
    lm = _manager(tmp_path, clock, _config())
    log = lm.get_or_create_log("c", 0)
    fill(log, clock, rounds=12, keys=5)
    clean_all(lm)
    passes = lm.cleaner.passes
    log.update_config(dataclasses.replace(log.config, min_cleanable_dirty_ratio=0.99,
                                          max_compaction_lag_ms=HOUR_MS))
    fill(log, clock, rounds=2, keys=5)  # a little dirty data: far below the ratio
    clean_all(lm)
    assert lm.cleaner.passes == passes
    clock.advance_ms(HOUR_MS + 1000)
    clean_all(lm)
    assert lm.cleaner.passes > passes
    inactive = [k for o, k, _ in records(log) if o < log.active_segment.base_offset]
    assert len(inactive) == len(set(inactive))
    lm.shutdown()


def test_compaction_drops_aborted_data_keeps_markers_committed_data_and_the_index(
        tmp_path, clock):
    """Aborted transactional batches go (Kafka's cleaner does the same); markers and
    committed transactional batches stay; the cleaned segment carries the aborted
    transactions of its originals in its .txnindex (and a reopen agrees)."""
    lm = _manager(tmp_path, clock, _config())
    log = lm.get_or_create_log("c", 0)
    ts = int(clock() * 1000)

    def txn(pid, value):
        b = BatchBuilder(0, 0, pid, 0, 0, True)
        b.append(ts, b"a", value)
        buf = bytearray(b.build())
        return log.append(buf, scan_batches(buf).batches, leader_epoch=0).first_offset

    def marker(pid, commit):
        mk = bytearray(build_control_batch(commit, pid, 0, 0, ts, coordinator_epoch=2))
        return log.append(mk, scan_batches(mk).batches, leader_epoch=0).first_offset

    aborted_at = txn(5, b"aborted")
    committed_at = txn(6, b"committed")
    end5 = marker(5, False)
    end6 = marker(6, True)
    aborted = AbortedTxn(5, aborted_at, end5, committed_at)
    log.append_aborted_txn(aborted)
    fill(log, clock, rounds=6, keys=3)
    clean_all(lm)
    assert lm.cleaner.passes >= 1
    kept = [h for _, data in read_all(log) for h in scan_batches(data).batches]
    assert [(h.base_offset, h.is_control) for h in kept if h.producer_id in (5, 6)] == [
        (committed_at, False), (end5, True), (end6, True)]
    assert log.collect_aborted_txns(0, log.log_end_offset) == [aborted]
    first_index = os.path.join(log.dir, f"{log.segments[0].base_offset:020d}.txnindex")
    assert os.path.getsize(first_index) == 34
    lm.shutdown()
    lm2 = _manager(tmp_path, clock, _config())
    assert lm2.get_or_create_log("c", 0).collect_aborted_txns(0, 1 << 40) == [aborted]
    lm2.shutdown()

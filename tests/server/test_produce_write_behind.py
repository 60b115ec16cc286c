"""Large produce batches written off the request loop (ReplicaManager.OFF_LOOP_WRITE_BYTES,
Log's write-behind), through a real broker: large and small appends to one partition from
several connections keep offset order with no gap, fetches running meanwhile only ever see
whole batches below the high watermark, idempotent producers keep their sequences, and an
acknowledged large batch survives a crash (SIGKILL) and restart."""

import threading
import time

from fastlog import _codec, protocol
from fastlog.protocol import ApiKey, Errors
from fastlog.server.replica_manager import OFF_LOOP_WRITE_BYTES
from fastlog.testing import BrokerProcess
from tests.server.wire import Wire, batch, create_topic, fetch_body, init_pid, produce

LARGE_VALUES = [bytes([65 + i % 26]) * 4096 for i in range(160)]   # ~650 KB uncompressed
N = len(LARGE_VALUES)


def fetch_all(broker, topic, end, max_bytes=64 << 20):
    """Every batch header and record values from offset 0 to `end`."""
    w = Wire(broker)
    try:
        out, offset = [], 0
        deadline = time.monotonic() + 30
        while offset < end and time.monotonic() < deadline:
            body = fetch_body(topic, offset, 0)
            body["max_bytes"] = max_bytes
            body["topics"][0]["partitions"][0]["partition_max_bytes"] = max_bytes
            p = w.call(ApiKey.FETCH, 11, body).responses[0].partitions[0]
            assert p.error_code == 0
            data = bytes(p.records or b"")
            r = _codec.scan_batches(data, 0, len(data), True)
            assert r.error is None, r.error
            for h in r.batches:
                out.append((h.base_offset, h.last_offset,
                            [rec.value for rec in _codec.iter_records(data, h.position)]))
                offset = h.last_offset + 1
        return out
    finally:
        w.close()


def test_large_and_small_appends_interleave_in_order(broker):
    topic = "wb-interleave"
    create_topic(broker, topic, configs={"max.message.bytes": str(8 << 20)})
    large = batch(LARGE_VALUES)
    assert len(large) >= OFF_LOOP_WRITE_BYTES
    acked: list = []
    errors: list = []
    stop = threading.Event()
    lock = threading.Lock()

    def producer(kind, n):
        w = Wire(broker)
        try:
            for i in range(n):
                values = LARGE_VALUES if kind == "large" else [b"%s-%d" % (kind.encode(), i)]
                r = produce(w, topic, batch(values), acks=1)
                with lock:
                    (acked if r.error_code == 0 else errors).append(
                        (r.base_offset, len(values), kind, i, r.error_code))
        finally:
            w.close()

    def watcher():
        # Fetches below the high watermark while appends run: whole valid batches, and
        # the high watermark never moves back.
        w = Wire(broker)
        try:
            last_hw = 0
            while not stop.is_set():
                p = w.call(ApiKey.FETCH, 11, fetch_body(topic, 0, 0)).responses[0].partitions[0]
                assert p.error_code == 0 and p.high_watermark >= last_hw
                last_hw = p.high_watermark
                data = bytes(p.records or b"")
                r = _codec.scan_batches(data, 0, len(data), True)
                assert r.error is None or isinstance(r.error, _codec.TruncatedError)
                assert all(h.last_offset < p.high_watermark for h in r.batches)
        except BaseException as e:  # reported by the test thread
            errors.append(("watcher", repr(e)))
        finally:
            w.close()

    threads = [threading.Thread(target=producer, args=("large", 8)) for _ in range(2)]
    threads += [threading.Thread(target=producer, args=(f"small{k}", 40)) for k in range(2)]
    watch = threading.Thread(target=watcher)
    watch.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    stop.set()
    watch.join(30)
    assert not errors and not any(t.is_alive() for t in threads)
    acked.sort()
    end = sum(n for _, n, _, _, _ in acked)
    # The acknowledged offsets tile [0, end) exactly, and every batch reads back at its
    # acknowledged offset with the values sent.
    offset = 0
    for base, n, _, _, _ in acked:
        assert base == offset
        offset += n
    got = fetch_all(broker, topic, end)
    assert [(b, last) for b, last, _ in got] == [(b, b + n - 1) for b, n, _, _, _ in acked]
    for (_, _, values), (_, _, kind, i, _) in zip(got, acked, strict=True):
        assert values == (LARGE_VALUES if kind == "large" else [b"%s-%d" % (kind.encode(), i)])
    # Each small producer's batches are in its own sending order.
    for k in range(2):
        mine = [i for _, _, kind, i, _ in acked if kind == f"small{k}"]
        assert mine == sorted(mine)


def test_idempotent_producer_sequences_across_large_batches(broker):
    topic = "wb-idempotent"
    create_topic(broker, topic, configs={"max.message.bytes": str(8 << 20)})
    w = Wire(broker)
    try:
        pid, epoch = init_pid(w)
        seq = 0
        offsets = []
        for i in range(6):
            values = LARGE_VALUES if i % 2 == 0 else [b"small-%d" % i]
            # Pipelined: the next request is sent before the previous one is answered.
            w.send(ApiKey.PRODUCE, 7, {
                "transactional_id": None, "acks": -1, "timeout_ms": 5000,
                "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch(
                    values, producer_id=pid, epoch=epoch, seq=seq)}]}]})
            seq += len(values)
        for _ in range(6):
            _, resp = protocol.decode_response(ApiKey.PRODUCE, 7, w.recv_frame())
            p = resp.responses[0].partition_responses[0]
            assert p.error_code == Errors.NONE
            offsets.append(p.base_offset)
        assert offsets == [0, N, N + 1, 2 * N + 1, 2 * N + 2, 3 * N + 2]
        # A retry of the last large batch is a duplicate: answered with its offset.
        r = produce(w, topic, batch(LARGE_VALUES, producer_id=pid, epoch=epoch,
                                    seq=seq - N - 1))
        assert r.error_code == Errors.NONE and r.base_offset == 2 * N + 2
    finally:
        w.close()


def test_acknowledged_large_batch_survives_a_crash(tmp_path):
    with BrokerProcess(tmp_path / "data") as b:
        create_topic(b, "wb-crash", configs={"max.message.bytes": str(8 << 20)})
        w = Wire(b)
        try:
            acked = [produce(w, "wb-crash", batch(LARGE_VALUES), acks=1) for _ in range(3)]
        finally:
            w.close()
        assert [r.error_code for r in acked] == [0, 0, 0]
        assert [r.base_offset for r in acked] == [0, N, 2 * N]
        b.kill()
        b.start()
        got = fetch_all(b, "wb-crash", 3 * N)
        assert [base for base, _, _ in got] == [0, N, 2 * N]
        assert all(values == LARGE_VALUES for _, _, values in got)


def test_clean_shutdown_while_large_batches_are_written(tmp_path):
    # SIGTERM while a connection sends large batches back to back: the broker exits 0,
    # and after a restart every acknowledged batch is there, in order, with no gap.
    with BrokerProcess(tmp_path / "data") as b:
        create_topic(b, "wb-stop", configs={"max.message.bytes": str(8 << 20)})
        acked: list = []
        request = batch(LARGE_VALUES)

        def stream():
            w = Wire(b)
            try:
                for _ in range(200):
                    r = produce(w, "wb-stop", request, acks=1)
                    if r.error_code == 0:
                        acked.append(r.base_offset)
            except (AssertionError, OSError):
                pass  # the broker went away mid-request
            finally:
                w.close()

        t = threading.Thread(target=stream)
        t.start()
        deadline = time.monotonic() + 30
        while len(acked) < 5 and time.monotonic() < deadline and t.is_alive():
            time.sleep(0.01)
        assert b.stop() == 0, b.log_tail()
        t.join(30)
        assert not t.is_alive() and len(acked) >= 5
        b.start()
        assert acked == [N * i for i in range(len(acked))]
        w = Wire(b)
        try:
            end = w.call(ApiKey.LIST_OFFSETS, 1, {"replica_id": -1, "topics": [{
                "name": "wb-stop", "partitions": [{"partition_index": 0, "timestamp": -1}]}]}
                ).topics[0].partitions[0].offset
        finally:
            w.close()
        assert end >= N * len(acked) and end % N == 0
        got = fetch_all(b, "wb-stop", end)
        assert [base for base, _, _ in got] == list(range(0, end, N))
        assert all(values == LARGE_VALUES for _, _, values in got)

"""fastlog.spark._arrow: record batches decode into the same rows read_records gives.

No Spark here (fast): the ColumnBuilder's buffers, wrapped by fetch.to_record_batch, are
compared with the codec's per-record decoder over plain and compressed batches, nulls,
headers, offset ranges cutting batches, control batches and a partial trailing batch.
"""

import pyarrow as pa
import pytest
from fastlog.spark._arrow import ColumnBuilder

from fastlog import _codec
from fastlog.spark.fetch import to_record_batch

pytest.importorskip("pyspark")
from pyspark.sql.pandas.types import to_arrow_schema  # noqa: E402

from fastlog.spark.source import FastlogDataSource, kafka_schema  # noqa: E402
from tests.spark.conftest import create_topic, produce  # noqa: E402


def _blob(batches):
    return b"".join(batches)


def _batches():
    out = []
    base = 0
    for i, codec in enumerate([0, 3, 4, 1, 0]):
        recs = []
        for j in range(7):
            n = base + j
            key = None if n % 5 == 0 else f"k{n}".encode()
            value = None if n % 11 == 3 else bytes([n % 256]) * (n % 13)
            headers = [("h", b"x"), ("n", None)] if n % 3 == 0 else None
            recs.append((1_700_000_000_000 + n, key, value, headers))
        out.append(_codec.build_batch(recs, compression=codec, base_offset=base,
                                      timestamp_type=1 if i == 2 else 0))
        base += 7
    return out


@pytest.mark.parametrize("start,stop", [(0, 35), (3, 30), (10, 11), (34, 100)])
def test_columns_match_read_records(start, stop):
    blob = _blob(_batches())
    expected = [r for r in _codec.read_records(blob) if start <= r.offset < stop]
    b = ColumnBuilder(True)
    nxt = b.add(memoryview(blob), start, stop)
    assert nxt == min(stop, 35)
    schema = to_arrow_schema(kafka_schema(True), timezone="UTC")
    rb = to_record_batch(b.finish(), "t", 4, schema)
    rb.validate(full=True)
    assert rb.schema == schema
    rows = rb.to_pylist()
    assert [r["offset"] for r in rows] == [r.offset for r in expected]
    assert [r["key"] for r in rows] == [r.key for r in expected]
    assert [r["value"] for r in rows] == [r.value for r in expected]
    assert [r["timestampType"] for r in rows] == [r.timestamp_type for r in expected]
    assert [int(r["timestamp"].timestamp() * 1000) for r in rows] == \
        [r.timestamp for r in expected]
    assert [r["headers"] or [] for r in rows] == \
        [[{"key": k, "value": v} for k, v in r.headers] for r in expected]
    assert {r["topic"] for r in rows} <= {"t"} and {r["partition"] for r in rows} <= {4}


def test_partial_batch_left_for_next_fetch_and_control_batches_skipped():
    batches = _batches()
    control = _codec.build_control_batch(True, 7, 0, 35, 0)
    blob = _blob(batches[:2]) + control
    b = ColumnBuilder(False)
    assert b.add(blob + batches[2][:30], 0, 100) == 36
    assert b.rows == 14
    rb = to_record_batch(b.finish(), "t", 0, to_arrow_schema(kafka_schema(False),
                                                               timezone="UTC"))
    assert rb.num_rows == 14 and rb.column("offset").to_pylist() == list(range(14))
    assert b.rows == 0


def test_corrupt_batch_raises_codec_error():
    blob = bytearray(_batches()[0])
    blob[-1] ^= 0xFF
    with pytest.raises(_codec.CorruptRecordError):
        ColumnBuilder(False).add(bytes(blob), 0, 10)
    assert isinstance(pa.py_buffer(b""), pa.Buffer)


def test_damaged_records_raise_codec_errors_never_crash():
    # With the CRC check off, every byte of a small batch is flipped in turn: the builder
    # either decodes something or raises a CodecError, and never reads out of bounds.
    batch = _codec.build_batch([(1, b"k", b"value", [("h", b"v")]), (2, None, b"", None)])
    for pos in range(61, len(batch)):
        for flip in (0x01, 0x80, 0xFF):
            blob = bytearray(batch)
            blob[pos] ^= flip
            b = ColumnBuilder(True)
            try:
                b.add(bytes(blob), 0, 10, verify_crc=False)
            except _codec.CodecError:
                continue
            b.finish()


def test_reader_hands_spark_whole_arrow_batches_of_its_schema(broker):
    """The executor's read() yields pyarrow.RecordBatches of exactly the Arrow schema Spark
    expects (no tuples, no per-row objects), with every record of the range in order."""
    create_topic(broker.bootstrap, "arrow-read", 2)
    produce(broker.bootstrap, "arrow-read", [(b"k%d" % i, b"v%d" % i) for i in range(3000)])
    source = FastlogDataSource({"kafka.bootstrap.servers": broker.bootstrap,
                                "subscribe": "arrow-read", "startingOffsets": "earliest"})
    schema = source.schema()
    reader = source.reader(schema)
    want = to_arrow_schema(schema, timezone="UTC")
    total = 0
    for part in reader.partitions():
        offsets = []
        for rb in reader.read(part):
            assert isinstance(rb, pa.RecordBatch)
            assert rb.schema.equals(want)
            offsets.extend(rb.column("offset").to_pylist())
        assert offsets == list(range(part.start, part.end))
        total += len(offsets)
    assert total == 3000


def test_tasks_in_one_worker_read_over_the_same_connection(broker):
    """Spark runs a worker's next task in the same Python process: its read() uses the
    connection the last task opened (no new connection, no new handshake), and opens a
    new one when that connection has closed."""
    from fastlog.spark import fetch

    create_topic(broker.bootstrap, "arrow-reuse", 1)
    produce(broker.bootstrap, "arrow-reuse", [(b"k%d" % i, b"v%d" % i) for i in range(100)])
    source = FastlogDataSource({"kafka.bootstrap.servers": broker.bootstrap,
                                "subscribe": "arrow-reuse", "startingOffsets": "earliest",
                                "maxRecordsPerPartition": "40"})
    reader = source.reader(source.schema())
    parts = reader.partitions()
    assert len(parts) == 3
    fetch.close_shared()
    try:
        conns = []
        for part in parts:
            rows = sum(rb.num_rows for rb in reader.read(part))
            assert rows == part.end - part.start
            assert len(fetch._shared) == 1
            (_, cluster), = fetch._shared.values()
            conns.append(list(cluster._conns.values()))   # held: no id reused
            if part is parts[1]:      # closed, as after the broker's connections.max.idle.ms
                runner = next(iter(fetch._shared.values()))[0]
                for conn in cluster._conns.values():
                    fetch.asyncio.run_coroutine_threadsafe(conn.close(), runner.loop).result(10)
        assert conns[0] and all(a is b for a, b in zip(conns[0], conns[1], strict=True))
        assert conns[2] and not any(a is b for a in conns[2] for b in conns[1])
    finally:
        fetch.close_shared()

"""The JVM batch reader (fastlog/spark/jvm) against the Python source, in a real local
Spark whose session loads the reader's jar (tests/spark/jvm_app.py, its own process).

One topic holds record batches of every codec (none, gzip, snappy, lz4, zstd), null keys
and a null value, a committed and an aborted transaction (control batches); another is
LogAppendTime. The JVM reader must give exactly the Python source's rows (schema, values,
offsets, timestamps) for whole topics and offset ranges, the same count() (reading no
column), and hand streams and the options it does not take to the Python source.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.spark.conftest import create_topic

ROOT = Path(__file__).resolve().parents[2]
MIXED, APPEND, LARGE, LOSSY = "jvm-mixed", "jvm-append", "jvm-large", "jvm-lossy"
LARGE_RECORDS, LARGE_VALUE = 40_000, 600     # 12 MB a partition: several Fetches each


@pytest.fixture(scope="module")
def jar():
    if shutil.which("javac") is None:
        pytest.skip("no javac: the JVM reader is not built")
    subprocess.run(["bash", str(ROOT / "scripts/build-spark-jar.sh"), sys.executable],
                   check=True, timeout=300)
    from fastlog.spark import jar_path
    return jar_path()


def fill(bootstrap) -> int:
    """The two topics; returns how many data records MIXED holds."""
    from confluent_kafka import Producer

    create_topic(bootstrap, MIXED, 2)
    create_topic(bootstrap, APPEND, 1, {"message.timestamp.type": "LogAppendTime"})
    n = 0
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                      "linger.ms": 20})
        for i in range(40):
            key = None if i % 4 == 0 else f"{codec}-k{i}".encode()
            value = None if i == 7 else f"{codec}-value-{i}".encode() * (1 + i % 5)
            p.produce(MIXED, value=value, key=key, partition=i % 2)
            n += 1
        assert p.flush(30) == 0
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "jvm-reader-txn",
                    "compression.type": "lz4"})
    txn.init_transactions(30)
    for values, commit in (([b"t-c1", b"t-c2"], True), ([b"t-a1"], False)):
        txn.begin_transaction()
        for v in values:
            txn.produce(MIXED, v, partition=0)
        assert txn.flush(10) == 0
        (txn.commit_transaction if commit else txn.abort_transaction)(30)
        n += len(values)
    plain = Producer({"bootstrap.servers": bootstrap})
    for i in range(5):
        plain.produce(MIXED, f"after-{i}".encode(), partition=0)
        plain.produce(APPEND, f"append-{i}".encode(), key=b"k", partition=0)
    assert plain.flush(30) == 0
    create_topic(bootstrap, LOSSY, 1)
    for i in range(100):
        plain.produce(LOSSY, f"lossy-{i}".encode(), partition=0)
    assert plain.flush(30) == 0
    from fastlog.client import SyncAdmin, TopicPartition
    with SyncAdmin(bootstrap) as admin:
        admin.delete_records({TopicPartition(LOSSY, 0): 60})
    create_topic(bootstrap, LARGE, 2)
    for codec in ("none", "lz4"):
        p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec,
                      "linger.ms": 20, "queue.buffering.max.messages": 100_000})
        for i in range(LARGE_RECORDS // 2):
            p.produce(LARGE, value=(f"{codec}-{i:08d}-".encode() * 60)[:LARGE_VALUE],
                      partition=i % 2)
            if i % 10_000 == 0:
                p.poll(0)
        assert p.flush(60) == 0
    return n + 5


@pytest.fixture(scope="module")
def results(broker, jar):
    total = fill(broker.bootstrap)
    sub = {"subscribe": MIXED}
    cases = [
        {"name": "whole", "kind": "rows", "options": sub},
        {"name": "both_topics", "kind": "rows",
         "options": {"subscribe": f"{MIXED},{APPEND}"}},
        {"name": "ranges", "kind": "rows", "options": {
            **sub, "startingOffsets": json.dumps({MIXED: {"0": 5, "1": -2}}),
            "endingOffsets": json.dumps({MIXED: {"0": 97, "1": 33}})}},
        {"name": "assign", "kind": "rows", "options": {
            "assign": json.dumps({MIXED: [1]}),
            "startingOffsets": json.dumps({MIXED: {"1": 17}})}},
        {"name": "no_topic", "kind": "rows", "options": {"subscribe": "jvm-no-such-topic"}},
        {"name": "count", "kind": "count", "options": sub},
        {"name": "large", "kind": "agg", "options": {"subscribe": LARGE}},
        {"name": "large_range", "kind": "agg", "options": {
            "subscribe": LARGE, "startingOffsets": json.dumps({LARGE: {"0": 777, "1": -2}}),
            "endingOffsets": json.dumps({LARGE: {"0": 15_555, "1": 19_999}})}},
        {"name": "large_count", "kind": "count", "options": {"subscribe": LARGE}},
        {"name": "count_range", "kind": "count", "options": {
            **sub, "startingOffsets": json.dumps({MIXED: {"0": 3, "1": 50}}),
            "endingOffsets": json.dumps({MIXED: {"0": 90, "1": -1}})}},
        {"name": "jvm_stream", "kind": "stream",
         "options": {**sub, "startingOffsets": "earliest"}},
        {"name": "headers", "kind": "columns", "options": {**sub, "includeHeaders": "true"}},
        {"name": "lost", "kind": "error", "options": {
            "subscribe": LOSSY, "startingOffsets": json.dumps({LOSSY: {"0": 10}})}},
        {"name": "after_deletion", "kind": "rows", "options": {"subscribe": LOSSY}},
        {"name": "beyond", "kind": "error", "options": {
            **sub, "startingOffsets": json.dumps({MIXED: {"0": 100000, "1": -2}})}},
    ]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests/spark/jvm_app.py"), jar, broker.bootstrap,
         json.dumps(cases)], cwd=ROOT, capture_output=True, text=True, timeout=600,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            got = json.loads(line)
            out[got["name"]] = got
    out["total"] = total
    return out


def test_rows_equal_the_python_sources(results):
    whole = results["whole"]
    assert "fastlog JVM reader" in whole["plan"]
    assert whole["jvm"] == whole["python"]
    # every data record, aborted ones too (read_uncommitted); markers are no rows
    assert len(whole["jvm"]) == results["total"]
    values = {bytes.fromhex(r[1]) for r in whole["jvm"] if r[1] is not None}
    assert {b"t-c1", b"t-a1", b"after-4", b"zstd-value-39" * 5} <= values
    assert sum(r[1] is None for r in whole["jvm"]) == 5           # one null value per codec
    assert sum(r[0] is None for r in whole["jvm"]) == 5 * 10 + 3 + 5
    both = results["both_topics"]
    assert both["jvm"] == both["python"]
    append = [r for r in both["jvm"] if r[2] == APPEND]
    assert len(append) == 5 and {r[6] for r in append} == {1}     # LogAppendTime


def test_offset_ranges_equal_the_python_sources(results):
    ranges = results["ranges"]
    assert ranges["jvm"] == ranges["python"]
    by_partition = {p: [r[4] for r in ranges["jvm"] if r[3] == p] for p in (0, 1)}
    assert min(by_partition[0]) >= 5 and max(by_partition[0]) < 97
    assert min(by_partition[1]) == 0 and max(by_partition[1]) < 33
    assert results["no_topic"]["jvm"] == results["no_topic"]["python"] == []
    assign = results["assign"]
    assert assign["jvm"] == assign["python"]
    assert {r[3] for r in assign["jvm"]} == {1} and min(r[4] for r in assign["jvm"]) == 17


def test_many_fetches_equal_the_python_sources(results):
    """Partitions of 12 MB, uncompressed and lz4: several Fetches each, the next in flight
    while one is decoded, batches straddling the range's ends."""
    large = results["large"]
    assert large["jvm"] == large["python"]
    assert [r[1] for r in large["jvm"]] == [LARGE_RECORDS // 2] * 2
    assert [r[4] for r in large["jvm"]] == [LARGE_RECORDS // 2 * LARGE_VALUE] * 2
    ranged = results["large_range"]
    assert ranged["jvm"] == ranged["python"]
    assert [r[1:4] for r in ranged["jvm"]] == [[15_555 - 777, 777, 15_554], [19_999, 0, 19_998]]
    assert results["large_count"]["jvm"] == results["large_count"]["python"] == LARGE_RECORDS


def test_count_reads_no_column(results):
    count = results["count"]
    assert count["jvm"] == count["python"] == results["total"]
    assert "fastlog JVM reader" in count["plan"] and "BatchScan fastlog[]" in count["plan"]
    ranged = results["count_range"]
    assert ranged["jvm"] == ranged["python"] > 0


def test_streams_and_other_options_go_to_the_python_source(results):
    stream = results["jvm_stream"]
    assert stream["exception"] is None
    assert stream["jvm"] == results["whole"]["python"]
    assert results["headers"]["columns"][-1] == "headers"


def test_a_start_beyond_the_log_end_is_refused(results):
    error = results["beyond"]["error"]
    assert error is not None
    assert f"option startingOffsets gives {MIXED}-0 offset 100000, beyond the end of its log" \
        in error


def test_deleted_records_fail_the_read_as_data_loss(results):
    """Records below the log start (DeleteRecords) that the range asks for: the task fails
    saying data was lost and naming failOnDataLoss (whose false the Python source takes);
    from earliest the read starts at the new log start."""
    error = results["lost"]["error"]
    assert error is not None and "Some data may have been lost" in error
    assert "failOnDataLoss" in error
    after = results["after_deletion"]
    assert after["jvm"] == after["python"]
    assert [r[4] for r in after["jvm"]] == list(range(60, 100))

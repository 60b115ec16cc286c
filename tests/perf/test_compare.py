"""perf/compare.py's own measuring parts: against a real broker, the lean Fetch loop reads
every batch of a topic exactly once, whatever the fetch size; a produce row turns the
harness's request count into records and CPU per request; a bad option is one sentence
with exit 2, a broker that cannot be reached or a load that fails one sentence with exit 1.
(The whole matrix is a benchmark, run by hand: perf/README.md.)"""

import subprocess
import sys
import time
from pathlib import Path

import pytest

from fastlog import _codec
from perf import compare
from tests.perf.scripts import assert_refused, check_rate
from tests.server.wire import Wire, create_topic, produce

COMPARE = Path(compare.__file__)


@pytest.mark.parametrize("fetch_bytes, chunk", [
    (1 << 16, compare.PAGE), (300_000, compare.PAGE), (8 << 20, compare.PAGE),
    (300_000, 70_000),   # batches cross the buffer's end: the incomplete one is kept
    (8 << 20, 30_000),   # a batch larger than the buffer: it grows
])
def test_lean_fetch_reads_every_batch_once(broker, fetch_bytes, chunk):
    topic = f"lean-{fetch_bytes}-{chunk}"
    create_topic(broker, topic)
    w = Wire(broker)
    sizes = []
    try:
        for i in range(12):  # 12 batches of 3 x 20 KB records
            batch = _codec.build_batch([(0, None, bytes([i]) * 20_000)] * 3)
            assert produce(w, topic, batch).error_code == 0
            sizes.append(len(batch))
    finally:
        w.close()
    got = compare.lean_fetch(broker.bootstrap, topic, sum(sizes), fetch_bytes, timeout=30,
                             chunk=chunk)
    assert got["bytes"] == sum(sizes)
    # whole batches only: at least one fetch per batch that fits a fetch of this size
    assert got["fetches"] >= -(-sum(sizes) // max(fetch_bytes, max(sizes)))
    # the rate is the bytes over the elapsed time, within the report's rounding (elapsed to
    # 0.1 ms, MB/s to 0.1; no speed asserted)
    check_rate(got["mb_per_s"], got["bytes"] / 1e6, got["elapsed_s"], 0.05)


def test_bad_fetch_size_is_one_sentence_and_exit_2():
    assert_refused(COMPARE, "--fetch-mib", "0,abc", needle="--fetch-mib")


@pytest.mark.parametrize("args, needle", [
    (["--broker", "x=127.0.0.1"], "--broker 'x=127.0.0.1'"),
    (["--broker", "x=127.0.0.1:1:abc"], "--broker 'x=127.0.0.1:1:abc'"),
    (["--broker", "x=127.0.0.1:abc"], "--broker 'x=127.0.0.1:abc'"),
    (["--broker", "x=127.0.0.1:70000"], "--broker 'x=127.0.0.1:70000'"),
    (["--broker", "x="], "--broker 'x='"),
    (["--broker", "x=:9092"], "--broker 'x=:9092'"),
    (["--broker", "=127.0.0.1:9092"], "--broker '=127.0.0.1:9092'"),
    (["--broker", "x"], "--broker 'x'"),
    (["--broker", "fastlog=127.0.0.1:9092"], "'fastlog' is taken"),
    (["--broker", "x=127.0.0.1:9092", "--broker", "x=127.0.0.1:9093"], "'x' is taken"),
    (["--timeout", "0"], "--timeout"),
    (["--timeout", "-1"], "--timeout"),
    (["--timeout", "nan"], "--timeout"),
    (["--reps", "0"], "--reps"),
    (["--reps", "-1"], "--reps"),
    (["--reps", "abc"], "--reps"),
])
def test_bad_arguments_are_one_sentence_and_exit_2(args, needle):
    assert_refused(COMPARE, "--quick", "--no-tansu", *args, needle=needle)


def test_unreachable_broker_is_one_sentence_and_exit_1():
    r = subprocess.run([sys.executable, str(COMPARE), "--quick", "--no-tansu",
                        "--broker", "x=127.0.0.1:1"], capture_output=True, text=True,
                       timeout=60, cwd=compare.ROOT)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        "compare.py: cannot connect to broker x at 127.0.0.1:1: connection refused"]
    assert r.stdout == ""


def test_failed_load_is_one_sentence():
    args = ["produce", "--bootstrap-server", "127.0.0.1:1", "--client", "confluent",
            "--num-records", 1]
    with pytest.raises(compare.RunError) as failed:
        compare.fastlog_perf(args, timeout=60)
    assert str(failed.value) == ("fastlog perf produce failed: fastlog perf: cannot connect "
                                 "to broker 127.0.0.1:1: connection refused")
    with pytest.raises(compare.RunError, match="did not finish within --timeout"):
        compare.fastlog_perf(args, timeout=0.001)


def test_produce_row_carries_records_and_cpu_per_request():
    b = compare.Broker("x", "127.0.0.1:1")
    summary = {"records": 10_000, "bytes": 1_000_000, "records_per_s": 1.0, "mb_per_s": 1.0,
               "produce_requests": 8}
    r = compare.row(b, "produce lz4", 0, summary, cpu=0.004, rss=None)
    assert r["records_per_request"] == 1250.0
    assert r["cpu_us_per_request"] == 500.0          # 4 ms over 8 requests
    assert r["cpu_us_per_record"] == 0.4
    table, _ = compare.summarize([r], ["x"], None)
    assert table[0]["records_per_request"] == 1250.0
    # a load that did not count its requests (our own client, a consume) has neither
    del summary["produce_requests"]
    r = compare.row(b, "consume", 0, summary, cpu=0.004, rss=None)
    assert "records_per_request" not in r and "cpu_us_per_request" not in r


_THREADED = """
import sys, threading, time
def burn():
    end = time.thread_time() + 0.2
    while time.thread_time() < end:
        pass
    burned.append(time.thread_time_ns())
burned = []
print("ready", flush=True)
sys.stdin.readline()
t = threading.Thread(target=burn)
t.start()
t.join()
print(burned[0], flush=True)
sys.stdin.readline()
"""


def _schedstat_sum(pid):
    total = 0
    for tid in Path(f"/proc/{pid}/task").iterdir():
        total += int((tid / "schedstat").read_text().split()[0])
    return total


def test_cpu_ns_keeps_the_time_of_threads_that_exited():
    """A process's CPU in ns is the sum over its threads of what task/*/schedstat shows,
    and stays so after a thread exits (a sum over the live threads loses that thread's
    time)."""
    p = subprocess.Popen([sys.executable, "-c", _THREADED], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "ready\n"
        # idle, one thread: both figures agree (the process does not run between the reads)
        before, live_before = compare.cpu_ns(p.pid), _schedstat_sum(p.pid)
        assert abs(before - live_before) < 1_000_000
        p.stdin.write("\n")
        p.stdin.flush()
        burned = int(p.stdout.readline())   # the ended thread's own CPU, ns
        deadline = time.monotonic() + 10    # joined; gone from the task list soon after
        while len(list(Path(f"/proc/{p.pid}/task").iterdir())) > 1:
            assert time.monotonic() < deadline, "the thread did not exit within 10 s"
            time.sleep(0.01)
        after, live_after = compare.cpu_ns(p.pid), _schedstat_sum(p.pid)
        assert after - before >= burned
        assert live_after - live_before < burned     # what a schedstat sum would lose
        # the broker's figure is that clock: the idle process's two readings agree
        broker_ns = compare.Broker("x", "127.0.0.1:1", p.pid).cpu_seconds() * 1e9
        assert abs(broker_ns - after) < 1_000_000
    finally:
        p.kill()
        p.wait(10)
    assert compare.cpu_ns(p.pid) is None             # gone: no figure rather than a wrong one
    assert compare.Broker("x", "127.0.0.1:1", p.pid).cpu_seconds() is None


@pytest.mark.parametrize("records, requests, codec", [(2_500, 3, 0), (900, 3, 3), (5, 100, 0)])
def test_produce_floor_writes_each_requests_records(tmp_path, records, requests, codec):
    """The produce floor server writes exactly the record batches of the requests it was
    sent (as many as asked, their sizes one record apart at most) and answers each; its
    CPU is measured as a broker's; the memory floor writes nothing."""
    path = tmp_path / "floor.log"
    rows = []
    compare.run_floors(rows.append, "produce lz4", 0, (
        (compare.FLOOR_FILE, "produce file"), (compare.FLOOR_MEMORY, "produce memory")),
        path, lambda sock: compare.floor_produce(sock, records, requests, codec))
    data = path.read_bytes()
    scan = _codec.scan_batches(data, 0, len(data))
    requests = min(requests, records)
    assert scan.valid_end == len(data) and len(scan.batches) == requests
    counts = [b.last_offset_delta + 1 for b in scan.batches]
    assert sum(counts) == records and max(counts) - min(counts) <= 1
    assert {b.attributes & 7 for b in scan.batches} == {codec}
    assert [r["broker"] for r in rows] == [compare.FLOOR_FILE, compare.FLOOR_MEMORY]
    for r in rows:
        assert r["workload"] == "produce lz4" and r["records"] == records
        assert r["records_per_request"] == round(records / requests, 1)
        assert r["cpu_us_per_record"] > 0 and r["cpu_us_per_request"] > 0
    assert path.stat().st_size == len(data)   # the memory floor left the file alone


def test_produce_records_span_reads_long_names_and_batches():
    batch = compare.floor_batch(3_000)        # a length of three varint bytes
    frame = compare.produce_frame("t" * 300, batch, client="c" * 200)
    view = memoryview(frame)[4:]
    start, end = compare.produce_records_span(view, len(view))
    assert bytes(view[start:end]) == batch
    with pytest.raises(ValueError):
        compare.produce_records_span(view[:-len(batch)], len(view) - len(batch))


def test_floors_keep_the_cadence_they_are_given(tmp_path):
    """Paced, request k goes out no sooner than k intervals after the first (librdkafka's
    cadence in the matrix); every request is still answered and every byte sent."""
    path, rows = tmp_path / "floor.log", []
    compare.run_floors(rows.append, "produce acks=1", 0, (
        (compare.FLOOR_FILE, "produce file"),), path,
        lambda sock: compare.floor_produce(sock, 600, 6, interval=0.02), interval_ms=20.0)
    compare.run_floors(rows.append, "consume", 0, ((compare.FLOOR_FILE, "fetch file"),), path,
                       lambda sock: compare.floor_fetch(sock, path.stat().st_size, 10_000,
                                                        600, interval=0.02), interval_ms=20.0)
    produced, fetched = rows
    assert produced["produce_requests"] == 6 and fetched["fetches"] >= 6
    # the requests were at least the interval apart (the run's time over its gaps)
    assert compare._interval(produced, produced["produce_requests"] - 1) >= 0.02 * 0.99
    assert compare._interval(fetched, fetched["fetches"] - 1) >= 0.02 * 0.99
    assert produced["interval_ms"] == fetched["interval_ms"] == 20.0


@pytest.mark.parametrize("chunk", [1_000, 65_536, 1 << 20, 10 << 20])
def test_fetch_floor_sends_the_file_in_chunks(tmp_path, chunk):
    """Both fetch floors send the file's bytes, in order, in responses of `chunk` bytes
    (the last one the rest), one request in flight."""
    path = tmp_path / "floor.log"
    path.write_bytes(b"".join(compare.floor_batch(500) for _ in range(40)))
    total = path.stat().st_size
    rows, got = [], []
    for name, mode in ((compare.FLOOR_FILE, "fetch file"),
                       (compare.FLOOR_MEMORY, "fetch memory")):
        kept = bytearray()
        got.append(kept)
        compare.run_floors(rows.append, "consume", 0, ((name, mode),), path,
                           lambda sock, kept=kept: compare.floor_fetch(sock, total, chunk,
                                                                        20_000, keep=kept))
    assert got == [path.read_bytes()] * 2
    for r in rows:
        assert r["fetches"] == -(-total // chunk) and r["records"] == 20_000
        assert r["cpu_us_per_record"] > 0 and r["cpu_us_per_fetch"] > 0


def test_matrix_reports_both_floors(tmp_path):
    """A short matrix against fastlog and a second fastlog as the peer: each produce
    workload and the consume have both floors' rows, in the rep's request and fetch
    sizes (fastlog's own counts, from its /metrics scraped around each run), and the
    summary their ratios and fastlog's distance to them (figures present and positive;
    no speed is asserted). The floors' files are removed."""
    brokers = [compare.start_fastlog(tmp_path), compare.start_fastlog(tmp_path, "peer")]
    opts = compare.parse_args(["--quick", "--no-tansu", "--fetch-mib", "1"])
    opts.records, opts.latency_records, opts.large_mib = 20_000, 1_000, 1
    work = tmp_path / "work"
    work.mkdir()
    try:
        rows = compare.run_matrix(brokers, opts, lambda r: None, work)
    finally:
        for b in brokers:
            b.stop()
    assert list(work.iterdir()) == []
    for w in ("produce acks=1", "produce acks=all", "produce lz4", "consume"):
        ours = compare._fastlog_row(rows, w, 0)
        floors = [r for r in rows if r["workload"] == w and r["broker"] in (
            compare.FLOOR_FILE, compare.FLOOR_MEMORY)]
        assert len(floors) == 2
        for f in floors:
            assert f["cpu_us_per_record"] > 0 and f["records"] == 20_000
            assert f["interval_ms"] > 0      # at fastlog's cadence in that rep
            if w == "consume":
                assert f["fetches"] == ours["fetches"] and f["cpu_us_per_fetch"] > 0
            else:
                # the broker's own count, scraped around the run, saw every record
                assert ours["metrics_records_in"] == ours["records"] == 20_000
                assert f["produce_requests"] == ours["produce_requests"]
                assert f["records_per_request"] == ours["records_per_request"]
                assert f["cpu_us_per_request"] > 0
    table, ratios = compare.summarize(rows, ["fastlog", "peer"], "peer")
    assert {t["broker"] for t in table} == {"fastlog", "peer", compare.FLOOR_FILE,
                                            compare.FLOOR_MEMORY}
    for key in ("produce_floor_vs_peer", "consume_floor_vs_peer",
                "consume_memory_floor_vs_peer"):
        assert ratios[key] > 0, key
    for key in ("produce_floor_vs_peer_each", "produce_memory_floor_vs_peer_each"):
        assert len(ratios[key]) == 3 and all(v > 0 for v in ratios[key]), key
    for key in ("produce_above_floor_us_per_record_each",
                "produce_above_floor_us_per_request_each"):
        assert len(ratios[key]) == 3 and all(isinstance(v, float) for v in ratios[key])
    assert isinstance(ratios["consume_above_floor_us_per_record"], float)
    assert isinstance(ratios["consume_above_floor_us_per_fetch"], float)

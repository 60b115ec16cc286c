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
        assert compare.Broker("x", "127.0.0.1:1", p.pid).cpu_seconds() * 1e9 >= after
    finally:
        p.kill()
        p.wait(10)
    assert compare.cpu_ns(p.pid) is None             # gone: no figure rather than a wrong one
    assert compare.Broker("x", "127.0.0.1:1", p.pid).cpu_seconds() is None

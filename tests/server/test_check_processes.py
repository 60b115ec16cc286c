"""Large produce batches checked in niced worker processes (fastlog/server/check_processes.py),
against a real broker: the worker runs at a lower priority, a killed worker costs no
request (the check runs on the broker's threads, then a new pool starts), and the
workers end with the broker, also when it is SIGKILLed. And the pool itself, in this
process: a frame's records read in place by the worker, bytes through the pipe."""

import asyncio
import concurrent.futures
import errno
import os
import random
import signal
import time

import pytest

from fastlog import _codec
from fastlog.protocol import Errors
from fastlog.server.check_processes import (
    NICE,
    CheckProcesses,
    RemoteReadError,
    _address_of,
    _check_in_place,
    _read_broker_memory,
)
from fastlog.server.replica_manager import check_records
from fastlog.testing import BrokerProcess, wait_until
from tests.server.wire import Wire, batch, create_topic, healthy, produce

TOPIC = "verified"


@pytest.fixture
def vbroker(tmp_path):
    b = BrokerProcess(tmp_path / "data")
    b.start()
    create_topic(b, TOPIC, configs={"max.message.bytes": str(16 << 20)})
    yield b
    if b.alive():
        b.stop()


def _big_batch(seed: int) -> bytes:
    """Over the inline bounds (2.4 MB of random values, gzip: checked off the loop)."""
    rng = random.Random(seed)
    return bytes(batch([rng.randbytes(1200) for _ in range(2000)], compression=1))


def _stat(pid: int) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rfind(b")") + 2:].split()


def _workers(parent: int) -> list[int]:
    """Children of `parent` at the check processes' nice value (fields: ppid 2nd, nice 17th)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            fields = _stat(int(name))
            if fields and int(fields[1]) == parent and int(fields[16]) == NICE:
                out.append(int(name))
    return out


def test_large_batches_are_checked_in_niced_worker_processes(vbroker):
    w = Wire(vbroker)
    try:
        r = produce(w, TOPIC, _big_batch(1), acks=1)
        assert r.error_code == Errors.NONE and r.base_offset == 0
        assert wait_until(lambda: _workers(vbroker.proc.pid), timeout=10)
        r = produce(w, TOPIC, batch([b"small"]), acks=1)
        assert r.error_code == Errors.NONE and r.base_offset == 2000
    finally:
        w.close()
    workers = _workers(vbroker.proc.pid)
    assert vbroker.stop() == 0
    assert wait_until(lambda: all(_stat(pid) is None or _stat(pid)[0] == b"Z"
                                  for pid in workers), timeout=10), "workers outlived the broker"
    # the workers read the batch out of the request frame (no fallback to the pipe)
    assert "cannot read the broker's memory" not in vbroker.log_path.read_text(errors="replace")


def test_a_killed_worker_costs_no_request(vbroker):
    w = Wire(vbroker)
    try:
        assert produce(w, TOPIC, _big_batch(2), acks=1).error_code == Errors.NONE
        assert wait_until(lambda: _workers(vbroker.proc.pid), timeout=10)
        for pid in _workers(vbroker.proc.pid):
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.5)   # the pool notices its worker is gone
        offsets = []
        for seed in (3, 4, 5):
            r = produce(w, TOPIC, _big_batch(seed), acks=1)
            assert r.error_code == Errors.NONE
            offsets.append(r.base_offset)
        assert offsets == [2000, 4000, 6000]
        assert healthy(vbroker)
        # a new pool: checks run in worker processes again
        assert wait_until(lambda: _workers(vbroker.proc.pid), timeout=10)
    finally:
        w.close()
    text = vbroker.log_path.read_text(errors="replace")
    assert "Traceback" not in text, vbroker.log_tail()


def test_workers_die_with_a_killed_broker(vbroker):
    w = Wire(vbroker)
    try:
        assert produce(w, TOPIC, _big_batch(6), acks=1).error_code == Errors.NONE
    finally:
        w.close()
    assert wait_until(lambda: _workers(vbroker.proc.pid), timeout=10)
    workers = _workers(vbroker.proc.pid)
    vbroker.proc.kill()
    vbroker.proc.wait(10)
    assert wait_until(lambda: all(_stat(pid) is None or _stat(pid)[0] == b"Z"
                                  for pid in workers), timeout=10), "workers outlived the broker"


def _check_in(cp: CheckProcesses, records):
    async def run():
        with concurrent.futures.ThreadPoolExecutor(1) as fallback:
            return await cp.check(fallback, check_records, records, 16 << 20, True,
                                  _codec.DEFAULT_DECOMPRESS_LIMIT, True, False)
    return asyncio.run(run())


def test_a_worker_reads_the_frame_in_place_and_bytes_go_through_the_pipe():
    """A request frame's records (a writable view) are read by the worker out of this
    process's memory (process_vm_readv); bytes without an address go through the pipe;
    both answer what check_records answers here, bad batches too."""
    good = _big_batch(7)
    bad = bytearray(good)
    bad[-1] ^= 0xFF   # the CRC no longer matches
    cp = CheckProcesses(1)
    try:
        frame = bytearray(b"head" + good + b"tail")
        headers = _check_in(cp, memoryview(frame)[4:4 + len(good)])
        assert cp.read_in_place, "the worker could not read the frame in place"
        assert [(h.base_offset, h.record_count) for h in headers] == [(0, 2000)]
        assert [h.record_count for h in _check_in(cp, good)] == [2000]   # bytes: the pipe
        err = _check_in(cp, memoryview(bad))
        assert isinstance(err, _codec.CodecError) and type(err) is type(
            check_records(bytes(bad), 16 << 20, True, _codec.DEFAULT_DECOMPRESS_LIMIT))
    finally:
        cp.close()


def test_an_unreadable_address_is_an_error_of_that_read_only():
    """A worker's read of memory the broker does not map (EFAULT) raises for that read and
    leaves in-place reads on (only a refusal of the call itself turns them off)."""
    with pytest.raises(RemoteReadError) as e:
        _read_broker_memory(os.getpid(), 8, 4096)
    assert e.value.errno == errno.EFAULT
    kept = bytearray(b"abc")
    assert _read_broker_memory(os.getpid(), _address_of(memoryview(kept)), 3) == b"abc"
    assert _address_of(memoryview(b"abc")) is None   # read-only: no in-place read


def test_a_failed_read_in_a_worker_comes_back_as_its_error_and_the_pool_keeps_working():
    """A worker's failed read (EFAULT here; EPERM under a ptrace policy) reaches the broker
    as RemoteReadError with its errno, not as a broken pool: later checks still run in the
    same workers."""
    cp = CheckProcesses(1)
    try:
        future = cp._get_pool().submit(_check_in_place, os.getpid(), 8, 4096, len)
        with pytest.raises(RemoteReadError) as e:
            future.result(60)
        assert e.value.errno == errno.EFAULT
        kept = bytearray(b"abcd")
        assert cp._get_pool().submit(_check_in_place, os.getpid(),
                                     _address_of(memoryview(kept)), 4, bytes).result(60) == b"abcd"
    finally:
        cp.close()


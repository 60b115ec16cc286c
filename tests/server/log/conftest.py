"""Shared helpers for storage tests: real files under tmp_path, a controllable clock."""

import pytest

from fastlog._codec import build_batch, scan_batches, validate_record_set
from fastlog.server.log import Log, LogConfig


def make_batch(n_records=1, timestamp=1000, value_size=10, ts_step=1, key=b"k"):
    """A v2 batch of n records at timestamp, timestamp + ts_step, ... (offsets from 0)."""
    return build_batch([(timestamp + i * ts_step, key, bytes([65 + i % 26]) * value_size)
                        for i in range(n_records)])


def record_set(*batches):
    """(writable buffer, headers) as the broker hands them to Log.append."""
    buf = bytearray(b"".join(batches))
    return buf, validate_record_set(buf)


class Clock:
    """A time_fn for Log/LogManager that only moves when the test says so."""

    def __init__(self, start_s=1_700_000_000.0):
        self.now = start_s

    def __call__(self):
        return self.now

    def advance_ms(self, ms):
        self.now += ms / 1000.0


@pytest.fixture
def clock():
    return Clock()


def append_n(log, n, records=2, value_size=20, ts=None, epoch=0):
    """Append n single-batch calls; returns the list of (base, last, max_ts) appended."""
    out = []
    for i in range(n):
        t = ts(i) if callable(ts) else (1000 + i if ts is None else ts)
        buf, hs = record_set(make_batch(records, timestamp=t, value_size=value_size))
        info = log.append(buf, hs, leader_epoch=epoch)
        out.append((info.first_offset, info.last_offset, info.max_timestamp))
    return out


def open_log(path, **cfg):
    config = LogConfig(**cfg)
    return Log.open(str(path), config)


def read_all(log, start=None):
    """Every batch (base offset, bytes) from start to the log end, via Log.read."""
    out, offset = [], log.log_start_offset if start is None else start
    while offset < log.log_end_offset:
        info = log.read(offset, 1 << 20)
        if not info.regions:
            break
        data = b"".join(r.read() for r in info.regions)
        res = scan_batches(data, verify_crc=True)
        assert res.batches, (offset, res)
        for h in res.batches:
            if h.last_offset >= offset:
                out.append((h.base_offset, data[h.position:h.end]))
        offset = res.batches[-1].next_offset
    return out

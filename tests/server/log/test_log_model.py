"""Stateful property test: append / read / truncate / roll / delete-records / reopen (clean
and after a crash) against a plain list-of-batches model."""

import shutil
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from fastlog._codec import scan_batches
from fastlog.server.log import Log, LogConfig, OffsetOutOfRangeError
from tests.server.log.conftest import make_batch, record_set

CFG = LogConfig(segment_bytes=500, index_interval_bytes=100, segment_index_bytes=64,
                retention_ms=-1)


class LogModel(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="fastlog-model-")
        self.path = f"{self.root}/m-0"
        self.log = Log.open(self.path, CFG)
        self.batches = []  # (base, last, bytes as stored)
        self.start = 0
        self.ts = 1000

    def teardown(self):
        self.log.close()
        shutil.rmtree(self.root, ignore_errors=True)

    @property
    def end(self):
        return self.batches[-1][1] + 1 if self.batches else self.start

    @rule(sizes=st.lists(st.tuples(st.integers(1, 4), st.integers(0, 60)), min_size=1,
                         max_size=3))
    def append(self, sizes):
        raws = []
        for n, vs in sizes:
            self.ts += 5
            raws.append(make_batch(n, timestamp=self.ts, value_size=vs))
        buf, hs = record_set(*raws)
        info = self.log.append(buf, hs, leader_epoch=1)
        assert info.first_offset == self.end
        for h in hs:
            self.batches.append((h.base_offset, h.last_offset, bytes(buf[h.position:h.end])))

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def read(self, data):
        offset = data.draw(st.integers(self.start, self.end))
        info = self.log.read(offset, data.draw(st.integers(1, 2000)))
        if offset == self.end:
            assert info.regions == []
            return
        got = scan_batches(info.regions[0].read())
        first = next(b for b in self.batches if b[1] >= offset)
        assert got.batches and got.batches[0].base_offset == first[0]
        i = self.batches.index(first)
        blob = info.regions[0].read()
        for h, want in zip(got.batches, self.batches[i:], strict=False):
            assert blob[h.position:h.end] == want[2]

    @rule(offset=st.integers(-5, 400))
    def read_out_of_range(self, offset):
        if self.start <= offset <= self.end:
            return
        try:
            self.log.read(offset, 100)
        except OffsetOutOfRangeError:
            return
        raise AssertionError(f"read at {offset} outside [{self.start}, {self.end}] worked")

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def truncate(self, data):
        offset = data.draw(st.integers(self.start, self.end))
        self.log.truncate_to(offset)
        if offset <= self.start:
            self.batches, self.start = [], offset
        else:
            removed = [b for b in self.batches if b[1] >= offset]
            self.batches = [b for b in self.batches if b[1] < offset]
            if not self.batches and removed:
                # The batch holding the log start went: the log restarts at its base.
                self.start = removed[0][0]
        # the log ends at the last whole batch below the target
        assert self.log.log_end_offset == self.end

    @rule()
    def roll(self):
        self.log.roll()

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def delete_records(self, data):
        offset = data.draw(st.integers(self.start, self.end))
        assert self.log.delete_records_before(offset) == offset
        self.start = offset
        self.batches = [b for b in self.batches if b[1] >= offset]
        self.log.delete_old_segments()

    @rule()
    def reopen_clean(self):
        rp = self.log.recovery_point
        self.log.close()
        self.log = Log.open(self.path, CFG, recovery_point=rp, log_start_offset=self.start)

    @rule()
    def reopen_after_crash(self):
        # No close: indexes stay preallocated and untrimmed, as after a power cut
        # (the data itself was written, so nothing may be lost).
        rp = self.log.recovery_point
        self.log = Log.open(self.path, CFG, recovery_point=rp, log_start_offset=self.start,
                            clean_shutdown=False)

    @invariant()
    def offsets_agree(self):
        assert self.log.log_end_offset == self.end
        assert self.log.log_start_offset == self.start


TestLogModel = LogModel.TestCase
TestLogModel.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
